// Affine-quantized weights on the CPU: validation, row dequantization (prefill and embeddings) and the
// decode matvec that computes on the packed codes directly. 4- and 8-bit have AVX2 paths; 2/3/5/6-bit
// unpack one group at a time into registers-sized scratch on the stack.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cpu_backend.h"
#include "quant_kernels.h"

namespace sluice::cpu {
namespace {

constexpr uint32_t kMaxGroup = 1024;  // codes of one group unpacked on the stack

bool valid_bits(uint32_t b) { return b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8; }
uint64_t param_size(uint32_t dtype) { return dtype == SL_DTYPE_F32 ? 4 : 2; }

#ifdef SLUICE_CPU_AVX2
// Eight 4-bit codes of one word, in column order, as floats.
inline __m256 codes4x8(const uint32_t* word) {
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i v = _mm256_set1_epi32(static_cast<int>(*word));
  return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, shifts), _mm256_set1_epi32(0xf)));
}
// Eight 8-bit codes (two words) as floats.
inline __m256 codes8x8(const uint32_t* words) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(words))));
}

// The integer kernels: activations scaled per group to int16 (step = max|x| / 32767, so each value is
// off by at most 1.5e-5 of its group's largest), codes widened to int16, and vpmaddwd multiplying and
// adding pairs exactly into int32 (|sum| < 128 * 255 * 32767 < 2^31 for any group up to 128). Half the
// vector operations per value of the float path, and the same answer to ~1e-5 relative.
// Eight consecutive scales or biases as floats.
inline __m256 load_params8(const std::byte* base, uint32_t dtype, std::size_t i) {
  if (dtype == SL_DTYPE_F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(base) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + i * 2));
  if (dtype == SL_DTYPE_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <int NT, uint32_t Bits>
void row_dot_i16(const QuantView& q, std::size_t r, const int16_t* xq, const float* step, const float* xsum,
                 float* result) {
  const auto* w = reinterpret_cast<const uint8_t*>(q.row(r));
  const std::size_t cols = q.cols, G = q.group, groups = q.groups_per_row, stride = param_stride(groups);
  __m256 total[NT];
  float bias_part[NT];
  for (int t = 0; t < NT; ++t) {
    total[t] = _mm256_setzero_ps();
    bias_part[t] = 0.0f;
  }
  // Per run of 8 groups, the fold multipliers (scale × activation step) are made 8 at a time and read
  // back by broadcast loads, and the bias terms are one vector FMA: the per-group epilogue is then a
  // conversion and an FMA, not a chain of scalar conversions.
  alignas(32) float mult[NT][8];
  __m256 bias_acc[NT];
  for (int t = 0; t < NT; ++t) bias_acc[t] = _mm256_setzero_ps();
  const std::size_t pbase = r * groups;
  for (std::size_t g = 0; g < groups; ++g) {
    const std::size_t j = g % 8;
    if (j == 0) {
      // Eight at a time also for a row's last few groups, reading the next row's parameters (unused:
      // the padded activation entries past `groups` are zero) — except on the tensor's last row.
      if (g + 8 <= groups || (r + 1) * groups + 8 <= std::size_t(q.rows) * groups) {
        const __m256 sv = load_params8(q.scales, q.scale_dtype, pbase + g);
        const __m256 bv = load_params8(q.biases, q.scale_dtype, pbase + g);
        for (int t = 0; t < NT; ++t) {
          _mm256_store_ps(mult[t], _mm256_mul_ps(sv, _mm256_loadu_ps(step + t * stride + g)));
          bias_acc[t] = _mm256_fmadd_ps(bv, _mm256_loadu_ps(xsum + t * stride + g), bias_acc[t]);
        }
      } else {
        for (std::size_t k = g; k < groups; ++k) {
          const float sk = q.scale(r, k), bk = q.bias(r, k);
          for (int t = 0; t < NT; ++t) {
            mult[t][k - g] = sk * step[t * stride + k];
            bias_part[t] += bk * xsum[t * stride + k];
          }
        }
      }
    }
    __m256i acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_si256();
    const std::size_t c0 = g * G;
    prefetch_ahead(reinterpret_cast<const unsigned char*>(w) + c0 * Bits / 8, q.prefetch);
    if constexpr (Bits == 4) {
      if (G % 64 == 0) {
        // 32 bytes = 64 codes; 16-bit lane k holds the codes of columns 4k..4k+3 in its four nibbles.
        const __m256i nib = _mm256_set1_epi16(0x000f);
        for (std::size_t c = c0; c < c0 + G; c += 64) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c / 2));
          const __m256i q0 = _mm256_and_si256(v, nib), q1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
          const __m256i q2 = _mm256_and_si256(_mm256_srli_epi16(v, 8), nib), q3 = _mm256_srli_epi16(v, 12);
          for (int t = 0; t < NT; ++t) {
            const auto* xt = reinterpret_cast<const __m256i*>(xq + t * cols + c);
            const __m256i p01 = _mm256_add_epi32(_mm256_madd_epi16(q0, _mm256_loadu_si256(xt)),
                                                 _mm256_madd_epi16(q1, _mm256_loadu_si256(xt + 1)));
            const __m256i p23 = _mm256_add_epi32(_mm256_madd_epi16(q2, _mm256_loadu_si256(xt + 2)),
                                                 _mm256_madd_epi16(q3, _mm256_loadu_si256(xt + 3)));
            acc[t] = _mm256_add_epi32(acc[t], _mm256_add_epi32(p01, p23));
          }
        }
      } else {
        // Groups of 32: 16 bytes, even columns' codes in the low nibbles, odd in the high.
        const __m128i low = _mm_set1_epi8(0x0f);
        for (std::size_t c = c0; c < c0 + G; c += 32) {
          const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + c / 2));
          const __m256i a = _mm256_cvtepu8_epi16(_mm_and_si128(v, low));
          const __m256i b = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), low));
          for (int t = 0; t < NT; ++t) {
            const auto* xt = reinterpret_cast<const __m256i*>(xq + t * cols + c);
            acc[t] = _mm256_add_epi32(acc[t], _mm256_add_epi32(_mm256_madd_epi16(a, _mm256_loadu_si256(xt)),
                                                               _mm256_madd_epi16(b, _mm256_loadu_si256(xt + 1))));
          }
        }
      }
    } else {
      // 32 bytes = 32 codes; 16-bit lane k holds columns 2k (low byte) and 2k + 1 (high byte).
      const __m256i byte = _mm256_set1_epi16(0x00ff);
      for (std::size_t c = c0; c < c0 + G; c += 32) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c));
        const __m256i a = _mm256_and_si256(v, byte), b = _mm256_srli_epi16(v, 8);
        for (int t = 0; t < NT; ++t) {
          const auto* xt = reinterpret_cast<const __m256i*>(xq + t * cols + c);
          acc[t] = _mm256_add_epi32(acc[t], _mm256_add_epi32(_mm256_madd_epi16(a, _mm256_loadu_si256(xt)),
                                                             _mm256_madd_epi16(b, _mm256_loadu_si256(xt + 1))));
        }
      }
    }
    for (int t = 0; t < NT; ++t)
      total[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), _mm256_broadcast_ss(&mult[t][j]), total[t]);
  }
  for (int t = 0; t < NT; ++t) result[t] = hsum(total[t]) + hsum(bias_acc[t]) + bias_part[t];
}

