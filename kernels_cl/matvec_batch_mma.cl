// Decode products for a batch of sequences on NVIDIA tensor cores (sm_80+, inline PTX mma.sync, built
// with kernels_cl/gemm_mma.cl for mma_16816): out[t, r] = Σ_c x[t, c] · w[r, c] for up to 8·BM_NT
// activation rows a launch chunk, 4-bit affine weights (w = scale·q + bias per group).
//
// Why: the dp4a batch kernel (matvec_batch.cl) spends instructions per weight and per activation row —
// at 32 rows a product costs ~9× one row's (perf/results/batching_gpu.md) — while decode should cost
// what reading the weights costs. Here the weight rows are the MMA's m (16 a tile) and the activation
// rows its n (8 a tile): one m16n8k16 multiplies 256 weights by 8 rows, so the per-row work is the
// tensor core's and a weight costs its dequantization (about one instruction) whatever the batch.
//
// Exact codes: A holds 1024 + q (q the 4-bit code: the halves 0x6400 | q, made from a word with one
// mask — no conversion, no scale in f16), B the activation rows rounded to f16. A step of BM_GSTEP
// columns (inside one group) is summed by the MMAs into a fresh tile D = Σ (1024 + q)·x̃, and then
//   acc += scale · D + (bias − 1024 · scale) · X,   X = Σ x̃ over the step's columns
// in float32 (X from the same f16 values, made by matvec_batch_mma_pack_x). So the only rounding
// beyond float32 sums is x's to f16 (relative 2⁻¹¹ a value): |out − exact| ≲ 2⁻¹¹ · Σ|w||x| plus the
// float32 sums' error (the 1024 offset adds ~2⁻¹⁴ · |scale| · Σ|x| a step).
//
// Columns in an MMA: the order of k inside a product does not matter as long as A and B agree, so
// lane (g, t) — g = lane / 4 picks weight rows g and g + 8 of the m tile and activation row g of the
// n tile, t = lane % 4 — takes whole words of its rows (8 columns each) and feeds them to two MMAs:
// the mask 0x000F000F of word >> s gives the halves of columns s/4 and s/4 + 4, so the first MMA takes
// columns {0, 4, 1, 5} of the word (shifts 0 and 4), the second {2, 6, 3, 7} (shifts 8 and 12). The
// pack kernel stores each 8 columns of x in that order (0 4 1 5 2 6 3 7), so one uint4 of x is both
// MMAs' B fragments. A quad's four lanes take consecutive words: a warp reads 16 rows × 8·BM_WPL·4
// contiguous bytes a step.
//
// Work: a work-group of BM_WARPS warps, BM_MW of them side by side in m (16·BM_MT weight rows each) and
// BM_WARPS / BM_MW in k: a k-warp takes steps k, k + BM_KW, … of the columns (a split of K: enough warps
// for the bytes in flight even when a product has 4096 rows), and their sums meet in local memory.
// The m-warps of a work-group read the same activation steps at about the same time, so x comes from
// L2 once a work-group and then from L1 (with one weight tile a work-group, x's bytes read from L2 are
// 2·n_rows / 8 times the weights'). Measured on the H200 this was not what held 32 rows at twice the
// 8-row time (2 / 4 / 8 m-warps: 78 / 76 / 72 µs against 66 with one; perf/NOTES.md); two stay the
// default for weights tall enough. Batches wider than 8·BM_NT rows are split into chunks along the
// launch, the chunks of a row block in consecutive work-groups.

#ifndef BM_NT
#define BM_NT 4  // n tiles (8 activation rows each) a chunk
#endif
#ifndef BM_MT
#define BM_MT 1  // m tiles (16 weight rows each) a warp
#endif
#ifndef BM_WARPS
#define BM_WARPS 8
#endif
#ifndef BM_GSTEP
#define BM_GSTEP 64  // columns a step: 32 or 64, a divisor of the group size
#endif
#ifndef BM_UNROLL
#define BM_UNROLL 2  // steps a pass of a warp (their loads in flight together)
#endif
#ifndef BM_ILV
#define BM_ILV 0  // 1: a step's MMAs interleaved over the tiles (independent accumulators back to back)
#endif
#ifndef BM_MW
#define BM_MW 1  // warps side by side in m (a divisor of BM_WARPS)
#endif
#define BM_KW (BM_WARPS / BM_MW)  // warps side by side in k
#define BM_WPL (BM_GSTEP / 32)  // words of a row a lane takes a step (a quad: BM_GSTEP / 8)
#define BM_WG (BM_WARPS * 32)
#define BM_TILE_VALUES (BM_MT * BM_NT * 4)  // accumulators a lane

