// Affine-quantized weights on the CPU: validation, row dequantization (prefill and embeddings) and the
// decode matvec that computes on the packed codes directly. 4- and 8-bit have AVX2 paths; 2/3/5/6-bit
// unpack one group at a time into registers-sized scratch on the stack.
#include <algorithm>
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

// One weight row against NT activation rows, 8-bit, group a multiple of 16 columns.
template <int NT>
void row_dot8_avx2(const QuantView& q, std::size_t r, const float* x, const float* xsum, float* result) {
  const uint32_t* w = q.row(r);
  const std::size_t cols = q.cols, G = q.group;
  __m256 total[NT];
  float bias_part[NT];
  for (int t = 0; t < NT; ++t) {
    total[t] = _mm256_setzero_ps();
    bias_part[t] = 0.0f;
  }
  for (std::size_t g = 0; g < q.groups_per_row; ++g) {
    __m256 a0[NT], a1[NT];
    for (int t = 0; t < NT; ++t) a0[t] = a1[t] = _mm256_setzero_ps();
    const std::size_t c0 = g * G;
    const uint32_t* gw = w + g * q.words_per_group;
    for (std::size_t c = 0; c < G; c += 16) {
      const __m256 q0 = codes8x8(gw + c / 4), q1 = codes8x8(gw + c / 4 + 2);
      for (int t = 0; t < NT; ++t) {
        const float* xt = x + t * cols + c0 + c;
        a0[t] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(xt), a0[t]);
        a1[t] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(xt + 8), a1[t]);
      }
    }
    const float s = q.scale(r, g), b = q.bias(r, g);
    const __m256 vs = _mm256_set1_ps(s);
    for (int t = 0; t < NT; ++t) {
      total[t] = _mm256_fmadd_ps(_mm256_add_ps(a0[t], a1[t]), vs, total[t]);
      bias_part[t] += b * xsum[t * q.groups_per_row + g];
    }
  }
  for (int t = 0; t < NT; ++t) result[t] = hsum(total[t]) + bias_part[t];
}

// One weight row against NT activation rows, 4-bit. Eight bytes (16 codes) widen to eight 32-bit
// lanes, each holding an even column's code in its low nibble and the next odd column's in the high
// one; `xp` is the activation with each run of 16 columns stored evens first, then odds (see
// permute_for_nibbles), so both halves meet their activations without a shuffle.
template <int NT>
void row_dot4_avx2(const QuantView& q, std::size_t r, const float* xp, const float* xsum, float* result) {
  const auto* w = reinterpret_cast<const uint8_t*>(q.row(r));
  const std::size_t cols = q.cols, G = q.group;
  const __m256i low = _mm256_set1_epi32(0xf);
  __m256 total[NT];
  float bias_part[NT];
  for (int t = 0; t < NT; ++t) {
    total[t] = _mm256_setzero_ps();
    bias_part[t] = 0.0f;
  }
  for (std::size_t g = 0; g < q.groups_per_row; ++g) {
    __m256 a0[NT], a1[NT];
    for (int t = 0; t < NT; ++t) a0[t] = a1[t] = _mm256_setzero_ps();
    const std::size_t c0 = g * G;
    for (std::size_t c = c0; c < c0 + G; c += 16) {
      const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + c / 2)));
      const __m256 even = _mm256_cvtepi32_ps(_mm256_and_si256(b, low));
      const __m256 odd = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
      for (int t = 0; t < NT; ++t) {
        const float* xt = xp + t * cols + c;
        a0[t] = _mm256_fmadd_ps(even, _mm256_loadu_ps(xt), a0[t]);
        a1[t] = _mm256_fmadd_ps(odd, _mm256_loadu_ps(xt + 8), a1[t]);
      }
    }
    const float s = q.scale(r, g), bias = q.bias(r, g);
    const __m256 vs = _mm256_set1_ps(s);
    for (int t = 0; t < NT; ++t) {
      total[t] = _mm256_fmadd_ps(_mm256_add_ps(a0[t], a1[t]), vs, total[t]);
      bias_part[t] += bias * xsum[t * q.groups_per_row + g];
    }
  }
  for (int t = 0; t < NT; ++t) result[t] = hsum(total[t]) + bias_part[t];
}
#endif