#ifdef SLUICE_CPU_AVX512
// (The maskz_ forms with a full mask are the plain instructions: GCC 12's plain intrinsics pass an
// "undefined" source that its own -Wuninitialized reports.) load_params16 is in quant_kernels.h.
// The same sums as row_dot_i16 with 512-bit loads and vpdpwssd (multiply int16 pairs and add into
// int32 in one instruction): a 64-byte run of the row is 128 4-bit or 64 8-bit codes. A 4-bit run's
// 16-bit lane k holds columns 4k..4k+3 (four masked shifts give four vectors of codes); an 8-bit run's
// holds columns 2k, 2k+1. The int32 lanes 0-7 of a run's sums cover its first half of columns and 8-15
// its second, so a run of two groups (4-bit g64, 8-bit g32) folds each half with its own multiplier.
// Each run's sum starts from zero: the only chain carried from run to run is the float total, and
// consecutive runs alternate between two of those, so the loop is bound by issue, not by latency.
template <int NT, uint32_t Bits>
void row_dot_i16_zmm(const QuantView& q, std::size_t r, const int16_t* xq, const float* step, const float* xsum,
                     float* result) {
  constexpr std::size_t R = Bits == 4 ? 128 : 64;
  const auto* w = reinterpret_cast<const uint8_t*>(q.row(r));
  const std::size_t cols = q.cols, G = q.group, groups = q.groups_per_row;
  const bool two = 2 * G == R;  // each run holds two groups
  __m512 total_a[NT], total_b[NT], bias_acc[NT], mult[NT];
  float bias_part[NT];
  for (int t = 0; t < NT; ++t) {
    total_a[t] = total_b[t] = bias_acc[t] = _mm512_setzero_ps();
    bias_part[t] = 0.0f;
  }
  const __m512i halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  // The int32 sums of the NT activation rows over one run starting at column c.
  auto run = [&](std::size_t c, __m512i* acc) {
    prefetch_ahead(w + c * Bits / 8, q.prefetch);
    const __m512i v = _mm512_loadu_si512(w + c * Bits / 8);
    if constexpr (Bits == 4) {
      const __m512i nib = _mm512_set1_epi16(0x000f);
      const __m512i q0 = _mm512_and_si512(v, nib), q1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
      const __m512i q2 = _mm512_and_si512(_mm512_srli_epi16(v, 8), nib), q3 = _mm512_srli_epi16(v, 12);
      for (int t = 0; t < NT; ++t) {
        const int16_t* xt = xq + t * cols + c;
        const __m512i a = _mm512_dpwssd_epi32(_mm512_madd_epi16(q0, _mm512_loadu_si512(xt)), q1, _mm512_loadu_si512(xt + 32));
        const __m512i b = _mm512_dpwssd_epi32(_mm512_madd_epi16(q2, _mm512_loadu_si512(xt + 64)), q3, _mm512_loadu_si512(xt + 96));
        acc[t] = _mm512_add_epi32(a, b);
      }
    } else {
      const __m512i lo = _mm512_and_si512(v, _mm512_set1_epi16(0x00ff)), hi = _mm512_srli_epi16(v, 8);
      for (int t = 0; t < NT; ++t) {
        const int16_t* xt = xq + t * cols + c;
        acc[t] = _mm512_dpwssd_epi32(_mm512_madd_epi16(lo, _mm512_loadu_si512(xt)), hi, _mm512_loadu_si512(xt + 32));
      }
    }
  };
  for (std::size_t g0 = 0; g0 < groups; g0 += 16) {
    group_multipliers16<NT>(q, r, g0, step, xsum, mult, bias_acc, bias_part);
    const std::size_t g1 = std::min(groups, g0 + 16);
    // One run's (or, for long groups, one group's) sums folded into tot with the multipliers idx picks.
    auto fold = [&](const __m512i* acc, __m512i idx, __m512* tot) {
      for (int t = 0; t < NT; ++t)
        tot[t] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, acc[t]), _mm512_maskz_permutexvar_ps(0xffff, idx, mult[t]),
                                 tot[t]);
    };
    __m512i acc[NT];
    if (two) {
      // Runs alternate between the two totals (named, not indexed by a variable: an index would keep
      // them in memory).
      std::size_t g = g0;
      for (; g + 4 <= g1; g += 4) {
        run(g * G, acc);
        fold(acc, _mm512_add_epi32(halves, _mm512_set1_epi32(static_cast<int>(g - g0))), total_a);
        run((g + 2) * G, acc);
        fold(acc, _mm512_add_epi32(halves, _mm512_set1_epi32(static_cast<int>(g + 2 - g0))), total_b);
      }
      for (; g < g1; g += 2) {
        run(g * G, acc);
        fold(acc, _mm512_add_epi32(halves, _mm512_set1_epi32(static_cast<int>(g - g0))), total_a);
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
  for (int t = 0; t < NT; ++t) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(total_a[t], total_b[t]), bias_acc[t]));
    result[t] = hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8))) + bias_part[t];
  }
}
#endif
#endif

