// The prefill product with 4- and 8-bit affine weights: an integer GEMM on the packed codes.
//
// Why integers: on this class of core (Zen 3, and Intel since Haswell) vpmaddwd retires two per cycle
// like an FMA, but each does 16 multiply-adds (int16 pairs into int32) against an FMA's 8, so a GEMM
// whose operands are int16 has twice float32's peak. The activation is scaled per group to int16
// (step = max|x| / 32767, the decode path's form: each value within 1.5e-5 of its group's largest), the
// codes are small non-negative integers, and Σ q·x over a group is exact in int32; the affine form is
// folded per group and output row in float: scale · step · Σq·x_int + bias · Σx. No int8 activation
// (0.4 % steps) is involved, so the results match float math on the dequantized weights to ~1e-5.
//
// Layout. Output features are cut into tiles of 16 (two vectors of eight int32 lanes). A tile's weights
// for a block of kc columns are unpacked once into a panel where each 32-bit lane holds two consecutive
// columns of one row, [column pair][16 rows][2] (8 KiB for kc = 256: L1), and reused for every token.
// The micro-kernel takes 4 tokens: per column pair it broadcasts each token's two int16 values into all
// lanes, and one vpmaddwd per (token, 8 rows) adds both products into that row's lane — no horizontal
// sums, 8 int32 accumulators, 8 vpmaddwd and 8 vpaddd per 2 columns. After every group (or 128
// columns, where groups are longer: 64 pairs of 255 × 32767 products still fit in int32) the
// accumulators are converted and folded into float sums of the tile, kept in L1.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu_backend.h"
#include "quant_kernels.h"

namespace sluice::cpu {

#ifdef SLUICE_CPU_AVX2
namespace {

constexpr std::size_t kTileRows = 16;
constexpr std::size_t kTileTokens = 4;
constexpr std::size_t kTargetBlockCols = 256;  // columns per panel: 16 rows × 256 int16 = 8 KiB
constexpr std::size_t kMaxSpan = 128;          // columns between int32 → float folds (overflow bound)
constexpr std::size_t kStreamOutputBytes = 1 << 20;  // outputs from this size are written past the caches

// The activation rows as the kernel reads them.
struct IntActivations {
  const int16_t* xq = nullptr;  // [n][cols], round(x / step) of the value's group
  const float* step = nullptr;  // [n][groups]
  const float* xsum = nullptr;  // [n][groups]: Σ x_int · step of the group
  std::size_t cols = 0, groups = 0;
};

// Row r of the weight, columns [k0, k0 + kc), widened to int16 codes in column order.
void unpack_row_i16(const QuantView& q, std::size_t r, std::size_t k0, std::size_t kc, int16_t* dst) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(q.row(r));
  if (q.bits == 4) {
    const __m128i low = _mm_set1_epi8(0x0f);
    for (std::size_t c = 0; c < kc; c += 32) {
      // 16 bytes = 32 codes, column 2i in byte i's low nibble and 2i + 1 in its high nibble.
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + (k0 + c) / 2));
      const __m128i lo = _mm_and_si128(v, low), hi = _mm_and_si128(_mm_srli_epi16(v, 4), low);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(lo, hi)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c + 16), _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(lo, hi)));
    }
  } else {
    for (std::size_t c = 0; c < kc; c += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c),
                          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + k0 + c))));
  }
}

