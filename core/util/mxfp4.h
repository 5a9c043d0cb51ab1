#pragma once
// MXFP4 (ABI 2.3's SL_DTYPE_E2M1 weights with SL_DTYPE_E8M0 scales, sluice/graph.h): what a value is,
// for the backends that read the form in place and for the host. Header-only (plugins include it).
// A row of cols values is cols / 2 bytes of 4-bit e2m1 codes (column c in byte c / 2, low nibble for
// even c) and cols / 32 scale bytes; value = e2m1(code) * 2^(scale - 127) as float32.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sluice/graph.h"

namespace sluice::mxfp4 {

inline constexpr uint32_t kBlock = 32;  // values a scale

// The sixteen e2m1 values, code order (bit 3 the sign).
inline constexpr float kE2m1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// 2^(s - 127) as float32, exactly: the exponent field for s >= 1, 2^-127 (a subnormal) for s = 0;
// s = 255 gives infinity (the format's NaN has no defined product).
inline float scale_value(uint8_t s) {
  const uint32_t bits = s ? uint32_t(s) << 23 : 0x00400000u;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Whether a weight is in the MXFP4 form (the fields sluice/graph.h fixes for it).
inline bool is_mxfp4(const sl_weight& w) {
  return w.dtype == SL_DTYPE_E2M1 && w.bits == 4 && w.group_size == kBlock && w.scale_dtype == SL_DTYPE_E8M0;
}

// The form's fields for a [rows, cols] weight, no buffers (for asking supports_node).
inline sl_weight weight_form(uint32_t rows, uint32_t cols) {
  sl_weight w{};
  w.struct_size = sizeof(w);
  w.dtype = SL_DTYPE_E2M1;
  w.rows = rows;
  w.cols = cols;
  w.bits = 4;
  w.group_size = kBlock;
  w.scale_dtype = SL_DTYPE_E8M0;
  return w;
}

inline uint64_t row_bytes(uint32_t cols) { return cols / 2; }
inline uint64_t scales_per_row(uint32_t cols) { return cols / kBlock; }

// One row's values as float32 (the products' own: code value times the block's scale, exact).
inline void decode_row(const uint8_t* codes, const uint8_t* scales, uint32_t cols, float* out) {
  for (uint32_t g = 0; g < cols / kBlock; ++g) {
    const float s = scale_value(scales[g]);
    for (uint32_t b = 0; b < kBlock / 2; ++b) {
      const uint8_t byte = codes[g * (kBlock / 2) + b];
      out[g * kBlock + 2 * b] = kE2m1[byte & 0x0F] * s;
      out[g * kBlock + 2 * b + 1] = kE2m1[byte >> 4] * s;
    }
  }
}

}  // namespace sluice::mxfp4
