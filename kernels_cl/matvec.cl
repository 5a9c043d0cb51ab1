// Matrix-vector products for decode (a few activation rows): out[t, row0 + r] = sum_c x[t, c] * w[r, c].
// A team of TEAM work-items computes one output row, streaming the weight row once for all n_t
// (<= MAX_T) activation rows; WG / TEAM rows per work-group. Quantized weights are dequantized in
// registers: per word, sum(q * x) and sum(x) are formed and scaled once (value = scale * q + bias).
// The team's partial sums meet in local memory, or through warp shuffles where the host built the
// program with SLUICE_PTX_SHFL (NVIDIA; TEAM is then the warp, 32; warp_sum is in kernels_cl/warp.cl).

#ifndef WG
#define WG 128
#endif
#ifndef TEAM
#define TEAM 32
#endif
#ifndef MAX_T
#define MAX_T 8
#endif
#define ROWS_PER_WG (WG / TEAM)


// Sums acc[t] over the team; lane 0 of each team writes the row's outputs.
inline void team_finish(float* acc, uint n_t, __local float* red, uint row, uint rows, __global float* out,
                        uint out_stride, uint row0, __global const uchar* bias, uint bias_dtype, uint has_bias) {
  const uint lid = get_local_id(0), lane = lid % TEAM;
#ifdef SLUICE_PTX_SHFL
  for (uint t = 0; t < MAX_T; ++t)
    if (t < n_t) acc[t] = warp_sum(acc[t]);
#else
  for (uint t = 0; t < MAX_T; ++t) red[t * WG + lid] = acc[t];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = TEAM / 2; s > 0; s >>= 1) {
    if (lane < s)
      for (uint t = 0; t < MAX_T; ++t)
        if (t < n_t) red[t * WG + lid] += red[t * WG + lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (uint t = 0; t < MAX_T; ++t) acc[t] = red[t * WG + lid];
#endif
  if (lane == 0 && row < rows) {
    const float b = has_bias ? load_value(bias, bias_dtype, row0 + row) : 0.0f;
    for (uint t = 0; t < MAX_T; ++t)
      if (t < n_t) out[(ulong)t * out_stride + row0 + row] = acc[t] + b;
  }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void matvec(__global const uchar* wbase, ulong w_off, uint dtype, uint rows, uint cols, __global const float* x,
            uint n_t, __global float* out, uint out_stride, uint row0, __global const uchar* bias, ulong bias_off,
            uint bias_dtype, uint has_bias) {
  __local float red[MAX_T * WG];
  const uint lid = get_local_id(0), lane = lid % TEAM;
  const uint row = get_group_id(0) * ROWS_PER_WG + lid / TEAM;
  float acc[MAX_T];
  for (uint t = 0; t < MAX_T; ++t) acc[t] = 0.0f;
  if (row < rows) {
    __global const uchar* w = wbase + w_off;
    const ulong base = (ulong)row * cols;
    if (dtype != DT_F32 && cols % 8u == 0u) {
      __global const uint* wr = (__global const uint*)(w + base * 2);
      for (uint i = lane; i < cols / 8u; i += TEAM) {
        const uint4 p = vload4(i, wr);
        float8 wv;
        if (dtype == DT_BF16) {
          wv = (float8)(as_float(p.s0 << 16), as_float(p.s0 & 0xffff0000u), as_float(p.s1 << 16),
                        as_float(p.s1 & 0xffff0000u), as_float(p.s2 << 16), as_float(p.s2 & 0xffff0000u),
                        as_float(p.s3 << 16), as_float(p.s3 & 0xffff0000u));
        } else {
          wv = vload_half8(i, (__global const half*)(w + base * 2));
        }
        for (uint t = 0; t < MAX_T; ++t) {
          if (t >= n_t) break;
          const float8 xv = vload8(i, x + (ulong)t * cols);
          const float8 pr = wv * xv;
          acc[t] += (pr.s0 + pr.s1) + (pr.s2 + pr.s3) + (pr.s4 + pr.s5) + (pr.s6 + pr.s7);
        }
      }
    } else if (dtype == DT_F32 && cols % 4u == 0u) {
      __global const float* wr = (__global const float*)(w + base * 4);
      for (uint i = lane; i < cols / 4u; i += TEAM) {
        const float4 wv = vload4(i, wr);
        for (uint t = 0; t < MAX_T; ++t) {
          if (t >= n_t) break;
          const float4 pr = wv * vload4(i, x + (ulong)t * cols);
          acc[t] += (pr.s0 + pr.s1) + (pr.s2 + pr.s3);
        }
      }
    } else {
      for (uint c = lane; c < cols; c += TEAM) {
        const float wv = load_value(w, dtype, base + c);
        for (uint t = 0; t < MAX_T; ++t) {
          if (t >= n_t) break;
          acc[t] += wv * x[(ulong)t * cols + c];
        }
      }
    }
  }
  team_finish(acc, n_t, red, row, rows, out, out_stride, row0, bias + bias_off, bias_dtype, has_bias);
}

// MXFP4 weights (ABI 2.3): a row is cols / 32 blocks of 16 bytes of codes and one scale byte; each
// work-item of the row's team takes whole blocks, makes the values (e2m1 by table, times the scale)
// in registers and accumulates them with every activation row.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void matvec_mxfp4(__global const uchar* cbase, ulong c_off, __global const uchar* sbase, ulong s_off, uint rows, uint cols,
                  __global const float* x, uint n_t, __global float* out, uint out_stride, uint row0, __global const uchar* bias,
                  ulong bias_off, uint bias_dtype, uint has_bias) {
  __local float red[MAX_T * WG];
  const uint lid = get_local_id(0), lane = lid % TEAM;
  const uint row = get_group_id(0) * ROWS_PER_WG + lid / TEAM;
  float acc[MAX_T];
  for (uint t = 0; t < MAX_T; ++t) acc[t] = 0.0f;
  if (row < rows) {
    const uint blocks = cols / 32u;
    __global const uint* cr = (__global const uint*)(cbase + c_off) + (ulong)row * blocks * 4u;
    __global const uchar* sr = sbase + s_off + (ulong)row * blocks;
    for (uint b = lane; b < blocks; b += TEAM) {
      const uint4 w4 = vload4(b, cr);
      const float s = mxfp4_scale(sr[b]);
      const float8 v0 = mxfp4_eight(w4.s0, s), v1 = mxfp4_eight(w4.s1, s), v2 = mxfp4_eight(w4.s2, s), v3 = mxfp4_eight(w4.s3, s);
      for (uint t = 0; t < MAX_T; ++t) {
        if (t >= n_t) break;
        __global const float* xt = x + (ulong)t * cols + (ulong)b * 32u;
        const float8 p = fma(v3, vload8(3, xt), fma(v2, vload8(2, xt), fma(v1, vload8(1, xt), v0 * vload8(0, xt))));
        acc[t] += ((p.s0 + p.s1) + (p.s2 + p.s3)) + ((p.s4 + p.s5) + (p.s6 + p.s7));
      }
    }
  }
  team_finish(acc, n_t, red, row, rows, out, out_stride, row0, bias + bias_off, bias_dtype, has_bias);
}

// One quantized row, a word at a time, for BITS dividing 32 and groups of whole words.
inline void quant_row_words(__global const uint* wr, uint words, __global const uchar* sr, __global const uchar* br,
                            uint scale_dtype, uint group_size, __global const float* x, uint cols, uint n_t,
                            float* acc, const uint BITS) {
  const uint per_word = 32u / BITS, mask = (1u << BITS) - 1u;
  for (uint i = get_local_id(0) % TEAM; i < words; i += TEAM) {
    const uint word = wr[i];
    const uint c0 = i * per_word, g = c0 / group_size;
    const float s = load_value(sr, scale_dtype, g), b = load_value(br, scale_dtype, g);
    for (uint t = 0; t < MAX_T; ++t) {
      if (t >= n_t) break;
      __global const float* xt = x + (ulong)t * cols + c0;
      float qx = 0.0f, sx = 0.0f;
      for (uint k = 0; k < per_word; ++k) {
        const float xv = xt[k];
        qx += (float)((word >> (k * BITS)) & mask) * xv;
        sx += xv;
      }
      acc[t] += s * qx + b * sx;
    }
  }
}

// Eight 4-bit codes of a word as floats, low nibble first, without integer-to-float conversions
// (a quarter-rate instruction on NVIDIA GPUs, the bottleneck of the first version): a nibble placed
// in the low mantissa bits of 2^23 is 2^23 + q exactly, and one subtraction leaves q.
inline float4 q4_lo(uint w) { return as_float4(((uint4)(w, w >> 4, w >> 8, w >> 12) & 15u) | 0x4B000000u) - 8388608.0f; }
inline float4 q4_hi(uint w) { return as_float4(((uint4)(w >> 16, w >> 20, w >> 24, w >> 28) & 15u) | 0x4B000000u) - 8388608.0f; }

// 4-bit rows, 32 codes (one uint4) per work-item step: wider loads keep more bytes in flight, which
// is what decode needs. Requires words_per_row % 4 == 0 and group_size % 32 == 0 (one group per step).
inline void quant_row_q4x4(__global const uint* wr, uint words, __global const uchar* sr, __global const uchar* br,
                           uint scale_dtype, uint group_size, __global const float* x, uint cols, uint n_t, float* acc) {
  for (uint i = get_local_id(0) % TEAM; i < words / 4u; i += TEAM) {
    const uint4 w4 = vload4(i, wr);
    const uint c0 = i * 32u, g = c0 / group_size;
    const float s = load_value(sr, scale_dtype, g), b = load_value(br, scale_dtype, g);
    const uint wv[4] = {w4.s0, w4.s1, w4.s2, w4.s3};
    for (uint t = 0; t < MAX_T; ++t) {
      if (t >= n_t) break;
      __global const float* xt = x + (ulong)t * cols + c0;
      float qx = 0.0f, sx = 0.0f;
      for (uint k = 0; k < 4; ++k) {
        const float8 xv = vload8(k, xt);
        const float4 p = fma(q4_hi(wv[k]), xv.hi, q4_lo(wv[k]) * xv.lo);
        qx += (p.s0 + p.s1) + (p.s2 + p.s3);
        sx += (xv.s0 + xv.s1) + (xv.s2 + xv.s3) + (xv.s4 + xv.s5) + (xv.s6 + xv.s7);
      }
      acc[t] += s * qx + b * sx;
    }
  }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void matvec_quant(__global const uchar* wbase, ulong w_off, uint bits, ulong words_per_row, __global const uchar* sbase,
                  ulong s_off, __global const uchar* bbase, ulong b_off, uint scale_dtype, uint group_size, uint rows,
                  uint cols, __global const float* x, uint n_t, __global float* out, uint out_stride, uint row0,
                  __global const uchar* bias, ulong bias_off, uint bias_dtype, uint has_bias) {
  __local float red[MAX_T * WG];
  const uint lid = get_local_id(0), lane = lid % TEAM;
  const uint row = get_group_id(0) * ROWS_PER_WG + lid / TEAM;
  float acc[MAX_T];
  for (uint t = 0; t < MAX_T; ++t) acc[t] = 0.0f;
  if (row < rows) {
    __global const uint* wr = (__global const uint*)(wbase + w_off) + (ulong)row * words_per_row;
    const uint groups = cols / group_size;
    const uint ssize = scale_dtype == DT_F32 ? 4u : 2u;
    __global const uchar* sr = sbase + s_off + (ulong)row * groups * ssize;
    __global const uchar* br = bbase + b_off + (ulong)row * groups * ssize;
    const bool whole_words = (32u % bits == 0u) && (group_size % (32u / bits) == 0u);
    if (bits == 4u && words_per_row % 4u == 0u && group_size % 32u == 0u) {
      quant_row_q4x4(wr, (uint)words_per_row, sr, br, scale_dtype, group_size, x, cols, n_t, acc);
    } else if (whole_words && bits == 4u) {
      quant_row_words(wr, (uint)words_per_row, sr, br, scale_dtype, group_size, x, cols, n_t, acc, 4u);
    } else if (whole_words && bits == 8u) {
      quant_row_words(wr, (uint)words_per_row, sr, br, scale_dtype, group_size, x, cols, n_t, acc, 8u);
    } else if (whole_words && bits == 2u) {
      quant_row_words(wr, (uint)words_per_row, sr, br, scale_dtype, group_size, x, cols, n_t, acc, 2u);
    } else {
      for (uint c = lane; c < cols; c += TEAM) {
        const uint g = c / group_size;
        const float wv = load_value(sr, scale_dtype, g) * (float)quant_code(wr, c, bits) + load_value(br, scale_dtype, g);
        for (uint t = 0; t < MAX_T; ++t) {
          if (t >= n_t) break;
          acc[t] += wv * x[(ulong)t * cols + c];
        }
      }
    }
  }
  team_finish(acc, n_t, red, row, rows, out, out_stride, row0, bias + bias_off, bias_dtype, has_bias);
}

// Words 4i..4i+3 of p, with the widest load the address allows: vload4 promises only a word's
// alignment, so compilers split it into four 32-bit loads; a uint4 pointer gives one 16-byte load
// (align: what the host knows of p's alignment in bytes — every row start shares it).
inline uint4 load_words4(__global const uint* p, uint i, uint align) {
  if (align >= 16u) return ((__global const uint4*)p)[i];
  if (align >= 8u) {
    __global const uint2* p2 = (__global const uint2*)p;
    return (uint4)(p2[2 * i], p2[2 * i + 1]);
  }
  return vload4(i, p);
}

// Decode's common case — one activation row, 4-bit weights, groups of 32k columns — with each team
// computing R4 rows: a work-item loads its 32 activations once per step and applies them to R4 weight
// rows, so activation traffic (8 bytes per weight byte with one row per team) drops R4-fold and the
// R4 independent weight loads keep more memory requests in flight. Sums of q·x stay in a float4 per
// row (fused multiply-adds only) and meet once per step.
#ifndef R4
#define R4 4
#endif
// The team of one group of R4 rows: Q4_TEAM work-items (32, 64 or 128) split the columns. A 4096 ×
// 4096 matrix has only 1024 groups of 4 rows — with a warp per group, 8 warps a compute unit on the
// H100, each waiting a memory latency per step; a team of several warps gives every work-item fewer
// steps and the compute unit more warps to switch between. The host builds this program once per team
// size it uses and picks one per matrix: a team given as a kernel argument instead measured up to
// 1.7× slower on the small matrices (perf/results/matvec_gpu_sweeps/).
#ifndef Q4_TEAM
#define Q4_TEAM TEAM
#endif

// One launch serves up to three weights that share the input (q/k/v, gate/up: matmul_multi), their
// rows concatenated: part p holds rows [end(p-1), end(p)) of the launch, each part's rows a multiple
// of R4 so that a team never straddles two. The parts share the words', scales' and biases' buffers
// (offsets differ) and every shape but rows; each has its own output and optional bias (bit p of
// has_bias). A single product is one part (end0 = end1 = end2 = rows). row0: where part 0's rows
// start in its output (a segment of a weight larger than one device allocation).
#define Q4_PARTS_ARGS                                                                                           \
  ulong w_off0, ulong s_off0, ulong b_off0, uint end0, __global float* out0, __global const uchar* bias0,      \
      ulong bias_off0, ulong w_off1, ulong s_off1, ulong b_off1, uint end1, __global float* out1,              \
      __global const uchar* bias1, ulong bias_off1, ulong w_off2, ulong s_off2, ulong b_off2, uint end2,       \
      __global float* out2, __global const uchar* bias2, ulong bias_off2, uint has_bias, uint bias_dtype, uint row0
#define Q4_PARTS_PASS                                                                                        \
  w_off0, s_off0, b_off0, end0, out0, bias0, bias_off0, w_off1, s_off1, b_off1, end1, out1, bias1, bias_off1, \
      w_off2, s_off2, b_off2, end2, out2, bias2, bias_off2, has_bias, bias_dtype, row0

// A team's R4 rows: their part's first words, scales and biases, the first row's index in the part,
// the part's rows, and where its sums go.
typedef struct {
  __global const uint* w;
  __global const uchar* s;
  __global const uchar* b;
  __global float* out;
  __global const uchar* bias;  // NULL: none
  uint first, rows, groups;
} Q4Rows;

inline Q4Rows q4_rows_of_team(__global const uchar* wbase, ulong words_per_row, __global const uchar* sbase,
                              __global const uchar* bbase, uint scale_dtype, uint group_size, uint cols, Q4_PARTS_ARGS) {
  Q4Rows t;
  const uint ssize = scale_dtype == DT_F32 ? 4u : 2u;
  const uint at = (get_group_id(0) * (WG / Q4_TEAM) + get_local_id(0) / Q4_TEAM) * R4;
  const uint p = at < end0 ? 0u : at < end1 ? 1u : 2u;
  const uint start = p == 0u ? 0u : p == 1u ? end0 : end1;
  t.first = at - start;
  t.rows = (p == 0u ? end0 : p == 1u ? end1 : end2) - start;
  t.groups = cols / group_size;
  const ulong w_off = p == 0u ? w_off0 : p == 1u ? w_off1 : w_off2;
  const ulong s_off = p == 0u ? s_off0 : p == 1u ? s_off1 : s_off2;
  const ulong b_off = p == 0u ? b_off0 : p == 1u ? b_off1 : b_off2;
  t.w = (__global const uint*)(wbase + w_off) + (ulong)t.first * words_per_row;
  t.s = sbase + s_off + (ulong)t.first * t.groups * ssize;
  t.b = bbase + b_off + (ulong)t.first * t.groups * ssize;
  t.out = (p == 0u ? out0 + row0 : p == 1u ? out1 : out2);
  t.bias = (has_bias >> p) & 1u ? (p == 0u ? bias0 + bias_off0 + (ulong)row0 * (bias_dtype == DT_F32 ? 4u : 2u)
                                           : p == 1u ? bias1 + bias_off1 : bias2 + bias_off2)
                                : 0;
  return t;
}

// The team's R4 sums meet (warp shuffles, then local memory across a team's warps; or a local tree)
// and lane 0 writes the team's rows.
inline void q4_team_finish(float* acc, __local float* red, const Q4Rows* t, uint bias_dtype) {
  const uint lid = get_local_id(0), lane = lid % Q4_TEAM;
#ifdef SLUICE_PTX_SHFL
  for (uint k = 0; k < R4; ++k) acc[k] = warp_sum(acc[k]);
#if Q4_TEAM > 32
  // The team's warps meet in local memory: each warp's sum at its warp index.
  if (lid % 32u == 0u)
    for (uint k = 0; k < R4; ++k) red[k * WG + lid / 32u] = acc[k];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lane == 0)
    for (uint k = 0; k < R4; ++k) {
      float sum = 0.0f;
      for (uint w = 0; w < Q4_TEAM / 32u; ++w) sum += red[k * WG + lid / 32u + w];
      acc[k] = sum;
    }
#endif
#else
  for (uint k = 0; k < R4; ++k) red[k * WG + lid] = acc[k];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = Q4_TEAM / 2; s > 0; s >>= 1) {
    if (lane < s)
      for (uint k = 0; k < R4; ++k) red[k * WG + lid] += red[k * WG + lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (uint k = 0; k < R4; ++k) acc[k] = red[k * WG + lid];
#endif
  if (lane == 0) {
    for (uint k = 0; k < R4; ++k) {
      const uint r = t->first + k;
      if (r < t->rows) t->out[r] = acc[k] + (t->bias ? load_value(t->bias, bias_dtype, r) : 0.0f);
    }
  }
}

// Step i (32 columns, group g) of the team's rows: every row's words, scale and bias loaded before
// any is used, so R4 requests are in flight. Rows past the part read as zero.
inline void q4_load_step(const Q4Rows* t, ulong words_per_row, uint scale_dtype, uint g, uint i, uint w_align,
                         uint4* w4, float* sc, float* bi) {
  for (uint k = 0; k < R4; ++k) {
    const bool live = t->first + k < t->rows;
    w4[k] = live ? load_words4(t->w + (ulong)k * words_per_row, i, w_align) : (uint4)(0u);
    sc[k] = live ? load_value(t->s, scale_dtype, (ulong)k * t->groups + g) : 0.0f;
    bi[k] = live ? load_value(t->b, scale_dtype, (ulong)k * t->groups + g) : 0.0f;
  }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void matvec_q4_rows(__global const uchar* wbase, ulong words_per_row, __global const uchar* sbase, __global const uchar* bbase,
                    uint scale_dtype, uint group_size, uint cols, uint w_align, __global const float* x, Q4_PARTS_ARGS) {
  __local float red[R4 * WG];
  const Q4Rows t = q4_rows_of_team(wbase, words_per_row, sbase, bbase, scale_dtype, group_size, cols, Q4_PARTS_PASS);
  float acc[R4];
  for (uint k = 0; k < R4; ++k) acc[k] = 0.0f;
  const uint steps = (uint)(words_per_row / 4u);
  for (uint i = get_local_id(0) % Q4_TEAM; i < steps; i += Q4_TEAM) {
    const uint c0 = i * 32u, g = c0 / group_size;
    __global const float8* xv = (__global const float8*)(x + c0);  // 128-byte steps of a device buffer
    const float8 x0 = xv[0], x1 = xv[1], x2 = xv[2], x3 = xv[3];
    const float sx = dot(x0.lo + x0.hi + x1.lo + x1.hi + x2.lo + x2.hi + x3.lo + x3.hi, (float4)(1.0f));
    uint4 w4[R4];
    float sc[R4], bi[R4];
    q4_load_step(&t, words_per_row, scale_dtype, g, i, w_align, w4, sc, bi);
    for (uint k = 0; k < R4; ++k) {
      float4 a = q4_lo(w4[k].s0) * x0.lo;
      a = fma(q4_hi(w4[k].s0), x0.hi, a);
      a = fma(q4_lo(w4[k].s1), x1.lo, a);
      a = fma(q4_hi(w4[k].s1), x1.hi, a);
      a = fma(q4_lo(w4[k].s2), x2.lo, a);
      a = fma(q4_hi(w4[k].s2), x2.hi, a);
      a = fma(q4_lo(w4[k].s3), x3.lo, a);
      a = fma(q4_hi(w4[k].s3), x3.hi, a);
      acc[k] += sc[k] * ((a.s0 + a.s1) + (a.s2 + a.s3)) + bi[k] * sx;
    }
  }
  q4_team_finish(acc, red, &t, bias_dtype);
}

#ifdef SLUICE_PTX_SHFL
// NVIDIA fast path for the same product: the activation in its 15-bit form (kernels_cl/warp.cl), the
// codes multiplied by it four at a time with dp4a. The float kernel above spends about five
// instructions a weight (unpack, convert, multiply-add) and the H100 runs out of issue slots near
// 1.1 TB/s; here eight weights cost three integer operations and four dp4a. An int15 value q is split
// as 128·h + l (h signed, l in 0..127, both bytes): Σ c·q = 128·Σ c·h + Σ c·l, exact in int32.

// Σ a.byte[i] · b.byte[i] + c, a's bytes unsigned (codes), b's signed (activation).
inline int dp4a_us(uint a, int b, int c) {
  int d;
  asm volatile("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Σ codes · bytes over one weight word pair of a block: even and odd nibbles against their words.
inline int dp4a_word(uint w, uint even, uint odd, int acc) {
  return dp4a_us((w >> 4) & 0x0f0f0f0fu, as_int(odd), dp4a_us(w & 0x0f0f0f0fu, as_int(even), acc));
}

// Σ q·x_q over one 32-column step of a row: the four words' codes against the step's high bytes
// (h0, h1) and low bytes (l0, l1), 128·Σ c·h + Σ c·l.
inline int dp4a_step(uint4 w, uint4 h0, uint4 h1, uint4 l0, uint4 l1) {
  int dh = dp4a_word(w.s0, h0.s0, h0.s1, 0);
  dh = dp4a_word(w.s1, h0.s2, h0.s3, dh);
  dh = dp4a_word(w.s2, h1.s0, h1.s1, dh);
  dh = dp4a_word(w.s3, h1.s2, h1.s3, dh);
  int dl = dp4a_word(w.s0, l0.s0, l0.s1, 0);
  dl = dp4a_word(w.s1, l0.s2, l0.s3, dl);
  dl = dp4a_word(w.s2, l1.s0, l1.s1, dl);
  dl = dp4a_word(w.s3, l1.s2, l1.s3, dl);
  return dh * 128 + dl;
}

// The team's sums of its R4 rows against the 15-bit form, from column step `first` on.
inline void q4_dp4a_sums(const Q4Rows* t, ulong words_per_row, uint scale_dtype, uint group_size, uint cols, uint w_align,
                         __global const uint4* xq, __global const float2* blocks, uint first, float* acc) {
  for (uint k = 0; k < R4; ++k) acc[k] = 0.0f;
  const uint steps = (uint)(words_per_row / 4u), n_blocks = cols / 32u;
  for (uint i = first; i < steps; i += Q4_TEAM) {
    const uint g = i * 32u / group_size;
    const uint4 h0 = xq[i], h1 = xq[n_blocks + i], l0 = xq[2u * n_blocks + i], l1 = xq[3u * n_blocks + i];
    const float2 blk = blocks[i];
    uint4 w4[R4];
    float sc[R4], bi[R4];
    q4_load_step(t, words_per_row, scale_dtype, g, i, w_align, w4, sc, bi);
    for (uint k = 0; k < R4; ++k) acc[k] += sc[k] * blk.x * (float)dp4a_step(w4[k], h0, h1, l0, l1) + bi[k] * blk.y;
  }
}

// A product whose input is an RMS norm's output that no launch computed (the host joined the norm
// to the product before it: matvec_q4_dp4a_res below). The form then holds (w + w_offset) ⊙ x — the
// norm without its one scalar 1/rms — and norm_parts[b] the Σ x² of block b of the residual row x;
// the reader scales its sums by 1/rms = (Σ parts / dim + eps)^-½ (the product is linear in its
// input) and writes the normalised row itself (norm_out), one value a work-item, for any later
// reader. norm_blocks = dim / 32; 0: the input is what the form says, nothing to scale.
#define NORM_ARGS                                                                                                   \
  __global const float *norm_parts, uint norm_blocks, float norm_eps, __global const float *norm_x,                \
      __global const uchar *norm_w, ulong norm_w_off, uint norm_w_dtype, float norm_w_offset, __global float *norm_out

// This lane's share of Σ parts (loaded early: the sum is needed only after the product's loop).
inline float norm_parts_share(__global const float* parts, uint n_blocks) {
  float s = 0.0f;
  for (uint b = get_local_id(0) % 32u; b < n_blocks; b += 32u) s += parts[b];
  return s;
}

// 1/rms from the lanes' shares, by whole warps; and the normalised row's value of this work-item.
inline float norm_scale(float share, NORM_ARGS) {
  const float inv = 1.0f / sqrt(warp_sum(share) / (float)(norm_blocks * 32u) + norm_eps);
  const size_t i = get_global_id(0);
  if (i < norm_blocks * 32u) norm_out[i] = (load_value(norm_w + norm_w_off, norm_w_dtype, i) + norm_w_offset) * (norm_x[i] * inv);
  return inv;
}
#define NORM_PASS norm_parts, norm_blocks, norm_eps, norm_x, norm_w, norm_w_off, norm_w_dtype, norm_w_offset, norm_out

// matvec_q4_rows with the activation's 15-bit form (one activation row, 4-bit, groups of 32k).
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void matvec_q4_dp4a(__global const uchar* wbase, ulong words_per_row, __global const uchar* sbase, __global const uchar* bbase,
                    uint scale_dtype, uint group_size, uint cols, uint w_align, __global const uint4* xq,
                    __global const float2* blocks, Q4_PARTS_ARGS, NORM_ARGS) {
  __local float red[R4 * WG];
  const Q4Rows t = q4_rows_of_team(wbase, words_per_row, sbase, bbase, scale_dtype, group_size, cols, Q4_PARTS_PASS);
  const float share = norm_blocks ? norm_parts_share(norm_parts, norm_blocks) : 0.0f;
  float acc[R4];
  q4_dp4a_sums(&t, words_per_row, scale_dtype, group_size, cols, w_align, xq, blocks, get_local_id(0) % Q4_TEAM, acc);
  if (norm_blocks) {
    const float inv = norm_scale(share, NORM_PASS);
    for (uint k = 0; k < R4; ++k) acc[k] *= inv;
  }
  q4_team_finish(acc, red, &t, bias_dtype);
}

// Decode's residual step after a product (the o projection, down), in the product's launch: the host
// joins add_rms_norm(x, delta = this product, w) to the product before it. A work-group of RES_WG
// computes 32 consecutive rows — one block of the 15-bit form — as matvec_q4_dp4a's teams do, writes
// them (delta), then its first warp adds them to the residual row x and writes the next product's
// input: (w + w_offset) ⊙ x in 15-bit form and the block's Σ x² in parts (NORM_ARGS above), so no
// launch computes the norm. RES_WG: the 32 / R4 teams of Q4_TEAM whose R4 rows make the block.
#define RES_WG (32 / R4 * Q4_TEAM)
#if RES_WG <= 1024
__kernel __attribute__((reqd_work_group_size(RES_WG, 1, 1)))
void matvec_q4_dp4a_res(__global const uchar* wbase, ulong words_per_row, __global const uchar* sbase,
                        __global const uchar* bbase, uint scale_dtype, uint group_size, uint cols, uint w_align,
                        __global const uint4* xq, __global const float2* blocks, ulong w_off, ulong s_off, ulong b_off,
                        uint rows, __global float* delta, __global float* x, __global const uchar* nw, ulong nw_off,
                        uint nw_dtype, float nw_offset, __global uchar* out_q, __global float2* out_blocks,
                        __global float* parts) {
  __local float red[R4 * WG];  // q4_team_finish's: indexed by warp, RES_WG / 32 <= WG
  const uint lid = get_local_id(0), ssize = scale_dtype == DT_F32 ? 4u : 2u;
  Q4Rows t;
  t.first = get_group_id(0) * 32u + lid / Q4_TEAM * R4;
  t.rows = rows;
  t.groups = cols / group_size;
  t.w = (__global const uint*)(wbase + w_off) + (ulong)t.first * words_per_row;
  t.s = sbase + s_off + (ulong)t.first * t.groups * ssize;
  t.b = bbase + b_off + (ulong)t.first * t.groups * ssize;
  t.out = delta;
  t.bias = 0;
  float acc[R4];
  q4_dp4a_sums(&t, words_per_row, scale_dtype, group_size, cols, w_align, xq, blocks, lid % Q4_TEAM, acc);
  q4_team_finish(acc, red, &t, 0u);
  barrier(CLK_GLOBAL_MEM_FENCE);  // the block's 32 rows of delta, written by its teams' first lanes
  if (lid < 32u) {
    const uint r = get_group_id(0) * 32u + lid;
    const float v = x[r] + delta[r];
    x[r] = v;
    int15_store((load_value(nw + nw_off, nw_dtype, r) + nw_offset) * v, r, true, rows, out_q, out_blocks);
    const float ss = warp_sum(v * v);
    if (lid == 0u) parts[get_group_id(0)] = ss;
  }
}
#endif

// Decode's gated MLP input in one launch (on NVIDIA, the host joins matmul_multi's gate/up with the
// gated_activation after it): a warp computes row r of the gate and of the up matrix (the two parts,
// F rows each, F % 32 == 0) from the activation's 15-bit form, writes both, act(gate) · up, and —
// since a work-group of GLU_WG warps holds 32 consecutive rows, one block — the 15-bit form of the
// activation rows for the down product, into a second buffer (the kernel reads the first). One launch
// fewer per layer than the product, then gated_activation_int15.
#define GLU_WG 1024
#define GLU_ARGS                                                                                                     \
  __global const uchar *wbase, ulong words_per_row, __global const uchar *sbase, __global const uchar *bbase,          \
      uint scale_dtype, uint group_size, uint cols, uint w_align, __global const uint4 *xq,                          \
      __global const float2 *blocks, ulong w_off0, ulong s_off0, ulong b_off0, ulong w_off1, ulong s_off1,           \
      ulong b_off1, uint rows, __global float *gate, __global float *up, __global float *act, uint activation,       \
      __global uchar *act_q, __global float2 *act_blocks, NORM_ARGS
#define GLU_PASS                                                                                                    \
  wbase, words_per_row, sbase, bbase, scale_dtype, group_size, cols, w_align, xq, blocks, w_off0, s_off0, b_off0,      \
      w_off1, s_off1, b_off1, rows, gate, up, act, activation, act_q, act_blocks, NORM_PASS

// Row r of the gate and of the up matrix by one warp: their sums (normalised where the input is a
// joined norm's), in every lane.
inline float2 glu_sums(uint r, GLU_ARGS) {
  const uint lane = get_local_id(0) % 32u;
  const uint ssize = scale_dtype == DT_F32 ? 4u : 2u, groups = cols / group_size;
  __global const uint* w0 = (__global const uint*)(wbase + w_off0) + (ulong)r * words_per_row;
  __global const uint* w1 = (__global const uint*)(wbase + w_off1) + (ulong)r * words_per_row;
  __global const uchar* s0 = sbase + s_off0 + (ulong)r * groups * ssize;
  __global const uchar* s1 = sbase + s_off1 + (ulong)r * groups * ssize;
  __global const uchar* b0 = bbase + b_off0 + (ulong)r * groups * ssize;
  __global const uchar* b1 = bbase + b_off1 + (ulong)r * groups * ssize;
  const float share = norm_blocks ? norm_parts_share(norm_parts, norm_blocks) : 0.0f;
  float acc0 = 0.0f, acc1 = 0.0f;
  const uint steps = (uint)(words_per_row / 4u), n_blocks = cols / 32u;
  for (uint i = lane; i < steps; i += 32u) {
    const uint g = i * 32u / group_size;
    const uint4 h0 = xq[i], h1 = xq[n_blocks + i], l0 = xq[2u * n_blocks + i], l1 = xq[3u * n_blocks + i];
    const float2 blk = blocks[i];
    const uint4 wa = load_words4(w0, i, w_align), wb = load_words4(w1, i, w_align);
    const float sa = load_value(s0, scale_dtype, g), sb = load_value(s1, scale_dtype, g);
    const float ba = load_value(b0, scale_dtype, g), bb = load_value(b1, scale_dtype, g);
    acc0 += sa * blk.x * (float)dp4a_step(wa, h0, h1, l0, l1) + ba * blk.y;
    acc1 += sb * blk.x * (float)dp4a_step(wb, h0, h1, l0, l1) + bb * blk.y;
  }
  acc0 = warp_sum(acc0);
  acc1 = warp_sum(acc1);
  if (norm_blocks) {
    const float inv = norm_scale(share, NORM_PASS);
    acc0 *= inv;
    acc1 *= inv;
  }
  return (float2)(acc0, acc1);
}

__kernel __attribute__((reqd_work_group_size(GLU_WG, 1, 1)))
void matvec_q4_dp4a_glu(GLU_ARGS) {
  __local float acts[GLU_WG / 32];
  const uint lane = get_local_id(0) % 32u, warp = get_local_id(0) / 32u;
  const uint r = get_group_id(0) * (GLU_WG / 32u) + warp;
  const float2 gu = glu_sums(r, GLU_PASS);
  if (lane == 0) {
    const float a = activation_of(gu.x, activation) * gu.y;
    gate[r] = gu.x;
    up[r] = gu.y;
    act[r] = a;
    acts[warp] = a;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (warp == 0) int15_store(acts[lane], get_group_id(0) * 32u + lane, true, rows, act_q, act_blocks);
}

// The same with work-groups of WG (WG / 32 row pairs, a divisor of 32), so that a block spans several
// groups: each group writes its rows' gate, up and activation, fences them at device scope and counts
// itself on block_done[b]; the group whose count completes the block fences again (acquire), reads
// the block's 32 activations past L1 (other compute units wrote them), writes their form and sets
// the count back to zero for the next launch. Why (the host's default, cl_matmul.cpp): a group of
// 1024 holds its compute unit until its slowest warp is done, and the launch's last wave of such
// groups ran on part of the GPU; small groups keep every compute unit streaming to the end.
#if WG <= 1024 && 32 % (WG / 32) == 0
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void matvec_q4_dp4a_glu_blocks(GLU_ARGS, __global uint* block_done) {
  __local uint last;
  const uint lane = get_local_id(0) % 32u, warp = get_local_id(0) / 32u;
  const uint r = get_group_id(0) * (WG / 32u) + warp;
  const float2 gu = glu_sums(r, GLU_PASS);
  if (lane == 0) {
    gate[r] = gu.x;
    up[r] = gu.y;
    act[r] = activation_of(gu.x, activation) * gu.y;
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
  }
  barrier(CLK_GLOBAL_MEM_FENCE);
  const uint b = get_group_id(0) * (WG / 32u) / 32u;
  if (get_local_id(0) == 0u) {
    const bool done = atomic_inc(block_done + b) == 32u / (WG / 32u) - 1u;
    if (done) asm volatile("fence.acq_rel.gpu;" ::: "memory");
    last = done;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (last && warp == 0) {
    int15_store(((volatile __global const float*)act)[b * 32u + lane], b * 32u + lane, true, rows, act_q, act_blocks);
    if (lane == 0u) block_done[b] = 0u;
  }
}
#endif
#endif
