#pragma once
// gpt-oss stores each expert input-major: gate_up [H, 2F] with gate and up interleaved along the 2F
// (column 2j is gate's output j, 2j + 1 up's), down [F, H]. MATMUL multiplies by [out, in] matrices,
// so an expert is rearranged on the host as it is used — gate [F, H], up [F, H], down [H, F] in the
// stored dtype, and its biases (gate_up's de-interleaved) as float32 — whether its bytes came from
// the mapped file or from the streaming store's cache.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

struct ArrangedExpert {
  std::vector<std::byte> gate, up, down;         // [F, H], [F, H], [H, F]; values of value_bytes each
  std::vector<float> gate_bias, up_bias, down_bias;  // [F], [F], [H]
};

// value_bytes: 2 (bf16, f16) or 4 (f32) for the weights; bias_dtype: an sl_dtype (F32, F16, BF16).
void arrange_fused_expert(const void* gate_up, const void* down, const void* gate_up_bias, const void* down_bias, uint32_t hidden,
                          uint32_t ffn, uint32_t value_bytes, uint32_t bias_dtype, ArrangedExpert& out);

}  // namespace sluice