// Any width: a group's codes unpacked to floats, then dotted.
void row_dot_generic(const QuantView& q, std::size_t r, const float* x, const float* xsum, uint32_t n_act,
                     float* result) {
  float codes[kMaxGroup];
  const uint32_t* w = q.row(r);
  for (uint32_t t = 0; t < n_act; ++t) result[t] = 0.0f;
  for (std::size_t g = 0; g < q.groups_per_row; ++g) {
    unpack_codes(w + g * q.words_per_group, q.group, q.bits, codes, (q.words_per_row - g * q.words_per_group) * 4);
    const float s = q.scale(r, g), b = q.bias(r, g);
    for (uint32_t t = 0; t < n_act; ++t) {
      const float qx = dot_f32(codes, x + t * q.cols + g * q.group, q.group);
      result[t] += s * qx + b * xsum[t * param_stride(q.groups_per_row) + g];
    }
  }
}

}  // namespace

const char* quant_weight_problem(const sl_weight* w) {
  if (!w || !w->data) return "no weight";
  if (w->dtype != SL_DTYPE_U32) return "quantized weight data must be U32 words";
  if (!valid_bits(w->bits)) return "unsupported bits (supported: 2, 3, 4, 5, 6, 8)";
  if (w->group_size == 0 || w->group_size > kMaxGroup || (uint64_t(w->group_size) * w->bits) % 32 != 0)
    return "group size must be a positive multiple of 32 / gcd(32, bits), at most 1024";
  if (w->cols == 0 || w->cols % w->group_size != 0) return "cols is not a multiple of the group size";
  if (w->scale_dtype != SL_DTYPE_BF16 && w->scale_dtype != SL_DTYPE_F16 && w->scale_dtype != SL_DTYPE_F32)
    return "scales/biases must be f32, f16 or bf16";
  if (!w->scales || !w->biases) return "quantized weight without scales or biases";
  const uint64_t word_bytes = uint64_t(w->rows) * (uint64_t(w->cols) * w->bits / 32) * 4;
  const uint64_t param_bytes = uint64_t(w->rows) * (w->cols / w->group_size) * param_size(w->scale_dtype);
  if (!fits(w->data->bytes, w->offset, word_bytes)) return "packed words run past their buffer";
  if (!fits(w->scales->bytes, w->scales_offset, param_bytes)) return "scales run past their buffer";
  if (!fits(w->biases->bytes, w->biases_offset, param_bytes)) return "biases run past their buffer";
  if (w->offset % 4 != 0) return "packed words are not 4-byte aligned";
  return "";
}

