#pragma once
// MXFP4 weights (ABI 2.3, core/util/mxfp4.h) as the CPU backend multiplies them, in place: a load turns
// 8 (AVX2) or 16 (AVX-512) codes of a row into float32 — the e2m1 value by a table lookup in registers
// (vpermps), times the block's power-of-two scale, which is exact — and the dot products accumulate
// them in the lanes, order and horizontal sums of the bf16 kernels (cpu_matmul.cpp, core/util/vec.h).
// Every MXFP4 value in float32's range is exact in bf16, so a product gives the bits the same product
// gives on the weight decoded to bf16 (tests/engine/moe_test.cpp holds gpt-oss's logits to that). The
// weight streams at 4.25 bits a value instead of 16.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu_backend.h"
#include "quant_kernels.h"  // hsum512, prefetch_ahead
#include "util/mxfp4.h"
#include "util/vec.h"

namespace sluice::cpu {

struct Mxfp4Row {
  const uint8_t* codes;   // cols / 2 bytes
  const uint8_t* scales;  // cols / 32 bytes
};

inline Mxfp4Row mxfp4_row(const sl_weight* w, std::size_t r) {
  const auto* codes = reinterpret_cast<const uint8_t*>(weight_data(w));
  const auto* scales = reinterpret_cast<const uint8_t*>(w->scales->data + w->scales_offset);
  return {codes + r * mxfp4::row_bytes(w->cols), scales + r * mxfp4::scales_per_row(w->cols)};
}

// The value of column i.
inline float mxfp4_value(const Mxfp4Row& row, std::size_t i) {
  const uint8_t byte = row.codes[i / 2];
  return mxfp4::kE2m1[i % 2 ? byte >> 4 : byte & 0x0F] * mxfp4::scale_value(row.scales[i / mxfp4::kBlock]);
}

// An MXFP4 weight's form and extent, or why it cannot be multiplied ("" when it can).
inline const char* mxfp4_weight_problem(const sl_weight* w) {
  if (!w->data || !w->scales) return "MXFP4 weight without codes or scales";
  if (w->cols == 0 || w->cols % mxfp4::kBlock) return "MXFP4 weight's cols is not a multiple of 32";
  if (w->biases) return "MXFP4 weight with affine biases";
  if (!fits(w->data->bytes, w->offset, uint64_t(w->rows) * mxfp4::row_bytes(w->cols))) return "MXFP4 codes run past their buffer";
  if (!fits(w->scales->bytes, w->scales_offset, uint64_t(w->rows) * mxfp4::scales_per_row(w->cols)))
    return "MXFP4 scales run past their buffer";
  return "";
}

#ifdef SLUICE_CPU_AVX2
// Columns i..i+7 (i a multiple of 8: one block, four bytes) as floats.
inline __m256 load_mxfp4x8(const Mxfp4Row& row, std::size_t i) {
  uint32_t word;
  std::memcpy(&word, row.codes + i / 2, 4);  // nibble k is column i + k
  const __m256i codes = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                         _mm256_set1_epi32(15));
  const __m256 magnitude = _mm256_permutevar8x32_ps(_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f), codes);  // low 3 bits
  const __m256 sign = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(codes, 28), _mm256_set1_epi32(INT32_MIN)));
  return _mm256_mul_ps(_mm256_or_ps(magnitude, sign), _mm256_set1_ps(mxfp4::scale_value(row.scales[i / mxfp4::kBlock])));
}

// Four rows against one activation: dot4_u16's loop (vec.h) on MXFP4 loads. n a multiple of 8.
inline void mxfp4_dot4(const Mxfp4Row* w, const float* x, std::size_t n, float* out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (std::size_t i = 0; i < n; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(load_mxfp4x8(w[0], i), xv, a0);
    a1 = _mm256_fmadd_ps(load_mxfp4x8(w[1], i), xv, a1);
    a2 = _mm256_fmadd_ps(load_mxfp4x8(w[2], i), xv, a2);
    a3 = _mm256_fmadd_ps(load_mxfp4x8(w[3], i), xv, a3);
  }
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}
#endif

#ifdef SLUICE_CPU_AVX512
// Columns i..i+15 (i a multiple of 16: half a block, eight bytes) as floats; the table holds all 16 values.
inline __m512 load_mxfp4x16(const Mxfp4Row& row, std::size_t i) {
  uint64_t word;
  std::memcpy(&word, row.codes + i / 2, 8);
  // The low 32 bits (columns i..i+7) into lanes 0-7, the high into 8-15; nibble k of a lane's word.
  // (maskz_ forms with a full mask: see load_params16 in quant_kernels.h.)
  const __m512i words = _mm512_maskz_permutexvar_epi32(0xffff, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                                       _mm512_set1_epi64(static_cast<long long>(word)));
  const __m512i codes = _mm512_and_si512(
      _mm512_maskz_srlv_epi32(0xffff, words, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28)),
      _mm512_set1_epi32(15));
  const __m512 table = _mm512_loadu_ps(mxfp4::kE2m1);
  return _mm512_mul_ps(_mm512_maskz_permutexvar_ps(0xffff, codes, table), _mm512_set1_ps(mxfp4::scale_value(row.scales[i / mxfp4::kBlock])));
}

// Four rows against one activation: dot4_u16_zmm's loop (cpu_matmul.cpp) on MXFP4 loads, each row's
// codes requested `prefetch` bytes ahead (a quarter of the distance: a code is a quarter of a bf16
// value's bytes). n a multiple of 16.
inline void mxfp4_dot4_zmm(const Mxfp4Row* w, const float* x, std::size_t n, std::size_t prefetch, float* out) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (std::size_t i = 0; i < n; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    for (int k = 0; k < 4; ++k) {
      if (i % 128 == 0) prefetch_ahead(w[k].codes + i / 2, prefetch / 4);  // one request a cache line
      acc[k] = _mm512_fmadd_ps(load_mxfp4x16(w[k], i), xv, acc[k]);
    }
  }
  for (int k = 0; k < 4; ++k) out[k] = hsum512(acc[k]);
}
#endif

// One row against one activation: dot_u16's loops (vec.h) on MXFP4 values.
inline float mxfp4_dot(const Mxfp4Row& w, const float* x, std::size_t n) {
  std::size_t i = 0;
  float sum = 0.0f;
#ifdef SLUICE_CPU_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(load_mxfp4x8(w, i), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(load_mxfp4x8(w, i + 8), _mm256_loadu_ps(x + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load_mxfp4x8(w, i), _mm256_loadu_ps(x + i), acc0);
  sum = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) sum += mxfp4_value(w, i) * x[i];
  return sum;
}

}  // namespace sluice::cpu
