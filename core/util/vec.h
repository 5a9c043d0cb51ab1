#pragma once
// Vectorised inner loops shared by the CPU backend and host-side codecs: dot products of a float32 activation with a weight row
// stored as f32, f16 or bf16 (converted in registers, never copied), and row conversions to float32.
// AVX2+FMA+F16C when the compiler targets them; a portable loop otherwise.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define SLUICE_CPU_AVX2 1
#endif
// AVX-512 with VNNI (Zen 4/5, Intel since Ice Lake): the quantized kernels' 512-bit integer paths.
#if defined(SLUICE_CPU_AVX2) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define SLUICE_CPU_AVX512 1
#endif

namespace sluice::cpu {

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float f16_to_f32(uint16_t h) {
#ifdef SLUICE_CPU_AVX2
  return _cvtsh_ss(h);
#else
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      uint32_t m = mant;
      do { ++e; m <<= 1; } while ((m & 0x400) == 0);
      bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

inline uint16_t f32_to_f16(float f) {
#ifdef SLUICE_CPU_AVX2
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
#endif
}

#ifdef SLUICE_CPU_AVX2
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
inline __m256 load_bf16x8(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
#endif

#ifdef SLUICE_CPU_AVX2
// e^x in 8 lanes: x = n·ln2 + r with |r| <= ln2/2, e^r from its Taylor series to r^6 (relative error
// below 1.3e-7, about a float ulp), 2^n written into the exponent bits. x is first clamped to
// [-88, 88.3]: below -87.3 (where e^x leaves the normal floats) the result is a subnormal or 0, above
// 88.3 it is e^88.3; NaN stays NaN (min/max return their second operand when one is NaN). glibc's scalar expf
// was 5-10% of a prefill (softmax and SiLU); this is a few instructions a lane.
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(88.3f), x);
  x = _mm256_max_ps(_mm256_set1_ps(-88.0f), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln2 in two parts: n·ln2 exact
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
#endif

// v[i] = e^(v[i] - m) for i < n; returns their sum.
inline float exp_shifted_sum(float* v, std::size_t n, float m) {
  std::size_t i = 0;
  float sum = 0.0f;
#ifdef SLUICE_CPU_AVX2
  const __m256 vm = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(v + i), vm));
    _mm256_storeu_ps(v + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  sum = hsum(acc);
#endif
  for (; i < n; ++i) sum += (v[i] = std::exp(v[i] - m));
  return sum;
}

// o[i] = silu(g[i]) · u[i] = g[i] / (1 + e^-g[i]) · u[i].
inline void silu_mul(const float* g, const float* u, float* o, std::size_t n) {
  std::size_t i = 0;
#ifdef SLUICE_CPU_AVX2
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv)));
    _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(gv, den), _mm256_loadu_ps(u + i)));
  }
#endif
  for (; i < n; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

inline float dot_f32(const float* a, const float* b, std::size_t n) {
  std::size_t i = 0;
  float sum = 0.0f;
#ifdef SLUICE_CPU_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  sum = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// A half-width weight row (bf16 or f16) against a float32 activation, converted in registers.
template <float (*Scalar)(uint16_t)
#ifdef SLUICE_CPU_AVX2
          , __m256 (*Load)(const uint16_t*)
#endif
          >
inline float dot_u16(const uint16_t* w, const float* x, std::size_t n) {
  std::size_t i = 0;
  float sum = 0.0f;
#ifdef SLUICE_CPU_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(Load(w + i), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(Load(w + i + 8), _mm256_loadu_ps(x + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(Load(w + i), _mm256_loadu_ps(x + i), acc0);
  sum = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) sum += Scalar(w[i]) * x[i];
  return sum;
}

#ifdef SLUICE_CPU_AVX2
inline float dot_bf16(const uint16_t* w, const float* x, std::size_t n) { return dot_u16<bf16_to_f32, load_bf16x8>(w, x, n); }
inline float dot_f16(const uint16_t* w, const float* x, std::size_t n) { return dot_u16<f16_to_f32, load_f16x8>(w, x, n); }
#else
inline float dot_bf16(const uint16_t* w, const float* x, std::size_t n) { return dot_u16<bf16_to_f32>(w, x, n); }
inline float dot_f16(const uint16_t* w, const float* x, std::size_t n) { return dot_u16<f16_to_f32>(w, x, n); }
#endif

#ifdef SLUICE_CPU_AVX2
// Four weight rows against one activation: the activation is loaded once for four rows and the four
// horizontal sums are folded together — decode's matvec is bound by this loop. n must be a
// multiple of 8; callers handle the tail.
template <__m256 (*Load)(const uint16_t*)>
inline void dot4_u16(const uint16_t* w0, const uint16_t* w1, const uint16_t* w2, const uint16_t* w3, const float* x,
                     std::size_t n, float* out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (std::size_t i = 0; i < n; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(Load(w0 + i), xv, a0);
    a1 = _mm256_fmadd_ps(Load(w1 + i), xv, a1);
    a2 = _mm256_fmadd_ps(Load(w2 + i), xv, a2);
    a3 = _mm256_fmadd_ps(Load(w3 + i), xv, a3);
  }
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}
#endif

// y += a * x
inline void axpy(float a, const float* x, float* y, std::size_t n) {
  std::size_t i = 0;
#ifdef SLUICE_CPU_AVX2
  const __m256 va = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] += a * x[i];
}

inline void bf16_row_to_f32(const uint16_t* src, float* dst, std::size_t n) {
  std::size_t i = 0;
#ifdef SLUICE_CPU_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_bf16x8(src + i));
#endif
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

inline void f16_row_to_f32(const uint16_t* src, float* dst, std::size_t n) {
  std::size_t i = 0;
#ifdef SLUICE_CPU_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_f16x8(src + i));
#endif
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

}  // namespace sluice::cpu