QuantView quant_view(const sl_weight* w) {
  QuantView q;
  q.words = reinterpret_cast<const uint32_t*>(weight_data(w));
  q.scales = w->scales->data + w->scales_offset;
  q.biases = w->biases->data + w->biases_offset;
  q.scale_dtype = w->scale_dtype;
  q.rows = w->rows;
  q.cols = w->cols;
  q.bits = w->bits;
  q.group = w->group_size;
  q.words_per_row = std::size_t(w->cols) * w->bits / 32;
  q.groups_per_row = w->cols / w->group_size;
  q.words_per_group = std::size_t(w->group_size) * w->bits / 32;
  return q;
}

QuantView quant_view(const sl_backend* be, const sl_weight* w) {
  QuantView q = quant_view(w);
  q.prefetch = be->prefetch_bytes;
  q.wide_kernels = be->wide_kernels;
  return q;
}

void quant_row_to_f32(const QuantView& q, std::size_t r, float* dst) {
  const uint32_t* w = q.row(r);
  for (std::size_t g = 0; g < q.groups_per_row; ++g) {
    const float s = q.scale(r, g), b = q.bias(r, g);
    float* out = dst + g * q.group;
    const uint32_t* gw = w + g * q.words_per_group;
    std::size_t c = 0;
#ifdef SLUICE_CPU_AVX2
    const __m256 vs = _mm256_set1_ps(s), vb = _mm256_set1_ps(b);
    if (q.bits == 4)
      for (; c < q.group; c += 8) _mm256_storeu_ps(out + c, _mm256_fmadd_ps(codes4x8(gw + c / 8), vs, vb));
    else if (q.bits == 8)
      for (; c < q.group; c += 8) _mm256_storeu_ps(out + c, _mm256_fmadd_ps(codes8x8(gw + c / 4), vs, vb));
#endif
    if (c == 0) {
      unpack_codes(gw, q.group, q.bits, out, (q.words_per_row - g * q.words_per_group) * 4);
      for (std::size_t i = 0; i < q.group; ++i) out[i] = out[i] * s + b;
    }
  }
}

