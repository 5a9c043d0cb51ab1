#include "model/expert_arrange.h"

#include <algorithm>
#include <cstring>

#include "sluice/graph.h"
#include "util/mxfp4.h"
#include "util/vec.h"

namespace sluice {
namespace {

float bias_value(const std::byte* p, uint32_t dtype, std::size_t i) {
  if (dtype == SL_DTYPE_F32) {
    float v;
    std::memcpy(&v, p + i * 4, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p + i * 2, 2);
  return dtype == SL_DTYPE_BF16 ? cpu::bf16_to_f32(h) : cpu::f16_to_f32(h);
}

// dst[c, r] = src[r, stride * c + first] for r < rows, c < cols: column `first` of every `stride`
// of a [rows, cols * stride] matrix, transposed. Values are moved as bytes (their dtype stays).
void transpose_columns(const std::byte* src, uint32_t rows, uint32_t cols, uint32_t stride, uint32_t first, uint32_t value_bytes,
                       std::byte* dst) {
  const std::size_t src_row = std::size_t(cols) * stride * value_bytes;
  // Blocks of rows keep the reads of a block's source rows within cache while the columns are walked.
  constexpr uint32_t kBlock = 64;
  for (uint32_t r0 = 0; r0 < rows; r0 += kBlock) {
    const uint32_t r1 = std::min(rows, r0 + kBlock);
    for (uint32_t c = 0; c < cols; ++c) {
      std::byte* out = dst + (std::size_t(c) * rows + r0) * value_bytes;
      const std::byte* in = src + std::size_t(r0) * src_row + (std::size_t(c) * stride + first) * value_bytes;
      for (uint32_t r = r0; r < r1; ++r, in += src_row, out += value_bytes) std::memcpy(out, in, value_bytes);
    }
  }
}

// bf16 of a float32 that bf16 holds exactly (every MXFP4 value does): its high half.
void store_bf16(const float* v, std::size_t n, std::byte* out) {
  for (std::size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    const uint16_t h = static_cast<uint16_t>(bits >> 16);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

void fill_biases(const void* gate_up_bias, const void* down_bias, uint32_t hidden, uint32_t ffn, uint32_t bias_dtype, ArrangedExpert& out) {
  const auto* gub = static_cast<const std::byte*>(gate_up_bias);
  const auto* db = static_cast<const std::byte*>(down_bias);
  out.gate_bias.resize(ffn);
  out.up_bias.resize(ffn);
  out.down_bias.resize(hidden);
  for (uint32_t j = 0; j < ffn; ++j) {
    out.gate_bias[j] = bias_value(gub, bias_dtype, 2 * std::size_t(j));
    out.up_bias[j] = bias_value(gub, bias_dtype, 2 * std::size_t(j) + 1);
  }
  for (uint32_t j = 0; j < hidden; ++j) out.down_bias[j] = bias_value(db, bias_dtype, j);
}

}  // namespace

void arrange_mxfp4_expert(const void* gate_up_blocks, const void* gate_up_scales, const void* down_blocks, const void* down_scales,
                          const void* gate_up_bias, const void* down_bias, uint32_t hidden, uint32_t ffn, uint32_t bias_dtype,
                          ArrangedExpert& out) {
  const std::size_t matrix = std::size_t(hidden) * ffn * 2;
  out.gate.resize(matrix);
  out.up.resize(matrix);
  out.down.resize(matrix);
  std::vector<float> row(std::max(hidden, ffn));
  const auto* gub = static_cast<const uint8_t*>(gate_up_blocks);
  const auto* gus = static_cast<const uint8_t*>(gate_up_scales);
  for (uint32_t r = 0; r < 2 * ffn; ++r) {  // row r of gate_up: gate's r / 2 (even) or up's (odd)
    mxfp4::decode_row(gub + std::size_t(r) * hidden / 2, gus + std::size_t(r) * hidden / 32, hidden, row.data());
    std::byte* dst = (r % 2 == 0 ? out.gate : out.up).data() + std::size_t(r / 2) * hidden * 2;
    store_bf16(row.data(), hidden, dst);
  }
  const auto* db = static_cast<const uint8_t*>(down_blocks);
  const auto* ds = static_cast<const uint8_t*>(down_scales);
  for (uint32_t r = 0; r < hidden; ++r) {
    mxfp4::decode_row(db + std::size_t(r) * ffn / 2, ds + std::size_t(r) * ffn / 32, ffn, row.data());
    store_bf16(row.data(), ffn, out.down.data() + std::size_t(r) * ffn * 2);
  }
  fill_biases(gate_up_bias, down_bias, hidden, ffn, bias_dtype, out);
}

void keep_mxfp4_expert(const void* gate_up_blocks, const void* gate_up_scales, const void* down_blocks, const void* down_scales,
                       const void* gate_up_bias, const void* down_bias, uint32_t hidden, uint32_t ffn, uint32_t bias_dtype,
                       ArrangedExpert& out) {
  const std::size_t code_row = hidden / 2, scale_row = hidden / 32;
  out.mxfp4 = true;
  out.gate.resize(std::size_t(ffn) * code_row);
  out.up.resize(std::size_t(ffn) * code_row);
  out.gate_scales.resize(std::size_t(ffn) * scale_row);
  out.up_scales.resize(std::size_t(ffn) * scale_row);
  const auto* gub = static_cast<const std::byte*>(gate_up_blocks);
  const auto* gus = static_cast<const std::byte*>(gate_up_scales);
  for (uint32_t j = 0; j < ffn; ++j) {  // gate_up's row 2j is gate's row j, 2j + 1 up's
    std::memcpy(out.gate.data() + j * code_row, gub + (2 * std::size_t(j)) * code_row, code_row);
    std::memcpy(out.up.data() + j * code_row, gub + (2 * std::size_t(j) + 1) * code_row, code_row);
    std::memcpy(out.gate_scales.data() + j * scale_row, gus + (2 * std::size_t(j)) * scale_row, scale_row);
    std::memcpy(out.up_scales.data() + j * scale_row, gus + (2 * std::size_t(j) + 1) * scale_row, scale_row);
  }
  out.mx_down = {down_blocks, uint64_t(hidden) * ffn / 2};
  out.mx_down_scales = {down_scales, uint64_t(hidden) * ffn / 32};
  fill_biases(gate_up_bias, down_bias, hidden, ffn, bias_dtype, out);
}

ArrangedExpert::Span ArrangedExpert::weight(uint32_t p) const {
  if (mxfp4 && p == ExpertLayout::kDown) return mx_down;
  const std::vector<std::byte>& v = p == ExpertLayout::kGate ? gate : p == ExpertLayout::kUp ? up : down;
  return {v.data(), v.size()};
}

ArrangedExpert::Span ArrangedExpert::scales(uint32_t p) const {
  if (!mxfp4) return {};
  if (p == ExpertLayout::kDown) return mx_down_scales;
  const std::vector<std::byte>& v = p == ExpertLayout::kGate ? gate_scales : up_scales;
  return {v.data(), v.size()};
}

void arrange_expert(const ExpertLayout& layout, uint32_t moe_layer, const void* const* part, bool keep_mxfp4, ArrangedExpert& out) {
  const auto& gate = layout.projection(moe_layer, ExpertLayout::kGate);
  const uint32_t hidden = gate.cols, ffn = gate.rows;
  if (layout.form() == ExpertLayout::Form::kFusedMxfp4 && keep_mxfp4)
    keep_mxfp4_expert(part[ExpertLayout::kGateUpBlocks], part[ExpertLayout::kGateUpScales], part[ExpertLayout::kDownBlocks],
                      part[ExpertLayout::kDownScales], part[ExpertLayout::kMxGateUpBias], part[ExpertLayout::kMxDownBias], hidden, ffn,
                      layout.bias_dtype(), out);
  else if (layout.form() == ExpertLayout::Form::kFusedMxfp4)
    arrange_mxfp4_expert(part[ExpertLayout::kGateUpBlocks], part[ExpertLayout::kGateUpScales], part[ExpertLayout::kDownBlocks],
                         part[ExpertLayout::kDownScales], part[ExpertLayout::kMxGateUpBias], part[ExpertLayout::kMxDownBias], hidden, ffn,
                         layout.bias_dtype(), out);
  else
    arrange_fused_expert(part[ExpertLayout::kGateUp], part[ExpertLayout::kDownPart], part[ExpertLayout::kGateUpBias],
                         part[ExpertLayout::kDownBias], hidden, ffn, gate.dtype == SL_DTYPE_F32 ? 4 : 2, layout.bias_dtype(), out);
}

void arrange_fused_expert(const void* gate_up, const void* down, const void* gate_up_bias, const void* down_bias, uint32_t hidden,
                          uint32_t ffn, uint32_t value_bytes, uint32_t bias_dtype, ArrangedExpert& out) {
  const std::size_t matrix = std::size_t(hidden) * ffn * value_bytes;
  out.gate.resize(matrix);
  out.up.resize(matrix);
  out.down.resize(matrix);
  const auto* gu = static_cast<const std::byte*>(gate_up);
  transpose_columns(gu, hidden, ffn, 2, 0, value_bytes, out.gate.data());
  transpose_columns(gu, hidden, ffn, 2, 1, value_bytes, out.up.data());
  transpose_columns(static_cast<const std::byte*>(down), ffn, hidden, 1, 0, value_bytes, out.down.data());
  fill_biases(gate_up_bias, down_bias, hidden, ffn, bias_dtype, out);
}

}  // namespace sluice
