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
// For 4 and 8 bits on AVX2, s_qx is an exact integer sum of codes times the activation scaled to int16
// per group (see MatvecActivations); other widths unpack a group to floats.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

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
  // How far ahead of the run being multiplied the decode kernels ask for the weights (bytes; 0 = not
  // at all): the backend's option prefetch= (cpu_backend.cpp). Rows lie one after another, so the
  // address ahead runs on into the next rows.
  std::size_t prefetch = 0;
  // Whether the AVX-512 VNNI kernels may run (the backend's option kernels=, cpu_backend.cpp); false
  // where the build lacks them.
  bool wide_kernels = false;

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

#ifdef SLUICE_CPU_AVX2
// Eight codes of any width 2..8 from the `bits` bytes they fill: the 16 bytes from `p` broadcast to both
// halves, a byte shuffle puts the two bytes holding code k into 32-bit lane k, then a per-lane shift
// and mask. Reads 16 bytes from p.
struct CodeUnpacker {
  __m256i shuffle, shifts, mask;
  explicit CodeUnpacker(uint32_t bits) {
    alignas(32) int8_t ctrl[32];
    alignas(32) int32_t sh[8];
    for (int k = 0; k < 8; ++k) {
      const int bit = k * static_cast<int>(bits), byte = bit / 8;
      for (int half = 0; half < 2; ++half) {  // lanes 0-3 live in the low 128 bits, 4-7 in the high
        if ((k < 4) != (half == 0)) continue;
        int8_t* d = ctrl + half * 16 + (k % 4) * 4;
        d[0] = static_cast<int8_t>(byte);
        d[1] = static_cast<int8_t>(byte + 1);
        d[2] = d[3] = static_cast<int8_t>(0x80);  // zero
      }
      sh[k] = bit % 8;
    }
    shuffle = _mm256_load_si256(reinterpret_cast<const __m256i*>(ctrl));
    shifts = _mm256_load_si256(reinterpret_cast<const __m256i*>(sh));
    mask = _mm256_set1_epi32((1 << bits) - 1);
  }
  __m256 eight(const unsigned char* p) const {
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(b, shuffle), shifts), mask));
  }
};
#endif

#ifdef SLUICE_CPU_AVX2
// A request for the cache line `distance` bytes past p (a hint: it never faults, even past a buffer).
// The hardware's own prefetcher alone left decode at 50-60 % of the read bandwidth on the development
// machine (perf/NOTES.md, "The CPU backend at memory speed").
inline void prefetch_ahead(const void* p, std::size_t distance) {
  if (distance) _mm_prefetch(static_cast<const char*>(p) + distance, _MM_HINT_T0);
}
#endif

#ifdef SLUICE_CPU_AVX512
// The sum of a vector's 16 lanes (through memory: GCC 12's _mm512_reduce_add_ps and plain extracts pass
// an "undefined" source that its own -Wuninitialized reports).
inline float hsum512(__m512 v) {
  alignas(64) float l[16];
  _mm512_store_ps(l, v);
  return hsum(_mm256_add_ps(_mm256_load_ps(l), _mm256_load_ps(l + 8)));
}

// Sixteen consecutive scales or biases as floats. (The maskz_ forms with a full mask are the plain
// instructions: GCC 12's plain intrinsics pass an "undefined" source its -Wuninitialized reports.)
inline __m512 load_params16(const std::byte* base, uint32_t dtype, std::size_t i) {
  if (dtype == SL_DTYPE_F32) return _mm512_loadu_ps(reinterpret_cast<const float*>(base) + i);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + i * 2));
  if (dtype == SL_DTYPE_F16) return _mm512_maskz_cvtph_ps(0xffff, h);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, h), 16));
}