// Eight vectors of eight 32-bit lanes transposed: out[j] lane i = in[i] lane j.
inline void transpose8x8(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 0-3 (h = 0) and 4-7
    const __m256i* s = t + 4 * h;
    u[4 * h + 0] = _mm256_unpacklo_epi64(s[0], s[2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(s[0], s[2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(s[1], s[3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(s[1], s[3]);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x20);
    r[4 + j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x31);
  }
}

// The panel of one tile (rows [r0, r0 + 16), rows past the weight's end zero) for columns [k0, k0 + kc),
// and its scales and biases as floats, [group in block] at a stride of pstride floats, 16 each.
void pack_panel(const QuantView& q, std::size_t r0, std::size_t k0, std::size_t kc, int16_t* rows_tmp, int16_t* panel,
                float* ps, float* pb, std::size_t pstride) {
  const std::size_t valid = r0 < q.rows ? std::min<std::size_t>(kTileRows, q.rows - r0) : 0;
  for (std::size_t i = 0; i < kTileRows; ++i) {
    int16_t* dst = rows_tmp + i * kc;
    if (i < valid)
      unpack_row_i16(q, r0 + i, k0, kc, dst);
    else
      std::memset(dst, 0, kc * sizeof(int16_t));
  }
  // [16 rows][kc/2 pairs] of 32-bit lanes → [kc/2 pairs][16 rows], eight by eight.
  const auto* src = reinterpret_cast<const int32_t*>(rows_tmp);
  auto* out = reinterpret_cast<int32_t*>(panel);
  const std::size_t pairs = kc / 2;
  for (std::size_t half = 0; half < 2; ++half)
    for (std::size_t p0 = 0; p0 < pairs; p0 += 8) {
      __m256i v[8];
      for (int i = 0; i < 8; ++i)
        v[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (half * 8 + i) * pairs + p0));
      transpose8x8(v);
      for (int j = 0; j < 8; ++j)
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + (p0 + j) * kTileRows + half * 8), v[j]);
    }
  const std::size_t g0 = k0 / q.group, ng = kc / q.group;
  for (std::size_t gi = 0; gi < ng; ++gi)
    for (std::size_t i = 0; i < kTileRows; ++i) {
      ps[gi * pstride + i] = i < valid ? q.scale(r0 + i, g0 + gi) : 0.0f;
      pb[gi * pstride + i] = i < valid ? q.bias(r0 + i, g0 + gi) : 0.0f;
    }
}

// One span of columns (one group, or 128 columns of a longer group) of a tile against NT tokens:
// c[t][0..16) += step[t] · (scale ⊙ Σ q·x_int) (+ bias ⊙ Σx when the span starts its group).
struct SpanArgs {
  const int16_t* panel;  // the span's first column pair
  const int16_t* x[kTileTokens];  // each token's int16 values at the span's first column
  std::size_t pairs;
  const float* scale;  // 16 rows' scales and biases of the span's group
  const float* bias;
  const float* step[kTileTokens];  // each token's step and Σx of the group
  const float* xsum[kTileTokens];
  bool group_start;
  float* c;  // [NT][16]
};

// The inner loop over column pairs, for four tokens (fewer: the unused pointers repeat token 0 and
// their sums are ignored). Written in assembly because GCC 12 compiled every intrinsic form of it with
// a register move per accumulator per iteration, or spilled the accumulators to the stack, which made
// the loop front-end bound at about half of vpmaddwd's two-per-cycle rate.
inline void pair_loop4(const int16_t* p, const int16_t* const* x, std::size_t pairs, __m256i acc[8]) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  std::size_t i = 0;
  asm volatile(
      "1:\n\t"
      "vmovdqa (%[p]), %%ymm12\n\t"
      "vmovdqa 32(%[p]), %%ymm13\n\t"
      "vpbroadcastd (%[x0],%[i],4), %%ymm14\n\t"
      "vpmaddwd %%ymm14, %%ymm12, %%ymm15\n\t"
      "vpmaddwd %%ymm14, %%ymm13, %%ymm14\n\t"
      "vpaddd %%ymm15, %[a0], %[a0]\n\t"
      "vpaddd %%ymm14, %[a1], %[a1]\n\t"
      "vpbroadcastd (%[x1],%[i],4), %%ymm14\n\t"
      "vpmaddwd %%ymm14, %%ymm12, %%ymm15\n\t"
      "vpmaddwd %%ymm14, %%ymm13, %%ymm14\n\t"
      "vpaddd %%ymm15, %[a2], %[a2]\n\t"
      "vpaddd %%ymm14, %[a3], %[a3]\n\t"
      "vpbroadcastd (%[x2],%[i],4), %%ymm14\n\t"
      "vpmaddwd %%ymm14, %%ymm12, %%ymm15\n\t"
      "vpmaddwd %%ymm14, %%ymm13, %%ymm14\n\t"
      "vpaddd %%ymm15, %[a4], %[a4]\n\t"
      "vpaddd %%ymm14, %[a5], %[a5]\n\t"
      "vpbroadcastd (%[x3],%[i],4), %%ymm14\n\t"
      "vpmaddwd %%ymm14, %%ymm12, %%ymm15\n\t"
      "vpmaddwd %%ymm14, %%ymm13, %%ymm14\n\t"
      "vpaddd %%ymm15, %[a6], %[a6]\n\t"
      "vpaddd %%ymm14, %[a7], %[a7]\n\t"
      "add $64, %[p]\n\t"
      "inc %[i]\n\t"
      "cmp %[n], %[i]\n\t"
      "jne 1b\n\t"
      : [a0] "+x"(a0), [a1] "+x"(a1), [a2] "+x"(a2), [a3] "+x"(a3), [a4] "+x"(a4), [a5] "+x"(a5), [a6] "+x"(a6),
        [a7] "+x"(a7), [p] "+r"(p), [i] "+r"(i)
      : [x0] "r"(x[0]), [x1] "r"(x[1]), [x2] "r"(x[2]), [x3] "r"(x[3]), [n] "r"(pairs)
      : "xmm12", "xmm13", "xmm14", "xmm15", "cc", "memory");
  acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3, acc[4] = a4, acc[5] = a5, acc[6] = a6, acc[7] = a7;
}

