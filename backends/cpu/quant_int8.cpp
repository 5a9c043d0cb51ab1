// The int8-activation decode products (the CPU backend's option `activations=int8`): each activation
// group scaled to int8 (step = max|x| / 127) and the packed codes multiplied as unsigned bytes with
// vpdpbusd, four products a 32-bit lane in one instruction. Against the int16 kernels (cpu_quant.cpp)
// a 64-byte run of weights costs half the vector operations: 4-bit codes need two masks instead of
// four shifted masks and two dot instructions instead of four, 8-bit codes none and one. Measured
// (perf/NOTES.md): +17 % decode where the host's memory outran two cores, equal where it did not, +38 %
// for 8-row batches, whose every extra row costs what this halves.
//
// What it costs in precision: each activation is off by at most step / 2 = max|x_g| / 254 of its group;
// the result is exactly Σ w · x̂ over the dequantized weights w and the rounded activations x̂ (the bias
// term uses Σ x̂, as the int16 kernels do), so |result − Σ w · x| ≤ Σ_c |w_c| · step_g(c) / 2 plus
// float rounding. tests/backend/quant_int8_activations_test.cpp holds the kernels to that bound.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant_kernels.h"

namespace sluice::cpu {

std::size_t int8_run(const QuantView& q) {
#ifdef SLUICE_CPU_AVX512
  if (!q.wide_kernels) return 0;
  const std::size_t run = q.bits == 4 ? 128 : q.bits == 8 ? 64 : 0;
  if (!run || q.cols % run != 0 || q.group % 32 != 0) return 0;
  if (q.group <= run ? run % q.group == 0 : q.group % run == 0) return run;
#else
  (void)q;
#endif
  return 0;
}

#ifdef SLUICE_CPU_AVX512
namespace {

// Per run of 128 int8 codes in column order (two 64-byte vectors), the even columns then the odd ones:
// as 16-bit lanes the low byte is the even column and the high byte the odd one; each is sign-extended,
// packed back to bytes (vpacksswb packs within 128-bit lanes, so the quadwords come out a0 b0 a1 b1 …)
// and the quadwords put in order.
inline void evens_then_odds(const int8_t* src, int8_t* dst) {
  const __m512i a = _mm512_loadu_si512(src), b = _mm512_loadu_si512(src + 64);
  const __m512i order = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0);
  const __m512i ea = _mm512_srai_epi16(_mm512_slli_epi16(a, 8), 8), eb = _mm512_srai_epi16(_mm512_slli_epi16(b, 8), 8);
  const __m512i oa = _mm512_srai_epi16(a, 8), ob = _mm512_srai_epi16(b, 8);
  _mm512_storeu_si512(dst, _mm512_maskz_permutexvar_epi64(0xff, order, _mm512_packs_epi16(ea, eb)));
  _mm512_storeu_si512(dst + 64, _mm512_maskz_permutexvar_epi64(0xff, order, _mm512_packs_epi16(oa, ob)));
}

// The sums of NT activation rows against one row of codes, in the shape of row_dot_i16_zmm: for each
// block of 16 groups the multipliers (scale × step) and the bias terms (bias × Σ x̂), then each run's
// int32 lanes folded with the multiplier of the group each lane covers. A lane covers 8 (4-bit) or 4
// (8-bit) consecutive codes of the run, so with groups up to a run long, lane k belongs to the run's
// group k / (lanes a group); longer groups add their runs' lanes before one fold.
template <int NT, uint32_t Bits>
void row_dot_i8_zmm(const QuantView& q, std::size_t r, const int8_t* xq, const float* step, const float* xsum, float* result) {
  constexpr std::size_t R = Bits == 4 ? 128 : 64;
  constexpr std::size_t kCodesPerLane = R / 16;
  const auto* w = reinterpret_cast<const uint8_t*>(q.row(r));
  const std::size_t cols = q.cols, G = q.group, groups = q.groups_per_row;
  const bool short_groups = G <= R;
  const __m512i lane_group = _mm512_maskz_srli_epi32(0xffff, _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                     static_cast<unsigned>(std::countr_zero(short_groups ? G / kCodesPerLane : 16)));
  __m512 total_a[NT], total_b[NT], bias_acc[NT], mult[NT];
  float bias_part[NT];
  for (int t = 0; t < NT; ++t) {
    total_a[t] = total_b[t] = bias_acc[t] = _mm512_setzero_ps();
    bias_part[t] = 0.0f;
  }
  auto run = [&](std::size_t c, __m512i* acc) {
    prefetch_ahead(w + c * Bits / 8, q.prefetch);
    const __m512i v = _mm512_loadu_si512(w + c * Bits / 8);
    if constexpr (Bits == 4) {
      const __m512i nib = _mm512_set1_epi8(0x0f);
      const __m512i lo = _mm512_and_si512(v, nib), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
      for (int t = 0; t < NT; ++t) {
        const int8_t* xt = xq + t * cols + c;
        acc[t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xt)), hi,
                                     _mm512_loadu_si512(xt + 64));
      }
    } else {
      for (int t = 0; t < NT; ++t)
        acc[t] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v, _mm512_loadu_si512(xq + t * cols + c));
    }
  };
  auto fold = [&](const __m512i* acc, __m512i idx, __m512* tot) {
    for (int t = 0; t < NT; ++t)
      tot[t] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, acc[t]), _mm512_maskz_permutexvar_ps(0xffff, idx, mult[t]), tot[t]);
  };
  for (std::size_t g0 = 0; g0 < groups; g0 += 16) {
    group_multipliers16<NT>(q, r, g0, step, xsum, mult, bias_acc, bias_part);
    const std::size_t g1 = std::min(groups, g0 + 16);
    __m512i acc[NT];
    if (short_groups) {
      // 16 groups span whole runs (16 · 32 columns is a multiple of either run), and so do a row's groups.
      const std::size_t c1 = g1 * G;
      std::size_t c = g0 * G;
      auto idx = [&](std::size_t col) { return _mm512_add_epi32(lane_group, _mm512_set1_epi32(static_cast<int>(col / G - g0))); };
      for (; c + 2 * R <= c1; c += 2 * R) {  // two totals in turn: the loop is bound by issue, not latency
        run(c, acc);
        fold(acc, idx(c), total_a);
        run(c + R, acc);
        fold(acc, idx(c + R), total_b);
      }
      for (; c < c1; c += R) {
        run(c, acc);
        fold(acc, idx(c), total_a);
      }
    } else {
      for (std::size_t g = g0; g < g1; ++g) {
        run(g * G, acc);
        for (std::size_t c = g * G + R; c < (g + 1) * G; c += R) {
          __m512i more[NT];
          run(c, more);
          for (int t = 0; t < NT; ++t) acc[t] = _mm512_add_epi32(acc[t], more[t]);
        }
        fold(acc, _mm512_set1_epi32(static_cast<int>(g - g0)), (g - g0) % 2 ? total_b : total_a);
      }
    }
  }
  for (int t = 0; t < NT; ++t) result[t] = hsum512(_mm512_add_ps(_mm512_add_ps(total_a[t], total_b[t]), bias_acc[t])) + bias_part[t];
}

}  // namespace

