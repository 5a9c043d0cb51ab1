#include "turbo/opencl_source.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "kvcodec_turbo_cl.h"  // kKvcodecTurboCl: kernels_cl/kvcodec_turbo.cl as a string

namespace sluice::turbo {
namespace {

std::string number(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9gf", v);
  return buf;
}

}  // namespace

std::string mse_opencl_source(const MseStage& stage) {
  const auto& blocks = stage.blocks();
  std::string s;
  s += "#define SL_TQ(name) SL_KV_FN(tq_##name)\n";
  s += "#define SL_TQ_HEAD_DIM " + std::to_string(stage.head_dim()) + "u\n";
  s += "#define SL_TQ_BITS " + std::to_string(stage.bits()) + "u\n";
  s += "#define SL_TQ_ROW_BYTES " + std::to_string(stage.row_bytes()) + "u\n";
  s += "#define SL_TQ_N_BLOCKS " + std::to_string(blocks.size()) + "u\n";
  s += "#define SL_TQ_N_ROT " + std::to_string(stage.rotations()) + "u\n";
  uint32_t max_block = 0;
  for (const auto& b : blocks) max_block = std::max(max_block, b.n);
  s += "#define SL_TQ_MAX_BLOCK " + std::to_string(max_block) + "\n";
  s += "#define SL_TQ_SCALE_MODE " + std::to_string(static_cast<int>(stage.scale_mode())) + "\n";
  s += "__constant uint SL_TQ(n_rot) = " + std::to_string(stage.rotations()) + "u;\n";
  auto uints = [&](const char* name, auto get) {
    s += "__constant uint SL_TQ(" + std::string(name) + ")[" + std::to_string(blocks.size()) + "] = {";
    for (std::size_t i = 0; i < blocks.size(); ++i) s += (i ? ", " : "") + std::to_string(get(blocks[i])) + "u";
    s += "};\n";
  };
  uints("block_offset", [](const MseBlock& b) { return b.offset; });
  uints("block_size", [](const MseBlock& b) { return b.n; });
  uints("block_byte", [](const MseBlock& b) { return b.byte_offset; });
  s += "__constant float SL_TQ(codebook)[" + std::to_string(blocks.size() * 16) + "] = {";
  for (std::size_t i = 0; i < blocks.size(); ++i)
    for (uint32_t k = 0; k < 16; ++k) s += (i + k ? ", " : "") + number(blocks[i].lut.entries[k]);
  s += "};\n__constant float SL_TQ(signs)[" + std::to_string(stage.rotations() * stage.head_dim()) + "] = {";
  bool first = true;
  for (uint32_t r = 0; r < stage.rotations(); ++r)
    for (const auto& b : blocks)
      for (float v : b.rotations[r].scaled_signs()) {
        s += (first ? "" : ", ") + number(v);
        first = false;
      }
  s += "};\n";
  // The same signs as bits (set = negative) and one magnitude per block: work-items reading
  // neighbouring coordinates read one word, where the float table costs a constant-cache access
  // per distinct address.
  const uint32_t n_signs = stage.rotations() * stage.head_dim();
  std::vector<uint32_t> bits((n_signs + 31) / 32, 0);
  uint32_t k = 0;
  for (uint32_t r = 0; r < stage.rotations(); ++r)
    for (const auto& b : blocks)
      for (float v : b.rotations[r].scaled_signs()) {
        if (std::signbit(v)) bits[k / 32] |= 1u << (k % 32);
        ++k;
      }
  s += "__constant uint SL_TQ(sign_bits)[" + std::to_string(bits.size()) + "] = {";
  for (std::size_t i = 0; i < bits.size(); ++i) s += (i ? ", " : "") + std::to_string(bits[i]) + "u";
  s += "};\n__constant float SL_TQ(sign_scale)[" + std::to_string(blocks.size()) + "] = {";
  for (std::size_t i = 0; i < blocks.size(); ++i) s += (i ? ", " : "") + number(std::fabs(blocks[i].rotations[0].scaled_signs()[0]));
  s += "};\n";
  s += kKvcodecTurboCl;
  s += "\n#undef SL_TQ\n#undef SL_TQ_HEAD_DIM\n#undef SL_TQ_BITS\n#undef SL_TQ_ROW_BYTES\n#undef SL_TQ_N_BLOCKS\n#undef SL_TQ_N_ROT\n"
       "#undef SL_TQ_MAX_BLOCK\n#undef SL_TQ_SCALE_MODE\n";
  return s;
}

}  // namespace sluice::turbo