template <std::size_t NT>
void span_kernel(const SpanArgs& s) {
  static_assert(NT >= 1 && NT <= 4);
  const int16_t* x[4] = {s.x[0], NT > 1 ? s.x[1] : s.x[0], NT > 2 ? s.x[2] : s.x[0], NT > 3 ? s.x[3] : s.x[0]};
  __m256i acc[8];
  pair_loop4(s.panel, x, s.pairs, acc);
  const __m256i a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3], a4 = acc[4], a5 = acc[5], a6 = acc[6], a7 = acc[7];
  const __m256 s_lo = _mm256_load_ps(s.scale), s_hi = _mm256_load_ps(s.scale + 8);
  const __m256 b_lo = _mm256_load_ps(s.bias), b_hi = _mm256_load_ps(s.bias + 8);
  auto fold = [&](std::size_t t, __m256i lo_i, __m256i hi_i) {
    const __m256 m = _mm256_broadcast_ss(s.step[t]);
    float* ct = s.c + t * kTileRows;
    __m256 lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo_i), _mm256_mul_ps(s_lo, m), _mm256_load_ps(ct));
    __m256 hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi_i), _mm256_mul_ps(s_hi, m), _mm256_load_ps(ct + 8));
    if (s.group_start) {
      const __m256 xs = _mm256_broadcast_ss(s.xsum[t]);
      lo = _mm256_fmadd_ps(b_lo, xs, lo);
      hi = _mm256_fmadd_ps(b_hi, xs, hi);
    }
    _mm256_store_ps(ct, lo);
    _mm256_store_ps(ct + 8, hi);
  };
  fold(0, a0, a1);
  if constexpr (NT > 1) fold(1, a2, a3);
  if constexpr (NT > 2) fold(2, a4, a5);
  if constexpr (NT > 3) fold(3, a6, a7);
}