// Columns (s/4, s/4 + 4) of an 8-column word as f16 1024 + q (low half first).
inline uint q4_code_pair(uint w, uint s) { return ((w >> s) & 0x000F000Fu) | 0x64006400u; }

// x (n_rows × cols float32) as f16 in the MMA order above, and X: each step's sum of those f16 values
// (float32). A work-item an 8-column word of a row, 64 a work-group; cols a multiple of BM_GSTEP.
#define PACK_WG 64
__kernel __attribute__((reqd_work_group_size(PACK_WG, 1, 1)))
void matvec_batch_mma_pack_x(__global const float* x, uint cols, uint n_rows, __global half* xh, __global float* xsum) {
  __local float word_sums[PACK_WG];
  const uint word = get_global_id(0), row = get_global_id(1), lid = get_local_id(0);
  const bool live = word < cols / 8u && row < n_rows;
  float sum = 0.0f;
  if (live) {
    const ulong at = (ulong)row * cols + 8u * word;
    vstore_half8_rte(vload8(0, x + at).s04152637, 0, xh + at);
    const float8 rounded = vload_half8(0, xh + at);  // the values the MMAs multiply
    sum = ((rounded.s0 + rounded.s1) + (rounded.s2 + rounded.s3)) + ((rounded.s4 + rounded.s5) + (rounded.s6 + rounded.s7));
  }
  word_sums[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  // A step's words are consecutive work-items of one group (PACK_WG is a multiple of BM_GSTEP / 8).
  if (live && word % (BM_GSTEP / 8u) == 0u) {
    float step_sum = 0.0f;
    for (uint i = 0; i < BM_GSTEP / 8u; ++i) step_sum += word_sums[lid + i];
    xsum[(ulong)row * (cols / BM_GSTEP) + word / (BM_GSTEP / 8u)] = step_sum;
  }
}

// Up to three products of the same x in one launch (q/k/v, gate/up), as parts (BATCH_PARTS_ARGS,
// kernels_cl/common.cl): a block is 16·BM_MT·BM_MW weight rows of its part.
__kernel __attribute__((reqd_work_group_size(BM_WG, 1, 1)))
void matvec_q4_batch_mma(__global const uchar* wbase, uint w_align, __global const uchar* sbase, __global const uchar* bbase,
                         uint scale_dtype, uint group_size, uint cols, __global const uint4* xh, __global const float* xsum,
                         uint n_t, uint chunks, BATCH_PARTS_ARGS) {
  __local float red[BM_WARPS][BM_TILE_VALUES][32];
  const uint lid = get_local_id(0), lane = lid & 31u, warp = lid >> 5, mw = warp % BM_MW, kw = warp / BM_MW;
  const uint g = lane >> 2, t = lane & 3u;
  const uint chunk = get_group_id(0) % chunks;
  const BatchBlock part = batch_block(get_group_id(0) / chunks, BATCH_PARTS_PASS);
  const uint rows = part.rows;
  const uint group_first = part.block * (16u * BM_MT * BM_MW);  // the work-group's first weight row of its part
  const uint first = group_first + mw * (16u * BM_MT);                       // this warp's
  const uint t0 = chunk * (8u * BM_NT), nt_rows = min(8u * BM_NT, n_t - t0);
  const uint words_per_row = cols / 8u, groups = cols / group_size, steps = cols / BM_GSTEP;
  const uint ssize = scale_dtype == DT_F32 ? 4u : 2u;
  __global const uint* w = (__global const uint*)(wbase + part.w_off);
  __global const uchar* s = sbase + part.s_off;
  __global const uchar* b = bbase + part.b_off;

  // This lane's weight rows (g and g + 8 of each m tile; rows past the segment read row 0 with scale
  // and bias 0, which multiply as zeros) and activation rows (past the batch: its last row, unwritten).
  uint wrow[BM_MT][2];
  bool live[BM_MT][2];
#pragma unroll
  for (uint m = 0; m < BM_MT; ++m)
#pragma unroll
    for (uint h = 0; h < 2; ++h) {
      const uint r = first + 16u * m + g + 8u * h;
      live[m][h] = r < rows;
      wrow[m][h] = live[m][h] ? r : 0u;
    }
  uint xrow[BM_NT], srow[BM_NT][2];
#pragma unroll
  for (uint n = 0; n < BM_NT; ++n) {
    xrow[n] = t0 + min(8u * n + g, nt_rows - 1u);
    srow[n][0] = t0 + min(8u * n + 2u * t, nt_rows - 1u);
    srow[n][1] = t0 + min(8u * n + 2u * t + 1u, nt_rows - 1u);
  }

  float acc[BM_MT][BM_NT][4];
#pragma unroll
  for (uint m = 0; m < BM_MT; ++m)
#pragma unroll
    for (uint n = 0; n < BM_NT; ++n)
#pragma unroll
      for (uint c = 0; c < 4; ++c) acc[m][n][c] = 0.0f;

  // BM_UNROLL steps a pass: the weights' loads of the pass (the DRAM stream) issued before any is used;
  // x, hot in L1 / L2, is loaded an n tile at a time where it is used. (Loading every n tile's x with
  // the weights held 16 registers a tile and step: at 16 and 32 rows the lost occupancy cost more than
  // the early loads gained — 47 against 37 µs a 14336 × 4096 product of 16 rows, perf/NOTES.md.)
  for (uint pass = kw; pass < steps; pass += BM_KW * BM_UNROLL) {
    uint wd[BM_UNROLL][BM_MT][2][BM_WPL];
    float sc[BM_UNROLL][BM_MT][2], bi[BM_UNROLL][BM_MT][2];
#pragma unroll
    for (uint u = 0; u < BM_UNROLL; ++u) {
      // A step past the end (warp-uniform) reads the pass's first step again and is not summed.
      const uint step = pass + u * BM_KW < steps ? pass + u * BM_KW : pass;
      const uint word0 = step * (BM_GSTEP / 8u) + t * BM_WPL;  // this lane's first word of the step
      const uint grp = step * BM_GSTEP / group_size;
#pragma unroll
      for (uint m = 0; m < BM_MT; ++m)
#pragma unroll
        for (uint h = 0; h < 2; ++h) {
          __global const uint* wr = w + (ulong)wrow[m][h] * words_per_row + word0;
#if BM_WPL == 2
          const uint2 pair = w_align >= 8u ? *(__global const uint2*)wr : vload2(0, wr);
          wd[u][m][h][0] = pair.x;
          wd[u][m][h][1] = pair.y;
#else
          wd[u][m][h][0] = wr[0];
#endif
          const ulong gi = (ulong)wrow[m][h] * groups + grp;
          sc[u][m][h] = live[m][h] ? load_value(s, scale_dtype, gi) : 0.0f;
          bi[u][m][h] = live[m][h] ? load_value(b, scale_dtype, gi) : 0.0f;
        }
    }
#pragma unroll
    for (uint u = 0; u < BM_UNROLL; ++u) {
      const uint step = pass + u * BM_KW;
      if (step >= steps) break;
      const uint word0 = step * (BM_GSTEP / 8u) + t * BM_WPL;
      // The step's A fragments (1024 + codes), made once for every n tile.
      uint a[BM_MT][BM_WPL][8];
      float off[BM_MT][2];
#pragma unroll
      for (uint m = 0; m < BM_MT; ++m) {
#pragma unroll
        for (uint i = 0; i < BM_WPL; ++i) {
          const uint lo = wd[u][m][0][i], hi = wd[u][m][1][i];
#pragma unroll
          for (uint q = 0; q < 4; ++q) {
            a[m][i][2 * q] = q4_code_pair(lo, 4 * q);
            a[m][i][2 * q + 1] = q4_code_pair(hi, 4 * q);
          }
        }
        off[m][0] = fma(-1024.0f, sc[u][m][0], bi[u][m][0]);
        off[m][1] = fma(-1024.0f, sc[u][m][1], bi[u][m][1]);
      }
#if BM_ILV
      // Every n tile's x first, then the MMAs with independent accumulators back to back — (m, n)
      // tiles and the word's two halves each their own — so that no MMA waits on the one before it
      // (`asm volatile` issues them in program order): the straight form below chains a tile's four.
      uint4 xv[BM_NT][BM_WPL];
      float xs[BM_NT][2];
#pragma unroll
      for (uint n = 0; n < BM_NT; ++n) {
#pragma unroll
        for (uint i = 0; i < BM_WPL; ++i) xv[n][i] = xh[((ulong)xrow[n] * cols) / 8u + word0 + i];
        xs[n][0] = xsum[(ulong)srow[n][0] * steps + step];
        xs[n][1] = xsum[(ulong)srow[n][1] * steps + step];
      }
      float d[BM_MT][BM_NT][2][4];
#pragma unroll
      for (uint m = 0; m < BM_MT; ++m)
#pragma unroll
        for (uint n = 0; n < BM_NT; ++n)
#pragma unroll
          for (uint h = 0; h < 2; ++h)
#pragma unroll
            for (uint c = 0; c < 4; ++c) d[m][n][h][c] = 0.0f;
#pragma unroll
      for (uint i = 0; i < BM_WPL; ++i)
#pragma unroll
        for (uint h = 0; h < 2; ++h)
#pragma unroll
          for (uint m = 0; m < BM_MT; ++m)
#pragma unroll
            for (uint n = 0; n < BM_NT; ++n)
              mma_16816(d[m][n][h], a[m][i][4 * h], a[m][i][4 * h + 1], a[m][i][4 * h + 2], a[m][i][4 * h + 3],
                        h ? xv[n][i].z : xv[n][i].x, h ? xv[n][i].w : xv[n][i].y);
#pragma unroll
      for (uint m = 0; m < BM_MT; ++m)
#pragma unroll
        for (uint n = 0; n < BM_NT; ++n) {
          acc[m][n][0] += fma(sc[u][m][0], d[m][n][0][0] + d[m][n][1][0], off[m][0] * xs[n][0]);
          acc[m][n][1] += fma(sc[u][m][0], d[m][n][0][1] + d[m][n][1][1], off[m][0] * xs[n][1]);
          acc[m][n][2] += fma(sc[u][m][1], d[m][n][0][2] + d[m][n][1][2], off[m][1] * xs[n][0]);
          acc[m][n][3] += fma(sc[u][m][1], d[m][n][0][3] + d[m][n][1][3], off[m][1] * xs[n][1]);
        }
#else
#pragma unroll
      for (uint n = 0; n < BM_NT; ++n) {
        uint4 xv[BM_WPL];
#pragma unroll
        for (uint i = 0; i < BM_WPL; ++i) xv[i] = xh[((ulong)xrow[n] * cols) / 8u + word0 + i];
        const float xs0 = xsum[(ulong)srow[n][0] * steps + step], xs1 = xsum[(ulong)srow[n][1] * steps + step];
#pragma unroll
        for (uint m = 0; m < BM_MT; ++m) {
          float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (uint i = 0; i < BM_WPL; ++i) {
            // Columns {0, 4, 1, 5} of the word (shifts 0 and 4), then {2, 6, 3, 7} (shifts 8 and 12).
            mma_16816(d, a[m][i][0], a[m][i][1], a[m][i][2], a[m][i][3], xv[i].x, xv[i].y);
            mma_16816(d, a[m][i][4], a[m][i][5], a[m][i][6], a[m][i][7], xv[i].z, xv[i].w);
          }
          // d: (row g, rows 2t and 2t + 1 of the n tile), then (row g + 8, the same).
          acc[m][n][0] += fma(sc[u][m][0], d[0], off[m][0] * xs0);
          acc[m][n][1] += fma(sc[u][m][0], d[1], off[m][0] * xs1);
          acc[m][n][2] += fma(sc[u][m][1], d[2], off[m][1] * xs0);
          acc[m][n][3] += fma(sc[u][m][1], d[3], off[m][1] * xs1);
        }
      }
#endif
    }
  }

  // The k-warps' sums meet; value v of an m-warp is accumulator v / 32 of lane v % 32.
#pragma unroll
  for (uint m = 0; m < BM_MT; ++m)
#pragma unroll
    for (uint n = 0; n < BM_NT; ++n)
#pragma unroll
      for (uint c = 0; c < 4; ++c) red[warp][(m * BM_NT + n) * 4 + c][lane] = acc[m][n][c];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint v = lid; v < BM_MW * BM_TILE_VALUES * 32u; v += BM_WG) {
    const uint owner = v / (BM_TILE_VALUES * 32u), e = v / 32u % BM_TILE_VALUES, l = v % 32u;
    const uint c = e % 4u, n = e / 4u % BM_NT, m = e / 4u / BM_NT;
    float sum = 0.0f;
#pragma unroll
    for (uint k = 0; k < BM_KW; ++k) sum += red[k * BM_MW + owner][e][l];
    const uint r = group_first + (owner * BM_MT + m) * 16u + (l >> 2) + 8u * (c >> 1);  // the lane's weight row…
    const uint tt = 8u * n + 2u * (l & 3u) + (c & 1u);                                   // …and activation row in the chunk
    if (r < rows && tt < nt_rows) {
      const float add = part.biased ? load_value(part.bias, bias_dtype, part.row0 + r) : 0.0f;
      part.out[(ulong)(t0 + tt) * part.out_stride + part.row0 + r] = sum + add;
    }
  }
}