std::size_t wide_run(const QuantView& q) {
#ifdef SLUICE_CPU_AVX512
  if (!q.wide_kernels) return 0;
  const std::size_t run = q.bits == 4 ? 128 : q.bits == 8 ? 64 : 0;
  if (run && q.cols % run == 0 && (q.group % run == 0 || 2 * q.group == run)) return run;
#else
  (void)q;
#endif
  return 0;
}

void quantize_activations(const float* x, uint32_t n_act, const QuantView& q, int16_t* xq, float* step, float* xsum) {
  const std::size_t G = q.group;
  for (uint32_t t = 0; t < n_act; ++t)
    for (std::size_t g = 0; g < q.groups_per_row; ++g) {
      const float* xg = x + std::size_t(t) * q.cols + g * G;
      int16_t* row = xq + std::size_t(t) * q.cols;
      float m = 0.0f;
      for (std::size_t i = 0; i < G; ++i) m = std::max(m, std::fabs(xg[i]));
      const float inv = m > 0.0f && std::isfinite(m) ? 32767.0f / m : 0.0f;
      step[t * param_stride(q.groups_per_row) + g] = m / 32767.0f;
      // The order the AVX2 kernels meet the codes in: runs of 64 as four strided quarters (4-bit,
      // groups of 64k; column 4k + m at 16m + k), or runs of 32 as evens then odds. (The AVX-512
      // kernels' order is quantize_activations_wide's.)
      const bool quads = q.bits == 4 && G % 64 == 0;
      int32_t total = 0;
      for (std::size_t i = 0; i < G; ++i) {
        const std::size_t j = g * G + (quads ? (i & ~std::size_t(63)) + (i & 3) * 16 + ((i & 63) >> 2)
                                             : (i & ~std::size_t(31)) + ((i & 1) ? 16 : 0) + ((i & 31) >> 1));
        const float v = std::nearbyint(xg[i] * inv);
        const auto code = static_cast<int16_t>(v == v ? std::clamp(v, -32767.0f, 32767.0f) : 0.0f);  // NaN/inf: no UB
        row[j] = code;
        total += code;
      }
      // The bias term from the same rounded values as the codes' term (see quant_gemm.cpp: it keeps the
      // error at w · e per value instead of scale·q · e). A zero or non-finite group keeps its float sum.
      if (inv > 0.0f) xsum[t * param_stride(q.groups_per_row) + g] = float(total) * (m / 32767.0f);
    }
}

#ifdef SLUICE_CPU_AVX512
namespace {
// The even (odd) int16 lanes of the 64 in a, b, in order: one vpermt2w each.
inline __m512i evens16(__m512i a, __m512i b) {
  const __m512i idx = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28, 26, 24, 22, 20, 18, 16,
                                       14, 12, 10, 8, 6, 4, 2, 0);
  return _mm512_permutex2var_epi16(a, idx, b);
}
inline __m512i odds16(__m512i a, __m512i b) {
  const __m512i idx = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23, 21, 19, 17,
                                       15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(a, idx, b);
}

