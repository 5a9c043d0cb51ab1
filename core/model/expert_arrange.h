#pragma once
// gpt-oss stores each expert input-major: gate_up [H, 2F] with gate and up interleaved along the 2F
// (column 2j is gate's output j, 2j + 1 up's), down [F, H]. MATMUL multiplies by [out, in] matrices,
// so an expert is rearranged on the host as it is used — gate [F, H], up [F, H], down [H, F] in the
// stored dtype, and its biases (gate_up's de-interleaved) as float32 — whether its bytes came from
// the mapped file or from the streaming store's cache. Experts in MXFP4 stay MXFP4 where the backend
// multiplies that form (ABI 2.3): only gate_up's interleaved rows are parted, whole rows of codes and
// scales copied; elsewhere they are decoded to bf16.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/expert_layout.h"

namespace sluice {

struct ArrangedExpert {
  struct Span {
    const void* data = nullptr;
    uint64_t bytes = 0;
  };
  // [F, H], [F, H], [H, F]: values of value_bytes each; kept in MXFP4, gate's and up's codes (down's
  // are mx_down's, in the store's part).
  std::vector<std::byte> gate, up, down;
  std::vector<float> gate_bias, up_bias, down_bias;  // [F], [F], [H]
  // Kept in MXFP4: gate's and up's scales [F, H / 32]; down's codes [H, F / 2] and scales [H, F / 32]
  // are the store's parts as they are (output-major already, so nothing is copied).
  bool mxfp4 = false;
  std::vector<std::byte> gate_scales, up_scales;
  Span mx_down, mx_down_scales;

  // Projection p's (ExpertLayout::Projection) values or MXFP4 codes, and its MXFP4 scales.
  Span weight(uint32_t p) const;
  Span scales(uint32_t p) const;
};

// One acquired expert of MoE layer `moe_layer` in a fused form (its n_parts() parts as the store
// handed them back), arranged by the form's function below; keep_mxfp4: an MXFP4 expert stays MXFP4
// (the backend multiplies the form).
void arrange_expert(const ExpertLayout& layout, uint32_t moe_layer, const void* const* parts, bool keep_mxfp4, ArrangedExpert& out);

// value_bytes: 2 (bf16, f16) or 4 (f32) for the weights; bias_dtype: an sl_dtype (F32, F16, BF16).
void arrange_fused_expert(const void* gate_up, const void* down, const void* gate_up_bias, const void* down_bias, uint32_t hidden,
                          uint32_t ffn, uint32_t value_bytes, uint32_t bias_dtype, ArrangedExpert& out);

// The MXFP4 form (OpenAI's checkpoints): blocks [out, in / 32, 16] of 4-bit codes (low nibble first)
// and scales [out, in / 32] (exponents biased by 127), output-major already; decoded to bf16 — exact,
// as transformers decodes them — gate from gate_up's even rows, up from its odd ones.
void arrange_mxfp4_expert(const void* gate_up_blocks, const void* gate_up_scales, const void* down_blocks, const void* down_scales,
                          const void* gate_up_bias, const void* down_bias, uint32_t hidden, uint32_t ffn, uint32_t bias_dtype,
                          ArrangedExpert& out);

// The MXFP4 form kept: gate's codes and scales from gate_up's even rows, up's from its odd ones (whole
// rows copied), down's the parts themselves; biases de-interleaved to float32 as above.
void keep_mxfp4_expert(const void* gate_up_blocks, const void* gate_up_scales, const void* down_blocks, const void* down_scales,
                       const void* gate_up_bias, const void* down_bias, uint32_t hidden, uint32_t ffn, uint32_t bias_dtype,
                       ArrangedExpert& out);

}  // namespace sluice