// Any width: a group's codes unpacked to floats, then dotted.
void row_dot_generic(const QuantView& q, std::size_t r, const float* x, const float* xsum, uint32_t n_act,
                     float* result) {
  float codes[kMaxGroup];
  const uint32_t* w = q.row(r);
  for (uint32_t t = 0; t < n_act; ++t) result[t] = 0.0f;
  for (std::size_t g = 0; g < q.groups_per_row; ++g) {
    unpack_codes(w + g * q.words_per_group, q.group, q.bits, codes);
    const float s = q.scale(r, g), b = q.bias(r, g);
    for (uint32_t t = 0; t < n_act; ++t) {
      const float qx = dot_f32(codes, x + t * q.cols + g * q.group, q.group);
      result[t] += s * qx + b * xsum[t * q.groups_per_row + g];
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
      unpack_codes(gw, q.group, q.bits, out);
      for (std::size_t i = 0; i < q.group; ++i) out[i] = out[i] * s + b;
    }
  }
}

void permute_for_nibbles(const float* x, std::size_t n, float* xp) {
  for (std::size_t c = 0; c + 16 <= n; c += 16)
    for (std::size_t k = 0; k < 8; ++k) {
      xp[c + k] = x[c + 2 * k];
      xp[c + 8 + k] = x[c + 2 * k + 1];
    }
}

void quant_matvec_rows(const QuantView& q, const float* x, const float* xperm, const float* xsum, uint32_t n_act,
                       std::size_t r0, std::size_t r1, float* out, std::size_t out_stride) {
  float res[4];
  for (std::size_t r = r0; r < r1; ++r) {
#ifdef SLUICE_CPU_AVX2
    if (q.bits == 4 && xperm) {
      switch (n_act) {
        case 1: row_dot4_avx2<1>(q, r, xperm, xsum, res); break;
        case 2: row_dot4_avx2<2>(q, r, xperm, xsum, res); break;
        case 3: row_dot4_avx2<3>(q, r, xperm, xsum, res); break;
        default: row_dot4_avx2<4>(q, r, xperm, xsum, res); break;
      }
    } else if (q.bits == 8) {
      switch (n_act) {
        case 1: row_dot8_avx2<1>(q, r, x, xsum, res); break;
        case 2: row_dot8_avx2<2>(q, r, x, xsum, res); break;
        case 3: row_dot8_avx2<3>(q, r, x, xsum, res); break;
        default: row_dot8_avx2<4>(q, r, x, xsum, res); break;
      }
    } else
#endif
      row_dot_generic(q, r, x, xsum, n_act, res);
    for (uint32_t t = 0; t < n_act; ++t) out[t * out_stride + r] = res[t];
  }
}

// The decode path: few activation rows, every weight row streamed once.
void quant_matvec(sl_backend* be, const float* x, uint32_t n_act, const sl_weight* w, float* out) {
  const QuantView q = quant_view(w);
  thread_local std::vector<float> xsum;
  xsum.assign(std::size_t(n_act) * q.groups_per_row, 0.0f);
  for (uint32_t t = 0; t < n_act; ++t)
    for (std::size_t g = 0; g < q.groups_per_row; ++g) {
      const float* xg = x + std::size_t(t) * q.cols + g * q.group;
      float s = 0.0f;
      for (uint32_t i = 0; i < q.group; ++i) s += xg[i];
      xsum[t * q.groups_per_row + g] = s;
    }
  const float* xs = xsum.data();
  const float* xp = nullptr;
#ifdef SLUICE_CPU_AVX2
  thread_local std::vector<float> xperm;
  if (q.bits == 4) {
    xperm.resize(std::size_t(n_act) * q.cols);
    for (uint32_t t = 0; t < n_act; ++t) permute_for_nibbles(x + std::size_t(t) * q.cols, q.cols, xperm.data() + std::size_t(t) * q.cols);
    xp = xperm.data();
  }
#endif
  be->pool->parallel_for(q.rows, 64, [&](std::size_t b, std::size_t e, unsigned) {
    quant_matvec_rows(q, x, xp, xs, n_act, b, e, out, q.rows);
  });
}

}  // namespace sluice::cpu
