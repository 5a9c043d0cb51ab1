#pragma once
// Affine-quantized weights (MLX layout) as the CPU backend reads them, in place.
//
// A row of `cols` values is a little-endian bit stream of `bits`-bit codes packed into uint32 words,
// low bits first: code i occupies bits [i*bits, (i+1)*bits) of the row, so 3-, 5- and 6-bit codes
// straddle word boundaries. Each run of `group` columns has one scale and one bias (f32, f16 or bf16),
// and the weight is scale * q + bias. Groups start on word boundaries (group * bits is a multiple of 32),
// which every MLX group size (32, 64, 128) satisfies for every width.
//
// Kernels never build a dequantized copy: matvec accumulates per group s_qx = sum(q * x) in registers
// and folds it as scale * s_qx + bias * sum(x), with sum(x) per group computed once per activation row.
#include <cstddef>
#include <cstdint>

#include "sluice/backend.h"
#include "util/vec.h"

namespace sluice::cpu {

struct QuantView {
  const uint32_t* words = nullptr;
  const std::byte* scales = nullptr;
  const std::byte* biases = nullptr;
  uint32_t scale_dtype = SL_DTYPE_BF16;
  uint32_t rows = 0, cols = 0, bits = 0, group = 0;
  std::size_t words_per_row = 0;   // cols * bits / 32
  std::size_t groups_per_row = 0;  // cols / group
  std::size_t words_per_group = 0; // group * bits / 32

  const uint32_t* row(std::size_t r) const { return words + r * words_per_row; }
  // Scale or bias number i (row-major over [rows, groups_per_row]).
  static float param(const std::byte* base, uint32_t dtype, std::size_t i) {
    switch (dtype) {
      case SL_DTYPE_F32: {
        float v;
        std::memcpy(&v, base + i * 4, 4);
        return v;
      }
      case SL_DTYPE_F16: {
        uint16_t h;
        std::memcpy(&h, base + i * 2, 2);
        return f16_to_f32(h);
      }
      default: {
        uint16_t h;
        std::memcpy(&h, base + i * 2, 2);
        return bf16_to_f32(h);
      }
    }
  }
  float scale(std::size_t r, std::size_t g) const { return param(scales, scale_dtype, r * groups_per_row + g); }
  float bias(std::size_t r, std::size_t g) const { return param(biases, scale_dtype, r * groups_per_row + g); }
};

// Code i of a bit stream (any width 1..8).
inline uint32_t quant_code(const uint32_t* stream, std::size_t i, uint32_t bits) {
  const std::size_t bit = i * bits;
  const std::size_t w = bit >> 5;
  const uint32_t sh = static_cast<uint32_t>(bit & 31);
  uint32_t v = stream[w] >> sh;
  if (sh + bits > 32) v |= stream[w + 1] << (32 - sh);
  return v & ((1u << bits) - 1u);
}

// The `count` codes of a bit stream starting at code 0, as floats (count a multiple of 32 / gcd).
inline void unpack_codes(const uint32_t* stream, std::size_t count, uint32_t bits, float* out) {
  switch (bits) {
    case 8:
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>((stream[i >> 2] >> ((i & 3) * 8)) & 0xffu);
      return;
    case 4:
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>((stream[i >> 3] >> ((i & 7) * 4)) & 0xfu);
      return;
    case 2:
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>((stream[i >> 4] >> ((i & 15) * 2)) & 0x3u);
      return;
    default:
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(quant_code(stream, i, bits));
  }
}

// Checks a quantized weight's form and that its words, scales and biases lie inside their buffers.
// Returns an empty string when usable, else why not.
const char* quant_weight_problem(const sl_weight* w);
QuantView quant_view(const sl_weight* w);

// Row r dequantized to float32 (cols values).
void quant_row_to_f32(const QuantView& q, std::size_t r, float* dst);

// x (n values, a multiple of 16) with each run of 16 reordered evens first, then odds: the order in
// which the 4-bit kernel meets a run's codes.
void permute_for_nibbles(const float* x, std::size_t n, float* xp);

// out[t, r] = sum_c x[t, c] * w[r, c] for n_act <= 4 activation rows, output rows [r0, r1).
// xsum[t * groups_per_row + g] holds sum(x[t, group g]); xperm is x through permute_for_nibbles for
// 4-bit weights on AVX2 (else unused, may be null).
void quant_matvec_rows(const QuantView& q, const float* x, const float* xperm, const float* xsum, uint32_t n_act,
                       std::size_t r0, std::size_t r1, float* out, std::size_t out_stride);
// The decode path of matmul for a quantized weight (checked with quant_weight_problem), on the pool.
void quant_matvec(sl_backend* be, const float* x, uint32_t n_act, const sl_weight* w, float* out);

}  // namespace sluice::cpu
