#pragma once
// Inner loops over bit-packed codebook indices, templated on the bit width B (1 … 4).
//
// Packing: coordinate j of a block has a B-bit index at bit j·B of the block's index bytes (little-
// endian), so each group of 8 coordinates is exactly B bytes. On AVX2 one group is: load B bytes,
// broadcast, shift lane l right by l·B, and look the 8 indices up in the codebook with one
// _mm256_permutevar8x32_ps (it uses the low 3 bits of each lane). 16-entry codebooks (B = 4) take a
// second permute and a blend on bit 3; smaller ones are repeated to fill 8 lanes so higher bits do
// not matter. No index is ever unpacked to memory in the fused paths.
#include <cstdint>
#include <cstring>

#include "util/vec.h"

namespace sluice::turbo {

// A codebook laid out for the lookups above.
struct Lut {
  alignas(32) float lo[8];  // entries 0..7 (repeated for B < 3)
  alignas(32) float hi[8];  // entries 8..15 (B = 4)
  float entries[16];        // plain table for the scalar path
};

inline Lut make_lut(const float* centroids, uint32_t bits) {
  Lut l{};
  const uint32_t levels = 1u << bits;
  for (uint32_t k = 0; k < 16; ++k) l.entries[k] = centroids[k % levels];
  for (uint32_t k = 0; k < 8; ++k) {
    l.lo[k] = centroids[k % levels];
    l.hi[k] = centroids[(8 + k) % levels];
  }
  return l;
}

template <int B>
inline uint32_t load_group(const uint8_t* p) {
  if constexpr (B == 3) {  // byte-wise: a 3-byte copy into a word then a 4-byte load stalls store forwarding
    uint16_t lo;
    std::memcpy(&lo, p, 2);
    return lo | static_cast<uint32_t>(p[2]) << 16;
  } else {
    uint32_t u = 0;
    std::memcpy(&u, p, B);
    return u;
  }
}

#ifdef SLUICE_CPU_AVX2
template <int B>
inline __m256 lookup8(uint32_t packed, __m256 lo, __m256 hi) {
  const __m256i shifts = _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B);
  const __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(packed)), shifts);
  __m256 v = _mm256_permutevar8x32_ps(lo, idx);
  if constexpr (B == 4)
    v = _mm256_blendv_ps(v, _mm256_permutevar8x32_ps(hi, idx), _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
  return v;
}
#endif

// Σ_j q[j] · c[idx_j] over n coordinates (n a multiple of 8).
template <int B>
inline float dot_packed(const uint8_t* idx, const float* q, uint32_t n, const Lut& lut) {
#ifdef SLUICE_CPU_AVX2
  const __m256 lo = _mm256_load_ps(lut.lo), hi = _mm256_load_ps(lut.hi);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  uint32_t g = 0;
  for (; g + 16 <= n; g += 16, idx += 2 * B) {
    acc0 = _mm256_fmadd_ps(lookup8<B>(load_group<B>(idx), lo, hi), _mm256_loadu_ps(q + g), acc0);
    acc1 = _mm256_fmadd_ps(lookup8<B>(load_group<B>(idx + B), lo, hi), _mm256_loadu_ps(q + g + 8), acc1);
  }
  if (g < n) acc0 = _mm256_fmadd_ps(lookup8<B>(load_group<B>(idx), lo, hi), _mm256_loadu_ps(q + g), acc0);
  return cpu::hsum(_mm256_add_ps(acc0, acc1));
#else
  float sum = 0.0f;
  for (uint32_t g = 0; g < n; g += 8, idx += B) {
    const uint32_t u = load_group<B>(idx);
    for (uint32_t l = 0; l < 8; ++l) sum += q[g + l] * lut.entries[(u >> (l * B)) & ((1u << B) - 1)];
  }
  return sum;
#endif
}

// acc[j] += a · c[idx_j]
template <int B>
inline void axpy_packed(float a, const uint8_t* idx, float* acc, uint32_t n, const Lut& lut) {
#ifdef SLUICE_CPU_AVX2
  const __m256 lo = _mm256_load_ps(lut.lo), hi = _mm256_load_ps(lut.hi), va = _mm256_set1_ps(a);
  for (uint32_t g = 0; g < n; g += 8, idx += B)
    _mm256_storeu_ps(acc + g, _mm256_fmadd_ps(va, lookup8<B>(load_group<B>(idx), lo, hi), _mm256_loadu_ps(acc + g)));
#else
  for (uint32_t g = 0; g < n; g += 8, idx += B) {
    const uint32_t u = load_group<B>(idx);
    for (uint32_t l = 0; l < 8; ++l) acc[g + l] += a * lut.entries[(u >> (l * B)) & ((1u << B) - 1)];
  }
#endif
}

// out[j] = a · c[idx_j]
template <int B>
inline void unpack_scaled(float a, const uint8_t* idx, float* out, uint32_t n, const Lut& lut) {
#ifdef SLUICE_CPU_AVX2
  const __m256 lo = _mm256_load_ps(lut.lo), hi = _mm256_load_ps(lut.hi), va = _mm256_set1_ps(a);
  for (uint32_t g = 0; g < n; g += 8, idx += B)
    _mm256_storeu_ps(out + g, _mm256_mul_ps(va, lookup8<B>(load_group<B>(idx), lo, hi)));
#else
  for (uint32_t g = 0; g < n; g += 8, idx += B) {
    const uint32_t u = load_group<B>(idx);
    for (uint32_t l = 0; l < 8; ++l) out[g + l] = a * lut.entries[(u >> (l * B)) & ((1u << B) - 1)];
  }
#endif
}

// Packs n indices (one per byte, each < 2^B) into n·B/8 bytes.
template <int B>
inline void pack_indices(const uint8_t* indices, uint32_t n, uint8_t* out) {
  for (uint32_t g = 0; g < n; g += 8, out += B) {
    uint32_t u = 0;
    for (uint32_t l = 0; l < 8; ++l) u |= static_cast<uint32_t>(indices[g + l]) << (l * B);
    std::memcpy(out, &u, B);
  }
}

// Σ_i s_i · x_i with s_i = +1 where bit i of `bits` is set and −1 where not, given Σ x_i.
inline float signed_sum(const uint8_t* bits, const float* x, uint32_t n, float sum_x) {
  float pos = 0.0f;
  uint32_t i = 0;
#ifdef SLUICE_CPU_AVX2
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256i b = _mm256_and_si256(_mm256_set1_epi32(bits[i / 8]), sel);
    acc = _mm256_add_ps(acc, _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(b, sel)), _mm256_loadu_ps(x + i)));
  }
  pos = cpu::hsum(acc);
#endif
  for (; i < n; ++i)
    if ((bits[i / 8] >> (i % 8)) & 1) pos += x[i];
  return 2.0f * pos - sum_x;
}

}  // namespace sluice::turbo