// c[t][0..16) += the tile's products with NT tokens over the panel's kc columns (starting at column k0).
template <std::size_t NT>
void tile_kernel(const int16_t* panel, const float* ps, const float* pb, std::size_t k0, std::size_t kc,
                 std::size_t group, const IntActivations& a, std::size_t t0, float* c) {
  const std::size_t span = std::min(group, kMaxSpan);
  SpanArgs s{};
  s.pairs = span / 2;
  s.c = c;
  std::size_t g = k0 / group, gi = 0, in_group = 0;  // the span's group: global, within the panel; offset in it
  for (std::size_t s0 = 0; s0 < kc; s0 += span) {
    s.panel = panel + s0 * kTileRows;  // s0 / 2 pairs of 32 int16
    for (std::size_t t = 0; t < NT; ++t) {
      s.x[t] = a.xq + (t0 + t) * a.cols + k0 + s0;
      s.step[t] = a.step + (t0 + t) * a.groups + g;
      s.xsum[t] = a.xsum + (t0 + t) * a.groups + g;
    }
    s.scale = ps + gi * kTileRows;
    s.bias = pb + gi * kTileRows;
    s.group_start = in_group == 0;
    span_kernel<NT>(s);
    if ((in_group += span) == group) {
      in_group = 0;
      ++g;
      ++gi;
    }
  }
}

#ifdef SLUICE_CPU_AVX512
// The AVX-512 form: two tiles at once (32 output rows, two panels) against 8 tokens. One 512-bit
// panel load holds a column pair of a tile's 16 rows; each token's pair is broadcast once and feeds
// one vpdpwssd (multiply int16 pairs, add into int32) per tile. A pair then costs 2 + 8 loads for 16
// multiply-add instructions — the AVX2 loop needs 6 loads and 16 instructions for 4 tokens' 8 — and
// each span's fold is spread over twice the work. 16 accumulators, 8 broadcasts, 2 panel vectors:
// 26 of the 32 vector registers.
constexpr std::size_t kWideTokens = 8;
constexpr std::size_t kWideRows = 2 * kTileRows;

