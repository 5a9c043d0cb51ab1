#pragma once
// gpt-oss stores each expert input-major: gate_up [H, 2F] with gate and up interleaved along the 2F
// (column 2j is gate's output j, 2j + 1 up's), down [F, H]. MATMUL multiplies by [out, in] matrices,
// so an expert is rearranged on the host as it is used — gate [F, H], up [F, H], down [H, F] in the
// stored dtype, and its biases (gate_up's de-interleaved) as float32 — whether its bytes came from
// the mapped file or from the streaming store's cache.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/expert_layout.h"

namespace sluice {

struct ArrangedExpert {
  std::vector<std::byte> gate, up, down;         // [F, H], [F, H], [H, F]; values of value_bytes each
  std::vector<float> gate_bias, up_bias, down_bias;  // [F], [F], [H]
};

// One acquired expert of MoE layer `moe_layer` in a fused form (its n_parts() parts as the store
// handed them back), arranged by the form's function below.
void arrange_expert(const ExpertLayout& layout, uint32_t moe_layer, const void* const* parts, ArrangedExpert& out);

// value_bytes: 2 (bf16, f16) or 4 (f32) for the weights; bias_dtype: an sl_dtype (F32, F16, BF16).
void arrange_fused_expert(const void* gate_up, const void* down, const void* gate_up_bias, const void* down_bias, uint32_t hidden,
                          uint32_t ffn, uint32_t value_bytes, uint32_t bias_dtype, ArrangedExpert& out);

// The MXFP4 form (OpenAI's checkpoints): blocks [out, in / 32, 16] of 4-bit codes (low nibble first)
// and scales [out, in / 32] (exponents biased by 127), output-major already; decoded to bf16 — exact,
// as transformers decodes them — gate from gate_up's even rows, up from its odd ones.
void arrange_mxfp4_expert(const void* gate_up_blocks, const void* gate_up_scales, const void* down_blocks, const void* down_scales,
                          const void* gate_up_bias, const void* down_bias, uint32_t hidden, uint32_t ffn, uint32_t bias_dtype,
                          ArrangedExpert& out);

// One row of `cols` MXFP4 values (cols / 32 blocks of 16 bytes and cols / 32 scales) as float32.
void decode_mxfp4_row(const uint8_t* blocks, const uint8_t* scales, uint32_t cols, float* out);

}  // namespace sluice
