#include "quant/affine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/vec.h"

namespace sluice::quant {

float bf16_to_f32(uint16_t h) { return cpu::bf16_to_f32(h); }

uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float round_to(DType dtype, float v) {
  switch (dtype) {
    case DType::kBF16: return bf16_to_f32(f32_to_bf16(v));
    case DType::kF16: return cpu::f16_to_f32(cpu::f32_to_f16(v));
    default: return v;
  }
}

void store_as(DType dtype, const float* v, std::size_t n, std::byte* out) {
  for (std::size_t i = 0; i < n; ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(out + i * 4, &v[i], 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(v[i]) : cpu::f32_to_f16(v[i]);
      std::memcpy(out + i * 2, &h, 2);
    }
  }
}

void load_as_f32(DType dtype, const std::byte* src, std::size_t n, float* out) {
  if (dtype == DType::kF32) {
    std::memcpy(out, src, n * 4);
    return;
  }
  const auto* h = reinterpret_cast<const uint16_t*>(src);
  if (dtype == DType::kBF16)
    cpu::bf16_row_to_f32(h, out, n);
  else
    cpu::f16_row_to_f32(h, out, n);
}

void quantize_row(const float* w, std::size_t cols, int bits, int group, DType scale_dtype, uint32_t* words,
                  float* scales, float* biases) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const std::size_t words_per_row = cols * static_cast<std::size_t>(bits) / 32;
  std::fill(words, words + words_per_row, 0u);
  std::size_t bit = 0;
  for (std::size_t g = 0; g * group < cols; ++g) {
    const float* v = w + g * group;
    float lo = v[0], hi = v[0];
    for (int i = 1; i < group; ++i) {
      lo = std::min(lo, v[i]);
      hi = std::max(hi, v[i]);
    }
    const bool edge_is_min = std::fabs(lo) > std::fabs(hi);
    float scale = std::max((hi - lo) / n_bins, 1e-7f);
    if (!edge_is_min) scale = -scale;
    const float edge = edge_is_min ? lo : hi;
    const float q0 = std::nearbyint(edge / scale);
    float bias = 0.0f;
    if (q0 != 0.0f) {
      scale = edge / q0;
      bias = edge;
    }
    scale = round_to(scale_dtype, scale);
    bias = round_to(scale_dtype, bias);
    scales[g] = scale;
    biases[g] = bias;
    for (int i = 0; i < group; ++i, bit += bits) {
      const float q = std::clamp(std::nearbyint((v[i] - bias) / scale), 0.0f, n_bins);
      const uint64_t code = static_cast<uint64_t>(q) << (bit & 31);
      words[bit >> 5] |= static_cast<uint32_t>(code);
      if ((bit & 31) + bits > 32) words[(bit >> 5) + 1] |= static_cast<uint32_t>(code >> 32);
    }
  }
}

void dequantize_row(const uint32_t* words, const float* scales, const float* biases, std::size_t cols, int bits,
                    int group, float* out) {
  const uint32_t mask = (1u << bits) - 1u;
  for (std::size_t i = 0; i < cols; ++i) {
    const std::size_t bit = i * bits;
    uint64_t v = words[bit >> 5];
    if ((bit & 31) + bits > 32) v |= static_cast<uint64_t>(words[(bit >> 5) + 1]) << 32;
    const uint32_t q = static_cast<uint32_t>(v >> (bit & 31)) & mask;
    out[i] = scales[i / group] * static_cast<float>(q) + biases[i / group];
  }
}

}  // namespace sluice::quant