// The pair loop, in assembly for the reason pair_loop4 is: GCC 12 compiled an intrinsic form with a
// register copy per accumulator per pair and a panel vector spilled to the stack. The accumulators
// are fixed registers (zmm0-15: tile A's 8 tokens, then tile B's), stored to acc at the end: an asm
// statement takes at most 30 operands, and 16 in-out vectors would count as 32.
inline void pair_loop8x2(const int16_t* pa, const int16_t* pb, const int16_t* const* x, std::size_t pairs,
                         __m512i acc[16]) {
  std::size_t i = 0;
  asm volatile(
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
      "vmovdqa64 %%zmm0, %%zmm1\n\t"
      "vmovdqa64 %%zmm0, %%zmm2\n\t"
      "vmovdqa64 %%zmm0, %%zmm3\n\t"
      "vmovdqa64 %%zmm0, %%zmm4\n\t"
      "vmovdqa64 %%zmm0, %%zmm5\n\t"
      "vmovdqa64 %%zmm0, %%zmm6\n\t"
      "vmovdqa64 %%zmm0, %%zmm7\n\t"
      "vmovdqa64 %%zmm0, %%zmm8\n\t"
      "vmovdqa64 %%zmm0, %%zmm9\n\t"
      "vmovdqa64 %%zmm0, %%zmm10\n\t"
      "vmovdqa64 %%zmm0, %%zmm11\n\t"
      "vmovdqa64 %%zmm0, %%zmm12\n\t"
      "vmovdqa64 %%zmm0, %%zmm13\n\t"
      "vmovdqa64 %%zmm0, %%zmm14\n\t"
      "vmovdqa64 %%zmm0, %%zmm15\n\t"
      "test %[n], %[n]\n\t"
      "jz 2f\n\t"
      "1:\n\t"
      "vmovdqa64 (%[pa]), %%zmm30\n\t"
      "vmovdqa64 (%[pb]), %%zmm31\n\t"
      "vpbroadcastd (%[x0],%[i],4), %%zmm22\n\t"
      "vpbroadcastd (%[x1],%[i],4), %%zmm23\n\t"
      "vpbroadcastd (%[x2],%[i],4), %%zmm24\n\t"
      "vpbroadcastd (%[x3],%[i],4), %%zmm25\n\t"
      "vpbroadcastd (%[x4],%[i],4), %%zmm26\n\t"
      "vpbroadcastd (%[x5],%[i],4), %%zmm27\n\t"
      "vpbroadcastd (%[x6],%[i],4), %%zmm28\n\t"
      "vpbroadcastd (%[x7],%[i],4), %%zmm29\n\t"
      "vpdpwssd %%zmm22, %%zmm30, %%zmm0\n\t"
      "vpdpwssd %%zmm22, %%zmm31, %%zmm8\n\t"
      "vpdpwssd %%zmm23, %%zmm30, %%zmm1\n\t"
      "vpdpwssd %%zmm23, %%zmm31, %%zmm9\n\t"
      "vpdpwssd %%zmm24, %%zmm30, %%zmm2\n\t"
      "vpdpwssd %%zmm24, %%zmm31, %%zmm10\n\t"
      "vpdpwssd %%zmm25, %%zmm30, %%zmm3\n\t"
      "vpdpwssd %%zmm25, %%zmm31, %%zmm11\n\t"
      "vpdpwssd %%zmm26, %%zmm30, %%zmm4\n\t"
      "vpdpwssd %%zmm26, %%zmm31, %%zmm12\n\t"
      "vpdpwssd %%zmm27, %%zmm30, %%zmm5\n\t"
      "vpdpwssd %%zmm27, %%zmm31, %%zmm13\n\t"
      "vpdpwssd %%zmm28, %%zmm30, %%zmm6\n\t"
      "vpdpwssd %%zmm28, %%zmm31, %%zmm14\n\t"
      "vpdpwssd %%zmm29, %%zmm30, %%zmm7\n\t"
      "vpdpwssd %%zmm29, %%zmm31, %%zmm15\n\t"
      "add $64, %[pa]\n\t"
      "add $64, %[pb]\n\t"
      "inc %[i]\n\t"
      "cmp %[n], %[i]\n\t"
      "jne 1b\n\t"
      "2:\n\t"
      "vmovdqu64 %%zmm0, 0(%[acc])\n\t"
      "vmovdqu64 %%zmm1, 64(%[acc])\n\t"
      "vmovdqu64 %%zmm2, 128(%[acc])\n\t"
      "vmovdqu64 %%zmm3, 192(%[acc])\n\t"
      "vmovdqu64 %%zmm4, 256(%[acc])\n\t"
      "vmovdqu64 %%zmm5, 320(%[acc])\n\t"
      "vmovdqu64 %%zmm6, 384(%[acc])\n\t"
      "vmovdqu64 %%zmm7, 448(%[acc])\n\t"
      "vmovdqu64 %%zmm8, 512(%[acc])\n\t"
      "vmovdqu64 %%zmm9, 576(%[acc])\n\t"
      "vmovdqu64 %%zmm10, 640(%[acc])\n\t"
      "vmovdqu64 %%zmm11, 704(%[acc])\n\t"
      "vmovdqu64 %%zmm12, 768(%[acc])\n\t"
      "vmovdqu64 %%zmm13, 832(%[acc])\n\t"
      "vmovdqu64 %%zmm14, 896(%[acc])\n\t"
      "vmovdqu64 %%zmm15, 960(%[acc])\n\t"
      : [pa] "+r"(pa), [pb] "+r"(pb), [i] "+r"(i)
      : [x0] "r"(x[0]), [x1] "r"(x[1]), [x2] "r"(x[2]), [x3] "r"(x[3]), [x4] "r"(x[4]), [x5] "r"(x[5]), [x6] "r"(x[6]),
        [x7] "r"(x[7]), [n] "r"(pairs), [acc] "r"(acc)
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31", "cc", "memory");
}

// One span of both tiles against NT <= 8 tokens (fewer: the unused pointers repeat token 0, their
// sums ignored); c is [token][32 rows], the panels' scales and biases [tile][16].
template <std::size_t NT>
void span_kernel_zmm(const int16_t* pa, const int16_t* pb, const int16_t* const* x, std::size_t pairs,
                     const float* scale, const float* bias, const float* const* step, const float* const* xsum,
                     bool group_start, float* c) {
  static_assert(NT >= 1 && NT <= kWideTokens);
  const int16_t* xs[kWideTokens];
  for (std::size_t t = 0; t < kWideTokens; ++t) xs[t] = x[t < NT ? t : 0];
  __m512i acc[2 * kWideTokens];
  pair_loop8x2(pa, pb, xs, pairs, acc);
  for (std::size_t h = 0; h < 2; ++h) {
    const __m512 sv = _mm512_loadu_ps(scale + h * kTileRows), bv = _mm512_loadu_ps(bias + h * kTileRows);
    for (std::size_t t = 0; t < NT; ++t) {
      float* ct = c + t * kWideRows + h * kTileRows;
      __m512 v = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, acc[h * kWideTokens + t]),
                                 _mm512_mul_ps(sv, _mm512_set1_ps(*step[t])), _mm512_loadu_ps(ct));
      if (group_start) v = _mm512_fmadd_ps(bv, _mm512_set1_ps(*xsum[t]), v);
      _mm512_storeu_ps(ct, v);
    }
  }
}

