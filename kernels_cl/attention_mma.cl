// Prefill attention on NVIDIA tensor cores (sm_80+), through inline PTX mma.sync.m16n8k16 (f16
// inputs, f32 sums): for a run of consecutive positions of one sequence, every query of the run
// against the keys it attends, which cl_attention.cpp has first gathered into contiguous f16 rows
// (kv_gather_f16 in attention.cl: K and V as [KV head][key][HEAD_DIM], zero rows up to n_pad, a
// multiple of AM_BK). The portable kernels (attention.cl) score each query's keys on their own and
// so read the history once per query; here a work-group reads each 64-key tile once for 64 queries.
// Built only when the device accepts PTX; the portable kernels are the reference and fallback.
//
// A work-group of AM_BQ / 16 warps takes AM_BQ (64 or 128) queries of one query head (warp w: rows 16w..16w+15) and
// walks the keys in AM_BK (64) tiles: S = Q·Kᵀ (mma), masked to each query's range [lo, pos], an
// online softmax in f32 per row (in base 2: scores times log2 e, so exp2), P rounded to f16, O += P·V
// (mma, P taken straight from S's accumulator fragments: a 16×8 f32 C fragment pair is a 16×16 A
// fragment), and O / l written as the portable kernels write it.
//
// Precision: Q rounded to f16 once (relative 2⁻¹¹), K and V are the cache's f16 rows, P rounded to
// f16 (relative 2⁻¹¹ a weight, while l sums the f32 weights); score and output sums in f32.
//
// Local memory: the K tile as [key][HEAD_DIM] halves and the V tile transposed ([dim][key]) — so
// that both mma B fragments (two consecutive k for one n) are one 32-bit word — each row padded by
// 8 halves: the 8 rows a fragment load touches then start 4 banks apart, and the 4 lanes of a row
// take the 4 banks between.
//
// Built with HEAD_DIM (a multiple of 16, at most 128: the O accumulators are HEAD_DIM / 2 floats a
// work-item, beside the query fragments).

#ifndef AM_BQ
#define AM_BQ 64  // queries a work-group: 64 or 128 (tuning mma_att_queries), a warp per 16
#endif
#define AM_BK 64
#define AM_WG (2 * AM_BQ)
#define AM_KS (HEAD_DIM / 2 + 4)  // 32-bit words a staged key row takes
#define AM_VS (AM_BK / 2 + 4)     // 32-bit words a staged (transposed) value row takes
#define AM_LOG2E 1.4426950408889634f

// Two floats as one f16x2 word, `lo` in the low half (the lower column or key).
inline uint am_pack(float lo, float hi) {
  uint r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// c += A·B for one m16n8k16 tile: a[4] the A fragment, b0/b1 the B fragment (PTX ISA layouts).
inline void am_mma(float* c, const uint* a, uint b0, uint b1) {
  float d0, d1, d2, d3;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
      : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
  c[0] = d0;
  c[1] = d1;
  c[2] = d2;
  c[3] = d3;
}

// The value of lane (lane ^ m): the four lanes that hold one row's columns meet through m = 1, 2.
inline float am_xor(float v, int m) {
  int o;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(o) : "r"(as_int(v)), "r"(m));
  return as_float(o);
}

// One query row's score in base 2 from q·k (q already scaled by scale·log2 e without softcap).
inline float am_capped(float s, float scale, float softcap) {
  return softcap > 0.0f ? tanh(s * scale / softcap) * softcap * AM_LOG2E : s;
}

// The last key a query at pos reads from the gathered (codec) rows: pos itself, or with a recent
// window (recent_window > 0) the key before its first exact one — max(pos − window + 1, floor), where
// floor is the first position whose page keeps an exact copy (cl_attention_path.h; the exact keys go
// to attention_recent_partial, attention.cl). A position below floor reads every key from the codec.
inline int am_last_key(int pos, uint recent_window, int recent_floor) {
  return recent_window == 0u ? pos : min(pos, max(pos - (int)recent_window, recent_floor - 1));
}