// One activation group (G floats, a multiple of 16) as integer codes of at most `top` in magnitude
// (127 for the int8 kernels, 32767 for the int16 ones): step = max|x| / top, each code x / step rounded
// to nearest even (the default mode, as std::nearbyint), NaN lanes 0; store(i, codes) takes the 32-bit
// codes of columns i..i+15. xsum = Σ codes · step, or the float sum of the group where it is all zero or
// not finite (no step). Lane reductions through memory, in lane order (see hsum512).
template <class Store>
inline void quantize_group_zmm(const float* xg, std::size_t G, float top, float& step, float& xsum, Store&& store) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 mx = _mm512_setzero_ps(), sum = _mm512_setzero_ps();
  for (std::size_t i = 0; i < G; i += 16) {
    const __m512 v = _mm512_loadu_ps(xg + i);
    // max returns its second operand when either is NaN: a NaN value leaves mx as it was, as
    // std::max(m, NaN) does in the scalar form.
    mx = _mm512_maskz_max_ps(0xffff, _mm512_and_ps(v, abs_mask), mx);
    sum = _mm512_add_ps(sum, v);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, mx);
  float m = 0.0f;
  for (float l : lanes) m = std::max(m, l);
  const float inv = m > 0.0f && std::isfinite(m) ? top / m : 0.0f;
  step = m / top;
  const __m512 vi = _mm512_set1_ps(inv);
  __m512i isum = _mm512_setzero_si512();
  for (std::size_t i = 0; i < G; i += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xg + i), vi);
    const __m512i c = _mm512_maskz_cvtps_epi32(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
    isum = _mm512_add_epi32(isum, c);
    store(i, c);
  }
  if (inv > 0.0f) {
    alignas(64) int32_t ilanes[16];
    _mm512_store_si512(ilanes, isum);
    int32_t total = 0;
    for (int32_t v : ilanes) total += v;
    xsum = float(total) * (m / top);
  } else {
    _mm512_store_ps(lanes, sum);
    float s = 0.0f;
    for (float l : lanes) s += l;
    xsum = s;
  }
}

#endif

// The `count` codes of a bit stream starting at code 0, as floats (count a multiple of 8). `readable`:
// bytes that may be read from `stream` (to the end of its row), which lets the vector path run to
// within 16 bytes of it.
inline void unpack_codes(const uint32_t* stream, std::size_t count, uint32_t bits, float* out, std::size_t readable) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(stream);
  std::size_t i = 0;
#ifdef SLUICE_CPU_AVX2
  if (bits != 4 && bits != 8) {
    static thread_local uint32_t cached_bits = 0;
    static thread_local CodeUnpacker* unpacker = nullptr;
    alignas(32) static thread_local unsigned char storage[sizeof(CodeUnpacker)];
    if (cached_bits != bits) {
      unpacker = new (storage) CodeUnpacker(bits);
      cached_bits = bits;
    }
    for (; i < count && i / 8 * bits + 16 <= readable; i += 8) _mm256_storeu_ps(out + i, unpacker->eight(bytes + i / 8 * bits));
  }
#endif
  switch (bits) {
    case 8:
      for (; i < count; ++i) out[i] = static_cast<float>((stream[i >> 2] >> ((i & 3) * 8)) & 0xffu);
      return;
    case 4:
      for (; i < count; ++i) out[i] = static_cast<float>((stream[i >> 3] >> ((i & 7) * 4)) & 0xfu);
      return;
    default:
      for (; i < count; ++i) out[i] = static_cast<float>(quant_code(stream, i, bits));
  }
}

// Checks a quantized weight's form and that its words, scales and biases lie inside their buffers.
// Returns an empty string when usable, else why not.
const char* quant_weight_problem(const sl_weight* w);
QuantView quant_view(const sl_weight* w);  // for reading rows (no kernel settings)
// For the products: with the backend's kernel settings (prefetch distance, AVX-512 or not).
QuantView quant_view(const sl_backend* be, const sl_weight* w);

// Row r dequantized to float32 (cols values).
void quant_row_to_f32(const QuantView& q, std::size_t r, float* dst);