// ps, pb: [group in block][tile][16].
template <std::size_t NT>
void tile_kernel_zmm(const int16_t* pa, const int16_t* pb, const float* ps, const float* pbias, std::size_t k0,
                     std::size_t kc, std::size_t group, const IntActivations& a, std::size_t t0, float* c) {
  const std::size_t span = std::min(group, kMaxSpan);
  const int16_t* x[kWideTokens];
  const float *step[kWideTokens], *xsum[kWideTokens];
  std::size_t g = k0 / group, gi = 0, in_group = 0;
  for (std::size_t s0 = 0; s0 < kc; s0 += span) {
    for (std::size_t t = 0; t < NT; ++t) {
      x[t] = a.xq + (t0 + t) * a.cols + k0 + s0;
      step[t] = a.step + (t0 + t) * a.groups + g;
      xsum[t] = a.xsum + (t0 + t) * a.groups + g;
    }
    span_kernel_zmm<NT>(pa + s0 * kTileRows, pb + s0 * kTileRows, x, span / 2, ps + gi * kWideRows,
                        pbias + gi * kWideRows, step, xsum, in_group == 0, c);
    if ((in_group += span) == group) {
      in_group = 0;
      ++g;
      ++gi;
    }
  }
}

void run_tokens_zmm(std::size_t nt, const int16_t* pa, const int16_t* pb, const float* ps, const float* pbias,
                    std::size_t k0, std::size_t kc, std::size_t group, const IntActivations& a, std::size_t t0, float* c) {
  switch (nt) {
    case 8: return tile_kernel_zmm<8>(pa, pb, ps, pbias, k0, kc, group, a, t0, c);
    case 7: return tile_kernel_zmm<7>(pa, pb, ps, pbias, k0, kc, group, a, t0, c);
    case 6: return tile_kernel_zmm<6>(pa, pb, ps, pbias, k0, kc, group, a, t0, c);
    case 5: return tile_kernel_zmm<5>(pa, pb, ps, pbias, k0, kc, group, a, t0, c);
    case 4: return tile_kernel_zmm<4>(pa, pb, ps, pbias, k0, kc, group, a, t0, c);
    case 3: return tile_kernel_zmm<3>(pa, pb, ps, pbias, k0, kc, group, a, t0, c);
    case 2: return tile_kernel_zmm<2>(pa, pb, ps, pbias, k0, kc, group, a, t0, c);
    default: return tile_kernel_zmm<1>(pa, pb, ps, pbias, k0, kc, group, a, t0, c);
  }
}
#endif

void run_tokens(std::size_t nt, const int16_t* panel, const float* ps, const float* pb, std::size_t k0, std::size_t kc,
                std::size_t group, const IntActivations& a, std::size_t t0, float* c) {
  switch (nt) {
    case 4: return tile_kernel<4>(panel, ps, pb, k0, kc, group, a, t0, c);
    case 3: return tile_kernel<3>(panel, ps, pb, k0, kc, group, a, t0, c);
    case 2: return tile_kernel<2>(panel, ps, pb, k0, kc, group, a, t0, c);
    default: return tile_kernel<1>(panel, ps, pb, k0, kc, group, a, t0, c);
  }
}

