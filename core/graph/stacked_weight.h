#pragma once
// One expert's matrix within a stacked weight (MATMUL_ID, ABI 2.5): E matrices of [R, cols] one after
// another, so expert e's rows start e · R rows in — in the values (or packed words) and, when
// quantized, in the scales and biases alike. Header-only, for backend plugins and the host.
#include <cstdint>
#include <optional>

#include "sluice/graph.h"

namespace sluice::graph {

// Bytes of one row of w's values or packed words; 0 for a form this does not know (MXFP4's codes).
inline uint64_t weight_row_bytes(const sl_weight& w) {
  if (w.bits == 0) {
    switch (w.dtype) {
      case SL_DTYPE_F32: return uint64_t(w.cols) * 4;
      case SL_DTYPE_F16:
      case SL_DTYPE_BF16: return uint64_t(w.cols) * 2;
      default: return 0;
    }
  }
  if (w.dtype != SL_DTYPE_U32 || (uint64_t(w.cols) * w.bits) % 32 != 0) return 0;
  return uint64_t(w.cols) * w.bits / 8;
}

// Bytes of one row of an affine weight's scales (or biases).
inline uint64_t weight_row_scale_bytes(const sl_weight& w) {
  if (w.bits == 0 || w.group_size == 0 || w.cols % w.group_size != 0) return 0;
  return uint64_t(w.cols / w.group_size) * (w.scale_dtype == SL_DTYPE_F32 ? 4 : 2);
}

// Expert e's [R, cols] of the stacked w (R = w.rows / n_experts), or nothing where the form's rows
// have no fixed size or e is not one of the experts.
inline std::optional<sl_weight> expert_slice(const sl_weight& w, uint32_t n_experts, uint32_t e) {
  if (n_experts == 0 || w.rows % n_experts != 0 || e >= n_experts) return std::nullopt;
  const uint64_t R = w.rows / n_experts, row = weight_row_bytes(w);
  if (row == 0) return std::nullopt;
  sl_weight s = w;
  s.rows = static_cast<uint32_t>(R);
  s.offset = w.offset + uint64_t(e) * R * row;
  if (w.bits != 0) {
    const uint64_t srow = weight_row_scale_bytes(w);
    if (srow == 0) return std::nullopt;
    s.scales_offset = w.scales_offset + uint64_t(e) * R * srow;
    s.biases_offset = w.biases_offset + uint64_t(e) * R * srow;
  }
  return s;
}

}  // namespace sluice::graph