// What the matvec kernels read of the activation rows: the floats, each group's sum, and for the
// 4-/8-bit AVX2 kernels the int16 form (null otherwise) with each group's step.
// Rows of per-group values (sums, steps) are padded to a multiple of 16 groups with zeros, so the kernels
// read them eight or sixteen at a time.
inline std::size_t param_stride(std::size_t groups) { return (groups + 15) & ~std::size_t(15); }

#ifdef SLUICE_CPU_AVX512
// For the 512-bit decode kernels: the multipliers (scale × activation step) of row r's groups g0..g0+15
// for NT activation rows, and their bias terms (bias × Σ x̂) added to bias_acc. Past a row's last group
// this reads the next row's parameters against zero activation padding — except at the tensor's end,
// where the remaining groups go one by one (into bias_part).
template <int NT>
inline void group_multipliers16(const QuantView& q, std::size_t r, std::size_t g0, const float* step, const float* xsum,
                                __m512* mult, __m512* bias_acc, float* bias_part) {
  const std::size_t groups = q.groups_per_row, stride = param_stride(groups), pbase = r * groups;
  if (pbase + g0 + 16 <= std::size_t(q.rows) * groups) {
    const __m512 sv = load_params16(q.scales, q.scale_dtype, pbase + g0);
    const __m512 bv = load_params16(q.biases, q.scale_dtype, pbase + g0);
    for (int t = 0; t < NT; ++t) {
      mult[t] = _mm512_mul_ps(sv, _mm512_loadu_ps(step + t * stride + g0));
      bias_acc[t] = _mm512_fmadd_ps(bv, _mm512_loadu_ps(xsum + t * stride + g0), bias_acc[t]);
    }
    return;
  }
  alignas(64) float tail_mult[NT][16];
  for (int t = 0; t < NT; ++t)
    for (std::size_t k = 0; k < 16; ++k) {
      const std::size_t g = g0 + k;
      tail_mult[t][k] = g < groups ? q.scale(r, g) * step[t * stride + g] : 0.0f;
      if (g < groups) bias_part[t] += q.bias(r, g) * xsum[t * stride + g];
    }
  for (int t = 0; t < NT; ++t) mult[t] = _mm512_load_ps(tail_mult[t]);
}
#endif

// Whether this build has the AVX-512 VNNI kernels (it was built for a CPU that has them: -march=native).
constexpr bool kWideKernelsBuilt =
#ifdef SLUICE_CPU_AVX512
    true;
#else
    false;
#endif

// Codes covered by one 512-bit load of a row in the AVX-512 matvec (128 4-bit or 64 8-bit codes), or 0
// where that kernel does not apply: it needs whole runs per row and a group that is either a whole
// number of runs or exactly half of one. The activation's int16 order follows from this (the decode
// path's quantize_activations_wide, cpu_quant.cpp).
std::size_t wide_run(const QuantView& q);

struct MatvecActivations {
  const float* x;
  const float* xsum;    // [n_act][param_stride(groups)]
  const int16_t* xq;    // [n_act][cols]: round(x / step), in the order the kernels read (quantize_activations)
  const float* step;    // [n_act][param_stride(groups)]: max|x| / 32767 of the group (max|x| / 127 for xq8)
  const int8_t* xq8 = nullptr;  // the int8-activation mode's form instead of xq (quant_int8.cpp)
};

// How the decode products take their activations (the CPU backend's option `activations=`): int16
// per group (the default: within 1.5e-5 of each group's largest value, the goldens' path), or int8
// per group (opt-in: within 1/254 of each group's largest value, one vpdpbusd per 64 codes — for
// where the integer units rather than memory are the limit). Prefill products are not affected.
enum class ActivationForm { kInt16, kInt8 };