// A finished unit of output columns (rows [0, n) of c, `unit` floats each, 64-byte aligned) to its place
// in out (row stride n_out floats, the unit's first column on a cache line), with non-temporal stores.
// Why: each token's piece is one or two whole cache lines at a stride of n_out, and an ordinary store
// first reads the line it writes (read-for-ownership) — for a prefill's outputs, larger than the caches,
// that read cost as much as the writes; measured, memcpy here was 8 % of a 512-token prefill, and
// streaming took the prefill up by 4–16 % in six alternating pairs (perf/NOTES.md). Consumers then read
// the output from memory, which for outputs this large they would anyway.
void stream_unit(const float* c, std::size_t n, std::size_t unit, float* out, std::size_t n_out) {
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t i = 0; i < unit; i += 8) _mm256_stream_ps(out + t * n_out + i, _mm256_load_ps(c + t * unit + i));
}

// Each group of each row to int16 with its own step, plus the group's exact sum.
void quantize_rows_i16(const float* x, std::size_t t0, std::size_t t1, std::size_t cols, std::size_t group, int16_t* xq,
                       float* step, float* xsum) {
  const std::size_t groups = cols / group;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (std::size_t t = t0; t < t1; ++t)
    for (std::size_t g = 0; g < groups; ++g) {
      const float* xg = x + t * cols + g * group;
      int16_t* dst = xq + t * cols + g * group;
      __m256 mx = _mm256_setzero_ps(), sum = _mm256_setzero_ps();
      for (std::size_t i = 0; i < group; i += 8) {
        const __m256 v = _mm256_loadu_ps(xg + i);
        mx = _mm256_max_ps(mx, _mm256_and_ps(v, abs_mask));
        sum = _mm256_add_ps(sum, v);
      }
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float m = _mm_cvtss_f32(m4);
      // A zero, infinite or NaN group gets multiplier 0 (codes 0 or the saturated NaN pattern); its step
      // carries the inf/NaN into the result as float math would.
      const float inv = m > 0.0f && std::isfinite(m) ? 32767.0f / m : 0.0f;
      const __m256 vi = _mm256_set1_ps(inv);
      __m256i isum = _mm256_setzero_si256();
      for (std::size_t i = 0; i < group; i += 16) {
        // Round to nearest (even), as std::nearbyint; |v| <= 32767 so packing never saturates.
        const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + i), vi));
        const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + i + 8), vi));
        isum = _mm256_add_epi32(isum, _mm256_add_epi32(a, b));
        // packs interleaves 128-bit halves: (a0-3 b0-3 a4-7 b4-7); restore column order.
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                            _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8));
      }
      // The bias term uses the same rounded activation as the codes' term (Σ x_int · step, exact in
      // int32), so the result is exactly Σ (scale·q + bias) · x_int · step: the rounding error is then
      // w · e per value. With the float Σx it would be scale·q · e, and scale·q = w − bias can be several
      // times |w| when the group's bias is large and negative — measured, it doubled the worst error.
      alignas(32) int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), isum);
      int32_t total = 0;
      for (int32_t v : lanes) total += v;
      step[t * groups + g] = m / 32767.0f;
      xsum[t * groups + g] = inv > 0.0f ? float(total) * (m / 32767.0f) : hsum(sum);
    }
}

}  // namespace

bool quant_gemm_supported(const sl_weight* w) {
  return (w->bits == 4 || w->bits == 8) && w->group_size % 32 == 0;
}