void quantize_activations_int8(const float* x, uint32_t n_act, const QuantView& q, int8_t* xq, float* step, float* xsum) {
  const std::size_t G = q.group, cols = q.cols, groups = q.groups_per_row, stride = param_stride(groups);
  thread_local std::vector<int8_t> codes;
  codes.resize(cols);
  for (uint32_t t = 0; t < n_act; ++t) {
    const float* xt = x + std::size_t(t) * cols;
    for (std::size_t g = 0; g < groups; ++g)  // |codes| ≤ 127: the group's largest maps to ±127
      quantize_group_zmm(xt + g * G, G, 127.0f, step[t * stride + g], xsum[t * stride + g], [&](std::size_t i, __m512i c) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes.data() + g * G + i), _mm512_maskz_cvtsepi32_epi8(0xffff, c));
      });
    int8_t* row = xq + std::size_t(t) * cols;
    if (q.bits == 8) {
      std::memcpy(row, codes.data(), cols);
    } else {
      for (std::size_t c0 = 0; c0 < cols; c0 += 128) evens_then_odds(codes.data() + c0, row + c0);
    }
  }
}

void quant_matvec_rows_int8(const QuantView& q, const MatvecActivations& a, uint32_t n_act, std::size_t r0, std::size_t r1,
                            float* out, std::size_t out_stride) {
  rows_by_kernel(q.bits, n_act, r0, r1, out, out_stride, [&]<int NT, uint32_t Bits>(std::size_t r, float* res) {
    row_dot_i8_zmm<NT, Bits>(q, r, a.xq8, a.step, a.xsum, res);
  });
}

#else  // without AVX-512 VNNI int8_run is 0 and these are never called

void quantize_activations_int8(const float*, uint32_t, const QuantView&, int8_t*, float*, float*) {}
void quant_matvec_rows_int8(const QuantView&, const MatvecActivations&, uint32_t, std::size_t, std::size_t, float*, std::size_t) {}

#endif

}  // namespace sluice::cpu
