// Decode products for a batch of sequences: out[t, r] = Σ_c x[t, c] · w[r, c] for n_t activation rows
// (one a sequence), 4-bit weights in groups of 32k columns. Decode is bound by reading the weights, and
// a batch should cost what one row costs: each work-item dequantizes a weight step once and applies it
// to BATCH_T activation rows, so a weight byte is read once per BATCH_T rows, not once per row as the
// general kernel (matvec_quant) does. Batches larger than BATCH_T are split into chunks along the
// launch's first dimension, the chunks of one block of weight rows in consecutive work-groups: they run
// together, and the later ones find the weights in L2.
//
// Built with kernels_cl/matvec.cl (q4_lo, q4_hi, load_words4). A team of 32 work-items (a warp on
// NVIDIA) computes BATCH_R weight rows; WG / 32 teams a work-group.

#ifndef BATCH_T
#define BATCH_T 8
#endif
#ifndef BATCH_R
#define BATCH_R 2
#endif
#define BATCH_TEAMS (WG / 32)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void matvec_q4_batch(__global const uchar* wbase, ulong w_off, ulong words_per_row, __global const uchar* sbase,
                     ulong s_off, __global const uchar* bbase, ulong b_off, uint scale_dtype, uint group_size, uint rows,
                     uint cols, uint w_align, __global const float* x, uint n_t, uint chunks, __global float* out,
                     uint out_stride, uint row0, __global const uchar* bias, ulong bias_off, uint bias_dtype,
                     uint has_bias) {
  const uint lid = get_local_id(0), lane = lid % 32u;
  const uint chunk = get_group_id(0) % chunks;
  const uint first = (get_group_id(0) / chunks * BATCH_TEAMS + lid / 32u) * BATCH_R;
  const uint t0 = chunk * BATCH_T, nt = min((uint)BATCH_T, n_t - t0);
  const uint groups = cols / group_size, ssize = scale_dtype == DT_F32 ? 4u : 2u;
  __global const uint* w = (__global const uint*)(wbase + w_off) + (ulong)first * words_per_row;
  __global const uchar* s = sbase + s_off + (ulong)first * groups * ssize;
  __global const uchar* b = bbase + b_off + (ulong)first * groups * ssize;
  __global const float* xc = x + (ulong)t0 * cols;

  // Every loop below has compile-time bounds and is unrolled, so that acc, the words and the
  // dequantized weights stay in registers: indexed by a loop variable the compiler does not unroll, a
  // private array lives in (slow) stack memory. Rows of the chunk past the batch read the batch's last
  // row (valid memory, no branch in the loop) and are not written.
  __global const float* xt[BATCH_T];
#pragma unroll
  for (uint t = 0; t < BATCH_T; ++t) xt[t] = xc + (ulong)min(t, nt - 1u) * cols;
  float acc[BATCH_R][BATCH_T];
#pragma unroll
  for (uint k = 0; k < BATCH_R; ++k)
#pragma unroll
    for (uint t = 0; t < BATCH_T; ++t) acc[k][t] = 0.0f;
  const uint steps = (uint)(words_per_row / 4u);
  for (uint i = lane; i < steps; i += 32u) {
    const uint c0 = i * 32u, g = c0 / group_size;
    // Every row's words, scale and bias requested before any is used: BATCH_R loads in flight.
    uint4 w4[BATCH_R];
    float sc[BATCH_R], bi[BATCH_R];
#pragma unroll
    for (uint k = 0; k < BATCH_R; ++k) {
      const bool live = first + k < rows;
      w4[k] = live ? load_words4(w + (ulong)k * words_per_row, i, w_align) : (uint4)(0u);
      sc[k] = live ? load_value(s, scale_dtype, (ulong)k * groups + g) : 0.0f;
      bi[k] = live ? load_value(b, scale_dtype, (ulong)k * groups + g) : 0.0f;
    }
#pragma unroll
    for (uint j = 0; j < 4u; ++j) {
      // The word's eight weights, dequantized once for every activation row.
      float4 lo[BATCH_R], hi[BATCH_R];
#pragma unroll
      for (uint k = 0; k < BATCH_R; ++k) {
        const uint word = j == 0u ? w4[k].s0 : j == 1u ? w4[k].s1 : j == 2u ? w4[k].s2 : w4[k].s3;
        lo[k] = fma(q4_lo(word), (float4)(sc[k]), (float4)(bi[k]));
        hi[k] = fma(q4_hi(word), (float4)(sc[k]), (float4)(bi[k]));
      }
#pragma unroll
      for (uint t = 0; t < BATCH_T; ++t) {
        const float8 xv = ((__global const float8*)(xt[t] + c0))[j];  // 32-byte aligned: cols % 32 == 0
#pragma unroll
        for (uint k = 0; k < BATCH_R; ++k) acc[k][t] += dot(lo[k], xv.lo) + dot(hi[k], xv.hi);
      }
    }
  }

  // The team's sums meet: warp shuffles on NVIDIA, else a tree in local memory.
#ifdef SLUICE_PTX_SHFL
#pragma unroll
  for (uint k = 0; k < BATCH_R; ++k)
#pragma unroll
    for (uint t = 0; t < BATCH_T; ++t)
      if (t < nt) acc[k][t] = warp_sum(acc[k][t]);
#else
  __local float red[BATCH_R * BATCH_T * WG];
  for (uint k = 0; k < BATCH_R; ++k)
    for (uint t = 0; t < BATCH_T; ++t) red[(k * BATCH_T + t) * WG + lid] = acc[k][t];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint half_team = 16u; half_team > 0u; half_team >>= 1) {
    if (lane < half_team)
      for (uint kt = 0; kt < BATCH_R * BATCH_T; ++kt) red[kt * WG + lid] += red[kt * WG + lid + half_team];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (uint k = 0; k < BATCH_R; ++k)
    for (uint t = 0; t < BATCH_T; ++t) acc[k][t] = red[(k * BATCH_T + t) * WG + lid];
#endif
  if (lane == 0u) {
#pragma unroll
    for (uint k = 0; k < BATCH_R; ++k) {
      const uint r = first + k;
      if (r >= rows) break;
      const float add = has_bias ? load_value(bias + bias_off, bias_dtype, row0 + r) : 0.0f;
#pragma unroll
      for (uint t = 0; t < BATCH_T; ++t)
        if (t < nt) out[(ulong)(t0 + t) * out_stride + row0 + r] = acc[k][t] + add;
    }
  }
}