// quantize_activations for the AVX-512 kernels' order (wide_run(q) != 0), vectorised: it runs on one
// thread before every decode matvec, and its scalar form (with the float group sums before it) took
// 5-30 µs a call on Qwen2-0.5B's shapes — 15-20% of a 0.8-4 MB matvec. Per group: max |x| and the
// codes in column order into `codes`; then each run is reordered with lane permutes. Same values as
// the scalar form: round to nearest even, NaN to 0, xsum = Σ codes · step (float sum for a zero or
// non-finite group).
void quantize_activations_wide(const float* x, uint32_t n_act, const QuantView& q, int16_t* xq, float* step,
                               float* xsum) {
  const std::size_t G = q.group, cols = q.cols, groups = q.groups_per_row, stride = param_stride(groups);
  const std::size_t run = wide_run(q);
  thread_local std::vector<int16_t> codes;
  codes.resize(cols);
  for (uint32_t t = 0; t < n_act; ++t) {
    const float* xt = x + std::size_t(t) * cols;
    for (std::size_t g = 0; g < groups; ++g)
      quantize_group_zmm(xt + g * G, G, 32767.0f, step[t * stride + g], xsum[t * stride + g], [&](std::size_t i, __m512i c) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes.data() + g * G + i), _mm512_maskz_cvtsepi32_epi16(0xffff, c));
      });
    int16_t* row = xq + std::size_t(t) * cols;
    for (std::size_t c0 = 0; c0 < cols; c0 += run) {
      const auto* src = reinterpret_cast<const __m512i*>(codes.data() + c0);
      auto* dst = reinterpret_cast<__m512i*>(row + c0);
      if (run == 64) {  // 8-bit: evens, then odds
        const __m512i a = _mm512_loadu_si512(src), b = _mm512_loadu_si512(src + 1);
        _mm512_storeu_si512(dst, evens16(a, b));
        _mm512_storeu_si512(dst + 1, odds16(a, b));
      } else {  // 4-bit: column 4k + m at m · 32 + k, as evens/odds of evens/odds
        const __m512i v0 = _mm512_loadu_si512(src), v1 = _mm512_loadu_si512(src + 1);
        const __m512i v2 = _mm512_loadu_si512(src + 2), v3 = _mm512_loadu_si512(src + 3);
        const __m512i e01 = evens16(v0, v1), o01 = odds16(v0, v1), e23 = evens16(v2, v3), o23 = odds16(v2, v3);
        _mm512_storeu_si512(dst, evens16(e01, e23));
        _mm512_storeu_si512(dst + 1, evens16(o01, o23));
        _mm512_storeu_si512(dst + 2, odds16(e01, e23));
        _mm512_storeu_si512(dst + 3, odds16(o01, o23));
      }
    }
  }
}
}  // namespace
#endif