// Codes covered by one 512-bit load in the int8-activation kernels (128 4-bit or 64 8-bit codes), or 0
// where they do not apply (no AVX-512 VNNI, another width, rows not whole runs, a group that is not a
// multiple of 32 dividing a run or a multiple of one); those products keep the int16 form.
std::size_t int8_run(const QuantView& q);
// The activation rows as int8 per group, in the order the int8 kernels read: 8-bit weights in column
// order, 4-bit weights per run of 128 columns the 64 even columns then the 64 odd ones (a byte's low
// and high code). step = max|x| / 127; xsum = Σ codes · step (float sum for a zero or non-finite group).
void quantize_activations_int8(const float* x, uint32_t n_act, const QuantView& q, int8_t* xq, float* step, float* xsum);
// quant_matvec_rows for a.xq8 (int8_run(q) != 0).
void quant_matvec_rows_int8(const QuantView& q, const MatvecActivations& a, uint32_t n_act, std::size_t r0, std::size_t r1,
                            float* out, std::size_t out_stride);
// For the AVX2 kernels' order. Also replaces each group's xsum by Σ xq · step, the sum of the values
// the codes' term uses.
void quantize_activations(const float* x, uint32_t n_act, const QuantView& q, int16_t* xq, float* step, float* xsum);

// The activation rows prepared for one quantized weight's matvec kernels, in storage this object
// owns (reused from call to call): each group's sum, and the int16 form where a kernel takes it.
class QuantMatvecInput {
 public:
  // The view stays valid until the next prepare (and while x lives).
  MatvecActivations prepare(const float* x, uint32_t n_act, const QuantView& q, ActivationForm form = ActivationForm::kInt16);
  // Whether activations prepared for `a` serve `b` as they are: the preparation reads only these.
  static bool same_preparation(const QuantView& a, const QuantView& b) {
    return a.bits == b.bits && a.group == b.group && a.cols == b.cols;
  }

 private:
  std::vector<float> xsum_, step_;
  std::vector<int16_t> xq_;
  std::vector<int8_t> xq8_;
};

// Activation rows the matvec kernels take in one pass over a weight row.
constexpr uint32_t kMatvecRowsAtOnce = 4;

// Runs each output row r in [r0, r1) through the kernel instance for n_act (1..4) activation rows and
// 4- or 8-bit codes: kernel.template operator()<NT, Bits>(r, results), then stores the results.
template <typename Kernel>
void rows_by_kernel(uint32_t bits, uint32_t n_act, std::size_t r0, std::size_t r1, float* out, std::size_t out_stride,
                    Kernel&& kernel) {
  auto rows = [&]<int NT, uint32_t Bits>() {
    float res[NT];
    for (std::size_t r = r0; r < r1; ++r) {
      kernel.template operator()<NT, Bits>(r, res);
      for (int t = 0; t < NT; ++t) out[t * out_stride + r] = res[t];
    }
  };
  auto widths = [&]<uint32_t Bits>() {
    switch (n_act) {
      case 1: rows.template operator()<1, Bits>(); break;
      case 2: rows.template operator()<2, Bits>(); break;
      case 3: rows.template operator()<3, Bits>(); break;
      default: rows.template operator()<4, Bits>(); break;
    }
  };
  if (bits == 4)
    widths.template operator()<4>();
  else
    widths.template operator()<8>();
}
// out[t, r] = sum_c x[t, c] * w[r, c] for n_act activation rows (more than kMatvecRowsAtOnce: in groups
// of that many over blocks of weight rows), output rows [r0, r1).
void quant_matvec_rows(const QuantView& q, const MatvecActivations& a, uint32_t n_act, std::size_t r0, std::size_t r1,
                       float* out, std::size_t out_stride);
// The decode path of matmul for a quantized weight (checked with quant_weight_problem), on the pool.
void quant_matvec(sl_backend* be, const float* x, uint32_t n_act, const sl_weight* w, float* out);

// The prefill path (quant_gemm.cpp): an int16 GEMM on the packed codes, for the forms it handles
// (4 and 8 bits, groups a multiple of 32, AVX2); other forms are dequantized for sgemm.
bool quant_gemm_supported(const sl_weight* w);
void quant_gemm(sl_backend* be, const float* x, uint32_t n_act, const sl_weight* w, float* out);

}  // namespace sluice::cpu
