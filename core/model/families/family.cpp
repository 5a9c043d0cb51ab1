#include "model/families/family.h"

#include "model/families/deepseek_v3.h"
#include "model/families/gemma.h"
#include "model/families/gemma4.h"
#include "model/families/gpt_oss.h"
#include "model/families/llama.h"
#include "model/families/phi3.h"
#include "model/families/qwen3_5.h"
#include "model/families/shared_bindings.h"

namespace sluice::families {

namespace {

uint64_t value_bytes(uint32_t dtype) { return dtype == SL_DTYPE_F16 || dtype == SL_DTYPE_BF16 ? 2 : 4; }

}  // namespace

Status WeightSource::bind_rows(sl_weight& dst, const std::string& name, std::vector<int64_t> shape, uint32_t first, uint32_t count) {
  sl_weight whole{};
  if (auto s = bind(whole, name, shape); !s) return s;
  if (uint64_t(first) + count > whole.rows)
    return make_error("tensor '" + name + "': rows " + std::to_string(first) + ".." + std::to_string(uint64_t(first) + count) +
                      " lie past its " + std::to_string(whole.rows));
  dst = whole;
  dst.rows = count;
  if (whole.bits == 0) {
    dst.offset += uint64_t(first) * whole.cols * value_bytes(whole.dtype);
  } else {  // packed words, then one scale and one bias per group of a row
    const uint64_t groups = whole.cols / whole.group_size;
    dst.offset += uint64_t(first) * (uint64_t(whole.cols) * whole.bits / 32) * 4;
    dst.scales_offset += uint64_t(first) * groups * value_bytes(whole.scale_dtype);
    dst.biases_offset += uint64_t(first) * groups * value_bytes(whole.scale_dtype);
  }
  return {};
}

std::string Family::router_module(const ModelConfig& c, int layer) const {
  const char* module = c.architecture == "mixtral" ? "block_sparse_moe.gate" : c.architecture == "gemma4_text" ? "router.proj" : "mlp.gate";
  return layer_prefix(layer) + module;
}

const Family* family_for(const ModelConfig& config) {
  static const GptOss gpt_oss;
  static const Llama llama;
  static const Gemma gemma;
  static const Phi3 phi3;
  static const Gemma4 gemma4;
  static const Qwen3_5 qwen3_5;
  static const DeepseekV3 deepseek_v3;
  const std::string& t = config.architecture;
  if (t == "llama" || t == "mistral" || t == "mixtral" || t == "qwen2" || t == "qwen3" || t == "qwen3_moe" || t == "olmoe") return &llama;
  if (t == "gemma2" || t == "gemma3_text") return &gemma;
  if (t == "phi3") return &phi3;
  if (t == "gemma4_text") return &gemma4;
  if (t == "gpt_oss") return &gpt_oss;
  if (t == "qwen3_5_text" || t == "qwen3_5_moe_text") return &qwen3_5;
  if (t == "deepseek_v3") return &deepseek_v3;
  return nullptr;
}

}  // namespace sluice::families