void quant_matvec_rows(const QuantView& q, const MatvecActivations& a, uint32_t n_act, std::size_t r0, std::size_t r1,
                       float* out, std::size_t out_stride) {
  if (n_act > kMatvecRowsAtOnce) {
    // A batch of decode rows (several sequences): the kernels take four activation rows at a time, so
    // each block of weight rows is read from memory once and passed over by every group of four while
    // it is in L1 (16 rows of 896 4-bit columns: 7 KB). The GEMM's packing cost more than its
    // multiplying at these sizes (perf/NOTES.md, "Batched decode rows on the CPU").
    constexpr std::size_t kBlockRows = 16;
    const std::size_t stride = param_stride(q.groups_per_row);
    for (std::size_t rb = r0; rb < r1; rb += kBlockRows)
      for (uint32_t t0 = 0; t0 < n_act; t0 += kMatvecRowsAtOnce) {
        MatvecActivations part = a;
        part.x = a.x + std::size_t(t0) * q.cols;
        part.xsum = a.xsum + t0 * stride;
        if (a.xq) part.xq = a.xq + std::size_t(t0) * q.cols;
        if (a.xq8) part.xq8 = a.xq8 + std::size_t(t0) * q.cols;
        if (a.step) part.step = a.step + t0 * stride;
        quant_matvec_rows(q, part, std::min<uint32_t>(kMatvecRowsAtOnce, n_act - t0), rb, std::min(r1, rb + kBlockRows),
                          out + t0 * out_stride, out_stride);
      }
    return;
  }
  if (a.xq8) return quant_matvec_rows_int8(q, a, n_act, r0, r1, out, out_stride);
#ifdef SLUICE_CPU_AVX512
  if (a.xq && wide_run(q)) {
    return rows_by_kernel(q.bits, n_act, r0, r1, out, out_stride, [&]<int NT, uint32_t Bits>(std::size_t r, float* res) {
      row_dot_i16_zmm<NT, Bits>(q, r, a.xq, a.step, a.xsum, res);
    });
  }
#endif
#ifdef SLUICE_CPU_AVX2
  if (a.xq && (q.bits == 4 || q.bits == 8)) {
    return rows_by_kernel(q.bits, n_act, r0, r1, out, out_stride, [&]<int NT, uint32_t Bits>(std::size_t r, float* res) {
      row_dot_i16<NT, Bits>(q, r, a.xq, a.step, a.xsum, res);
    });
  }
#endif
  float res[4];
  for (std::size_t r = r0; r < r1; ++r) {
    row_dot_generic(q, r, a.x, a.xsum, n_act, res);
    for (uint32_t t = 0; t < n_act; ++t) out[t * out_stride + r] = res[t];
  }
}

MatvecActivations QuantMatvecInput::prepare(const float* x, uint32_t n_act, const QuantView& q, ActivationForm form) {
  const std::size_t stride = param_stride(q.groups_per_row);
  xsum_.assign(std::size_t(n_act) * stride, 0.0f);  // the padding stays zero
  MatvecActivations a{x, xsum_.data(), nullptr, nullptr};
  if (form == ActivationForm::kInt8 && int8_run(q)) {
    xq8_.resize(std::size_t(n_act) * q.cols);
    step_.assign(std::size_t(n_act) * stride, 0.0f);
    quantize_activations_int8(x, n_act, q, xq8_.data(), step_.data(), xsum_.data());
    a.xq8 = xq8_.data();
    a.step = step_.data();
    return a;
  }
#ifdef SLUICE_CPU_AVX512
  if (wide_run(q)) {
    xq_.resize(std::size_t(n_act) * q.cols);
    step_.assign(std::size_t(n_act) * stride, 0.0f);
    quantize_activations_wide(x, n_act, q, xq_.data(), step_.data(), xsum_.data());
    a.xq = xq_.data();
    a.step = step_.data();
    return a;
  }
#endif
  for (uint32_t t = 0; t < n_act; ++t)
    for (std::size_t g = 0; g < q.groups_per_row; ++g) {
      const float* xg = x + std::size_t(t) * q.cols + g * q.group;
      float s = 0.0f;
      for (uint32_t i = 0; i < q.group; ++i) s += xg[i];
      xsum_[t * stride + g] = s;
    }
#ifdef SLUICE_CPU_AVX2
  if ((q.bits == 4 || q.bits == 8) && q.group % 32 == 0) {
    xq_.resize(std::size_t(n_act) * q.cols);
    step_.assign(std::size_t(n_act) * stride, 0.0f);
    quantize_activations(x, n_act, q, xq_.data(), step_.data(), xsum_.data());
    a.xq = xq_.data();
    a.step = step_.data();
  }
#endif
  return a;
}

// The decode path: few activation rows, every weight row streamed once.
void quant_matvec(sl_backend* be, const float* x, uint32_t n_act, const sl_weight* w, float* out) {
  const QuantView q = quant_view(be, w);
  thread_local QuantMatvecInput input;
  const MatvecActivations a = input.prepare(x, n_act, q, be->int8_activations ? ActivationForm::kInt8 : ActivationForm::kInt16);
  be->pool->parallel_for(q.rows, kMatvecGrain, [&](std::size_t b, std::size_t e, unsigned) {
    quant_matvec_rows(q, a, n_act, b, e, out, q.rows);
  });
}

}  // namespace sluice::cpu
