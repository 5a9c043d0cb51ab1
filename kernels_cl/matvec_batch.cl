// Decode products for a batch of sequences: out[t, r] = Σ_c x[t, c] · w[r, c] for n_t activation rows
// (one a sequence), 4-bit weights in groups of 32k columns. Decode is bound by reading the weights, and
// a batch should cost what one row costs: each work-item dequantizes a weight word once and applies it
// to BATCH_T activation rows, so a weight byte is read once per BATCH_T rows, not once per row as the
// general kernel (matvec_quant) does. Batches larger than BATCH_T are split into chunks along the
// launch's first dimension, the chunks of one block of weight rows in consecutive work-groups: they run
// together, and the later ones find the weights in L2. A launch serves up to three products of the same
// x (q/k/v, gate/up) as parts (BATCH_PARTS_ARGS, kernels_cl/common.cl), a block BATCH_TEAMS · BATCH_R
// weight rows of its part: one launch where three cost a launch's ramp and tail each.
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
void matvec_q4_batch(__global const uchar* wbase, ulong words_per_row, __global const uchar* sbase, __global const uchar* bbase,
                     uint scale_dtype, uint group_size, uint cols, __global const float* x, uint n_t, uint chunks,
                     BATCH_PARTS_ARGS) {
  const uint lid = get_local_id(0), lane = lid % 32u;
  const uint chunk = get_group_id(0) % chunks;
  const BatchBlock part = batch_block(get_group_id(0) / chunks, BATCH_PARTS_PASS);
  const uint rows = part.rows;
  const uint first = (part.block * BATCH_TEAMS + lid / 32u) * BATCH_R;
  const uint t0 = chunk * BATCH_T, nt = min((uint)BATCH_T, n_t - t0);
  const uint groups = cols / group_size, ssize = scale_dtype == DT_F32 ? 4u : 2u;
  __global const uint* w = (__global const uint*)(wbase + part.w_off) + (ulong)first * words_per_row;
  __global const uchar* s = sbase + part.s_off + (ulong)first * groups * ssize;
  __global const uchar* b = bbase + part.b_off + (ulong)first * groups * ssize;
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
  // Lane l takes words l, l + 32, l + 64, … of the row (8 columns each), so that a warp's loads of the
  // weights (128 bytes) and of an activation row (1 KB) are each one contiguous span. A lane taking
  // four consecutive words instead (one uint4, as the one-row kernels do) made every load of x touch 32
  // cache lines: the first form of this kernel spent its time on those wavefronts of L1, 85 µs for two
  // rows of a 14336 × 4096 weight against 17 µs for one (perf/NOTES.md, "Batched decode").
  const uint words = (uint)words_per_row;
#pragma unroll 4
  for (uint wi = lane; wi < words; wi += 32u) {
    const uint g = wi * 8u / group_size;
    // Every row's word, scale and bias requested before any is used: BATCH_R loads in flight.
    uint wd[BATCH_R];
    float sc[BATCH_R], bi[BATCH_R];
#pragma unroll
    for (uint k = 0; k < BATCH_R; ++k) {
      const bool live = first + k < rows;
      wd[k] = live ? w[(ulong)k * words_per_row + wi] : 0u;
      sc[k] = live ? load_value(s, scale_dtype, (ulong)k * groups + g) : 0.0f;
      bi[k] = live ? load_value(b, scale_dtype, (ulong)k * groups + g) : 0.0f;
    }
    // The word's eight weights, dequantized once for every activation row.
    float4 lo[BATCH_R], hi[BATCH_R];
#pragma unroll
    for (uint k = 0; k < BATCH_R; ++k) {
      lo[k] = fma(q4_lo(wd[k]), (float4)(sc[k]), (float4)(bi[k]));
      hi[k] = fma(q4_hi(wd[k]), (float4)(sc[k]), (float4)(bi[k]));
    }
#pragma unroll
    for (uint t = 0; t < BATCH_T; ++t) {
      const float8 xv = ((__global const float8*)xt[t])[wi];  // 32-byte aligned: cols % 8 == 0
#pragma unroll
      for (uint k = 0; k < BATCH_R; ++k) acc[k][t] += dot(lo[k], xv.lo) + dot(hi[k], xv.hi);
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
      const float add = part.biased ? load_value(part.bias, bias_dtype, part.row0 + r) : 0.0f;
#pragma unroll
      for (uint t = 0; t < BATCH_T; ++t)
        if (t < nt) part.out[(ulong)(t0 + t) * part.out_stride + part.row0 + r] = acc[k][t] + add;
    }
  }
}