void quant_gemm(sl_backend* be, const float* x, uint32_t n_act, const sl_weight* w, float* out) {
  const QuantView q = quant_view(be, w);
  const std::size_t n = n_act, cols = q.cols, G = q.group, groups = q.groups_per_row, n_out = q.rows;
  // The activation, quantized once for all output tiles (shared read-only by the pool's threads).
  static thread_local std::vector<int16_t> xq;
  static thread_local std::vector<float> step, xsum;
  xq.resize(n * cols);
  step.resize(n * groups);
  xsum.resize(n * groups);
  // Pointers, not the thread_local names, go into the lambdas: a worker naming them would get its own.
  const IntActivations a{xq.data(), step.data(), xsum.data(), cols, groups};
  int16_t* xq_out = xq.data();
  float* step_out = step.data();
  float* xsum_out = xsum.data();
  be->pool->parallel_for(n, 4, [&](std::size_t b, std::size_t e, unsigned) {
    quantize_rows_i16(x, b, e, cols, G, xq_out, step_out, xsum_out);
  });

  // A large output streams past the caches (see stream_unit); its rows must start on cache lines.
  const bool stream = n * n_out * sizeof(float) >= kStreamOutputBytes && reinterpret_cast<uintptr_t>(out) % 64 == 0 &&
                      (n_out * sizeof(float)) % 64 == 0;

  // Columns per panel: a whole number of groups, about kTargetBlockCols.
  const std::size_t kc = G * std::max<std::size_t>(1, kTargetBlockCols / G);
  // A thread's unit of work: one tile of 16 rows, or two (the AVX-512 kernel's 32).
  [[maybe_unused]] const bool wide = q.wide_kernels;
  const std::size_t unit = wide ? 2 * kTileRows : kTileRows, units = (n_out + unit - 1) / unit;
  be->pool->parallel_for(units, 1, [&](std::size_t ub, std::size_t ue, unsigned) {
    struct Scratch {
      std::vector<int16_t> rows, panel;
      std::vector<float> ps, pb, c;
    };
    static thread_local Scratch s;
    s.rows.resize(kTileRows * kc);
    s.panel.resize(unit * kc + 32);  // +32: room to align to 64 bytes (one AVX-512 load per pair)
    s.ps.resize(unit * (kc / G) + 16);
    s.pb.resize(unit * (kc / G) + 16);
    s.c.resize(n * unit + 16);
    auto align64 = [](auto* p) {
      using T = std::remove_pointer_t<decltype(p)>;
      return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63));
    };
    int16_t* panel = align64(s.panel.data());
    float* ps = align64(s.ps.data());
    float* pb = align64(s.pb.data());
    float* c = align64(s.c.data());
    for (std::size_t u = ub; u < ue; ++u) {
      const std::size_t r0 = u * unit, valid = std::min(unit, n_out - r0);
      std::fill(c, c + n * unit, 0.0f);
      for (std::size_t k0 = 0; k0 < cols; k0 += kc) {
        const std::size_t kb = std::min(kc, cols - k0);
#ifdef SLUICE_CPU_AVX512
        if (wide) {
          int16_t* second = panel + kTileRows * kc;
          pack_panel(q, r0, k0, kb, s.rows.data(), panel, ps, pb, kWideRows);
          pack_panel(q, r0 + kTileRows, k0, kb, s.rows.data(), second, ps + kTileRows, pb + kTileRows, kWideRows);
          for (std::size_t t0 = 0; t0 < n; t0 += kWideTokens)
            run_tokens_zmm(std::min(kWideTokens, n - t0), panel, second, ps, pb, k0, kb, G, a, t0, c + t0 * kWideRows);
          continue;
        }
#endif
        pack_panel(q, r0, k0, kb, s.rows.data(), panel, ps, pb, kTileRows);
        for (std::size_t t0 = 0; t0 < n; t0 += kTileTokens)
          run_tokens(std::min(kTileTokens, n - t0), panel, ps, pb, k0, kb, G, a, t0, c + t0 * kTileRows);
      }
      if (stream && valid == unit)
        stream_unit(c, n, unit, out + r0, n_out);
      else
        for (std::size_t t = 0; t < n; ++t) std::memcpy(out + t * n_out + r0, c + t * unit, valid * sizeof(float));
    }
    if (stream) _mm_sfence();  // the streamed lines are in memory before the pool reports this share done
  });
}
#else
bool quant_gemm_supported(const sl_weight*) { return false; }
void quant_gemm(sl_backend*, const float*, uint32_t, const sl_weight*, float*) {}
#endif

}  // namespace sluice::cpu