// Grid: (AM_WG × query blocks, query heads, key splits). q/out: [token][head][HEAD_DIM] floats, the
// run's queries at tokens first_token.., positions first_pos..; kx/vx: the gathered rows (f16 bits),
// key i at position k_lo + i. window: the sliding window (0: none); sinks: one logit per head, no
// value. With partial_stride > 1 each work-group takes its share (n_splits) of the block's key tiles
// and writes its unnormalised partial (m, l in base 2, then HEAD_DIM sums) per (run row, head, split)
// to partial, partial_stride partials a (row, head), for attention_mma_merge: a long history over few
// (block, head) pairs would otherwise leave compute units idle (256 work-groups for 132 on the H100 at
// pp512 with 32 heads). With a recent window the keys each query reads exactly are left out here
// (am_last_key) and their partial is the last of the stride.
__kernel __attribute__((reqd_work_group_size(AM_WG, 1, 1)))
void attention_mma(__global const float* q, __global float* out, __global const uint* kx, __global const uint* vx,
                   uint n_pad, int k_lo, uint first_token, int first_pos, uint n_queries, uint n_heads, uint group,
                   float scale, uint window, float softcap, __global const float* sinks, uint has_sinks, uint n_splits,
                   __global float* partial, uint partial_stride, uint recent_window, int recent_floor) {
  __local uint ks[AM_BK * AM_KS];
  __local uint vt[HEAD_DIM * AM_VS];
  const uint lid = get_local_id(0), warp = lid / 32, lane = lid % 32, g = lane >> 2, tq = lane & 3;
  // The causal mask makes later blocks longer: they start first, the short ones fill in behind.
  const uint qb = get_num_groups(0) - 1 - get_group_id(0);
  const uint h = get_group_id(1), kvh = h / group;
  const uint r0 = qb * AM_BQ + warp * 16 + g, r1 = r0 + 8;  // this work-item's two rows of the run
  const int pos0 = first_pos + (int)r0, pos1 = first_pos + (int)r1;
  const int hi0 = am_last_key(pos0, recent_window, recent_floor), hi1 = am_last_key(pos1, recent_window, recent_floor);
  const int lo0 = window ? max(0, pos0 - (int)window + 1) : 0, lo1 = window ? max(0, pos1 - (int)window + 1) : 0;

  // The query fragments, f16, for every 16-dim step: [0] row r0 dims 2tq.., [1] row r1, [2]/[3] dims + 8.
  // Without softcap the query carries scale·log2 e, so the scores come out in base 2 as they are.
  const float q_mul = softcap > 0.0f ? 1.0f : scale * AM_LOG2E;
  uint qa[HEAD_DIM / 16][4];
  {
    __global const float* q0 = q + ((ulong)(first_token + r0) * n_heads + h) * HEAD_DIM + 2 * tq;
    __global const float* q1 = q + ((ulong)(first_token + r1) * n_heads + h) * HEAD_DIM + 2 * tq;
#pragma unroll
    for (uint d = 0; d < HEAD_DIM / 16; ++d)
#pragma unroll
      for (uint hi8 = 0; hi8 < 2; ++hi8) {
        const float2 a = r0 < n_queries ? vload2(0, q0 + d * 16 + hi8 * 8) : (float2)(0.0f);
        const float2 b = r1 < n_queries ? vload2(0, q1 + d * 16 + hi8 * 8) : (float2)(0.0f);
        qa[d][hi8 * 2] = am_pack(a.x * q_mul, a.y * q_mul);
        qa[d][hi8 * 2 + 1] = am_pack(b.x * q_mul, b.y * q_mul);
      }
  }

  const uint split = get_group_id(2);
  const bool sink = has_sinks != 0 && split == 0;  // the sink joins one split's softmax
  float m0 = sink ? sinks[h] * AM_LOG2E : -INFINITY, m1 = m0;
  float l0 = sink ? 1.0f : 0.0f, l1 = l0;
  float o[HEAD_DIM / 8][4];
#pragma unroll
  for (uint n = 0; n < HEAD_DIM / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

  // The block's keys: from its first row's window start to its last row's position.
  const uint last_row = min(qb * AM_BQ + AM_BQ - 1, n_queries - 1);
  const int block_lo = window ? max(0, first_pos + (int)(qb * AM_BQ) - (int)window + 1) : 0;
  const int i_first = (block_lo - k_lo) / AM_BK * AM_BK;
  const int i_last = am_last_key(first_pos + (int)last_row, recent_window, recent_floor) - k_lo;
  const int n_tiles = (i_last - i_first) / AM_BK + 1, per_split = (n_tiles + (int)n_splits - 1) / (int)n_splits;
  const int kb_begin = i_first + (int)split * per_split * AM_BK;
  const int kb_end = min(i_last + 1, kb_begin + per_split * AM_BK);  // exclusive
  // Keys every row of this warp attends: tiles inside [warp_lo, warp_hi] need no mask.
  const int warp_hi = am_last_key(first_pos + (int)(qb * AM_BQ + warp * 16), recent_window, recent_floor) - k_lo;
  const int warp_lo = (window ? max(0, first_pos + (int)(qb * AM_BQ + warp * 16 + 15) - (int)window + 1) : 0) - k_lo;
  __global const uint4* kg = (__global const uint4*)(kx + (ulong)kvh * n_pad * (HEAD_DIM / 2));
  __global const uint4* vg = (__global const uint4*)(vx + (ulong)kvh * n_pad * (HEAD_DIM / 2));
  __local ushort* vt_h = (__local ushort*)vt;

  for (int kb = kb_begin; kb < kb_end; kb += AM_BK) {
    // Stage the tile: K rows as they are (consecutive work-items, consecutive 16-byte pieces of a
    // row); V transposed (consecutive work-items, consecutive keys: their 2-byte stores share words).
    for (uint c = lid; c < AM_BK * HEAD_DIM / 8; c += AM_WG) {
      const uint row = c / (HEAD_DIM / 8), piece = c % (HEAD_DIM / 8);
      ((__local uint4*)ks)[(row * AM_KS) / 4 + piece] = kg[(ulong)(kb + row) * (HEAD_DIM / 8) + piece];
      const uint key = c % AM_BK, vpiece = c / AM_BK;
      const uint4 w = vg[(ulong)(kb + key) * (HEAD_DIM / 8) + vpiece];
      const uint words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (uint e = 0; e < 8; ++e) vt_h[(vpiece * 8 + e) * (AM_VS * 2) + key] = (ushort)(words[e / 2] >> (16 * (e & 1)));
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // S = Q·Kᵀ: 8 tiles of 8 keys; s[n][0..1] row r0 keys 8n + 2tq (+1), s[n][2..3] row r1.
    float s[AM_BK / 8][4];
#pragma unroll
    for (uint n = 0; n < AM_BK / 8; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
      const uint at = (n * 8 + g) * AM_KS + tq;
#pragma unroll
      for (uint d = 0; d < HEAD_DIM / 16; ++d) am_mma(s[n], qa[d], ks[at + d * 8], ks[at + d * 8 + 4]);
    }

    // Online softmax, rows r0 and r1: the tile's maximum, the rescale of what came before, weights.
    // The mask only where the tile crosses some row's range (the diagonal, the window's edge): a
    // branch uniform over the warp, since the per-element compares cost as much as the mma.
    float mx0 = -INFINITY, mx1 = -INFINITY;
    const bool inside = kb >= warp_lo && kb + AM_BK - 1 <= warp_hi;
    const int key0 = k_lo + kb + 2 * (int)tq;
#pragma unroll
    for (uint n = 0; n < AM_BK / 8; ++n)
#pragma unroll
      for (uint e = 0; e < 2; ++e) {
        float a = am_capped(s[n][e], scale, softcap), b = am_capped(s[n][2 + e], scale, softcap);
        if (!inside) {
          const int key = key0 + (int)(n * 8 + e);
          a = key < lo0 || key > hi0 ? -INFINITY : a;
          b = key < lo1 || key > hi1 ? -INFINITY : b;
        }
        s[n][e] = a;
        s[n][2 + e] = b;
        mx0 = fmax(mx0, a);
        mx1 = fmax(mx1, b);
      }
    mx0 = fmax(mx0, am_xor(mx0, 1));
    mx0 = fmax(mx0, am_xor(mx0, 2));
    mx1 = fmax(mx1, am_xor(mx1, 1));
    mx1 = fmax(mx1, am_xor(mx1, 2));
    const float mn0 = fmax(m0, mx0), mn1 = fmax(m1, mx1);
    // A row with no key yet keeps -INFINITY: subtract 0 then, so exp2 gives 0 rather than NaN.
    const float base0 = mn0 == -INFINITY ? 0.0f : mn0, base1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float corr0 = native_exp2(m0 - base0), corr1 = native_exp2(m1 - base1);
    m0 = mn0;
    m1 = mn1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (uint n = 0; n < AM_BK / 8; ++n)
#pragma unroll
      for (uint e = 0; e < 2; ++e) {
        s[n][e] = native_exp2(s[n][e] - base0);
        s[n][2 + e] = native_exp2(s[n][2 + e] - base1);
        sum0 += s[n][e];
        sum1 += s[n][2 + e];
      }
    sum0 += am_xor(sum0, 1);
    sum0 += am_xor(sum0, 2);
    sum1 += am_xor(sum1, 1);
    sum1 += am_xor(sum1, 2);
    l0 = l0 * corr0 + sum0;
    l1 = l1 * corr1 + sum1;
#pragma unroll
    for (uint n = 0; n < HEAD_DIM / 8; ++n) {
      o[n][0] *= corr0;
      o[n][1] *= corr0;
      o[n][2] *= corr1;
      o[n][3] *= corr1;
    }

    // O += P·V, 16 keys a step: the S fragments of key tiles 2j and 2j + 1 are P's A fragment.
#pragma unroll
    for (uint j = 0; j < AM_BK / 16; ++j) {
      const uint pa[4] = {am_pack(s[2 * j][0], s[2 * j][1]), am_pack(s[2 * j][2], s[2 * j][3]),
                          am_pack(s[2 * j + 1][0], s[2 * j + 1][1]), am_pack(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
      for (uint n = 0; n < HEAD_DIM / 8; ++n) {
        const uint at = (n * 8 + g) * AM_VS + j * 8 + tq;
        am_mma(o[n], pa, vt[at], vt[at + 4]);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the tiles are restaged next step
  }

  if (partial_stride > 1) {
    __global float* p0 = partial + ((ulong)(r0 * n_heads + h) * partial_stride + split) * (HEAD_DIM + 2);
    __global float* p1 = partial + ((ulong)(r1 * n_heads + h) * partial_stride + split) * (HEAD_DIM + 2);
    if (tq == 0 && r0 < n_queries) vstore2((float2)(m0, l0), 0, p0);
    if (tq == 0 && r1 < n_queries) vstore2((float2)(m1, l1), 0, p1);
#pragma unroll
    for (uint n = 0; n < HEAD_DIM / 8; ++n) {
      if (r0 < n_queries) vstore2((float2)(o[n][0], o[n][1]), 0, p0 + 2 + n * 8 + 2 * tq);
      if (r1 < n_queries) vstore2((float2)(o[n][2], o[n][3]), 0, p1 + 2 + n * 8 + 2 * tq);
    }
    return;
  }
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
  __global float* o0 = out + ((ulong)(first_token + r0) * n_heads + h) * HEAD_DIM + 2 * tq;
  __global float* o1 = out + ((ulong)(first_token + r1) * n_heads + h) * HEAD_DIM + 2 * tq;
#pragma unroll
  for (uint n = 0; n < HEAD_DIM / 8; ++n) {
    if (r0 < n_queries) vstore2((float2)(o[n][0] * inv0, o[n][1] * inv0), 0, o0 + n * 8);
    if (r1 < n_queries) vstore2((float2)(o[n][2] * inv1, o[n][3] * inv1), 0, o1 + n * 8);
  }
}

// Combines attention_mma's key splits: one work-item per (run row and head, dim). Each reads the
// splits' maxima and sums (a few floats, cached) and weighs its dim of every split's sums.
__kernel void attention_mma_merge(__global const float* partial, __global float* out, uint n_splits, uint first_token,
                                  uint n_heads) {
  const uint d = get_global_id(0), rh = get_global_id(1);
  __global const float* part = partial + (ulong)rh * n_splits * (HEAD_DIM + 2);
  float top = -INFINITY;
  for (uint s = 0; s < n_splits; ++s) top = fmax(top, part[s * (HEAD_DIM + 2)]);
  float l = 0.0f, acc = 0.0f;
  for (uint s = 0; s < n_splits; ++s) {
    __global const float* ps = part + s * (HEAD_DIM + 2);
    const float w = ps[1] == 0.0f ? 0.0f : native_exp2(ps[0] - top);  // a split with no key of this row weighs nothing
    l += ps[1] * w;
    acc += ps[2 + d] * w;
  }
  out[((ulong)first_token * n_heads + rh) * HEAD_DIM + d] = acc / l;
}