#ifdef SLUICE_PTX_SHFL
// NVIDIA fast path for the same product: each activation row in its 15-bit form (kernels_cl/warp.cl,
// matvec_x_int15_rows), the codes multiplied by it with dp4a as the one-row kernel does
// (kernels_cl/matvec.cl, dp4a_step). The float kernel above issues about one multiply-add a weight
// and row plus the dequantization; here eight weights cost four dp4a a row, and an activation row's
// step is 72 bytes read lane-contiguously (the form's four byte planes) against 128. Lane l takes
// steps l, l + 32, … of 32 columns (one uint4 of each weight row), as matvec_q4_dp4a does.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void matvec_q4_batch_dp4a(__global const uchar* wbase, ulong words_per_row, __global const uchar* sbase, __global const uchar* bbase,
                          uint scale_dtype, uint group_size, uint cols, uint w_align, __global const uint4* xq,
                          __global const float2* xblocks, uint n_t, uint chunks, BATCH_PARTS_ARGS) {
  const uint lid = get_local_id(0), lane = lid % 32u;
  const uint chunk = get_group_id(0) % chunks;
  const BatchBlock part = batch_block(get_group_id(0) / chunks, BATCH_PARTS_PASS);
  const uint rows = part.rows;
  const uint first = (part.block * BATCH_TEAMS + lid / 32u) * BATCH_R;
  const uint t0 = chunk * BATCH_T, nt = min((uint)BATCH_T, n_t - t0);
  const uint groups = cols / group_size, ssize = scale_dtype == DT_F32 ? 4u : 2u, n_blocks = cols / 32u;
  __global const uint* w = (__global const uint*)(wbase + part.w_off) + (ulong)first * words_per_row;
  __global const uchar* s = sbase + part.s_off + (ulong)first * groups * ssize;
  __global const uchar* b = bbase + part.b_off + (ulong)first * groups * ssize;
  // Row t's form (four planes of n_blocks uint4) and block scales; rows of the chunk past the batch
  // read its last row, as in the float kernel.
  uint xo[BATCH_T];
#pragma unroll
  for (uint t = 0; t < BATCH_T; ++t) xo[t] = (t0 + min(t, nt - 1u)) * n_blocks;
  float acc[BATCH_R][BATCH_T];
#pragma unroll
  for (uint k = 0; k < BATCH_R; ++k)
#pragma unroll
    for (uint t = 0; t < BATCH_T; ++t) acc[k][t] = 0.0f;
  const uint steps = (uint)(words_per_row / 4u);
  for (uint i = lane; i < steps; i += 32u) {
    const uint g = i * 32u / group_size;
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
    for (uint t = 0; t < BATCH_T; ++t) {
      __global const uint4* xr = xq + (ulong)xo[t] * 4u;
      const uint4 h0 = xr[i], h1 = xr[n_blocks + i], l0 = xr[2u * n_blocks + i], l1 = xr[3u * n_blocks + i];
      const float2 blk = xblocks[xo[t] + i];
#pragma unroll
      for (uint k = 0; k < BATCH_R; ++k)
        acc[k][t] += sc[k] * blk.x * (float)dp4a_step(w4[k], h0, h1, l0, l1) + bi[k] * blk.y;
    }
  }
#pragma unroll
  for (uint k = 0; k < BATCH_R; ++k)
#pragma unroll
    for (uint t = 0; t < BATCH_T; ++t) acc[k][t] = warp_sum(acc[k][t]);
  if (lane == 0u) {
#pragma unroll
    for (uint k = 0; k < BATCH_R; ++k) {
      const uint r = first + k;
      if (r >= rows) break;
      const float add = part.biased ? load_value(part.bias, bias_dtype, part.row0 + r) : 0.0f;
#pragma unroll
      for (uint t = 0; t < BATCH_T; ++t)
        if (t < nt) part.out[(ulong)(t0 + t) * part.out_stride + part.row0 + r] = acc[k][t] + add;
    }
  }
}
#endif
