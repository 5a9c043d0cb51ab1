// Prefill's out[m, n] = x[m, k] · W[n, k]ᵀ on NVIDIA tensor cores (sm_80+), straight from an
// affine-quantized weight (4 or 8 bits, w = scale·q + bias per group of group_size columns), through
// inline PTX mma.sync.m16n8k16 (f16 inputs, f32 accumulation). Built only when the device accepts
// PTX; the portable path (dequantize to float32 + CLBlast SGEMM) is the reference and the fallback.
//
// Precision: x (float32) and the dequantized weight (scale·q + bias computed in float32) are each
// rounded to f16 (round-to-nearest-even) — x once per product by gemm_mma_pack_x, the weight when
// staged into local memory; products and sums are f32.
// Each product so carries a relative error ≤ ~2·2⁻¹¹, i.e. |out − exact| ≲ 2⁻¹⁰ · Σ|x||w| plus f32
// accumulation error. |x| above 65504 (f16's largest value) would become infinite.
//
// Tiling: a work-group of 8 warps computes an MMA_BM (m) × 128 (n) block of out; warp w owns the
// (MMA_BM / 2) × 32 sub-block at m (w % 2)·MMA_BM/2, n (w / 2)·32 as MMA_WMT × 4 mma tiles of 16 × 8
// (MMA_WMT·16 f32 accumulators a work-item). MMA_BM 128 reuses each staged x fragment more; MMA_BM 64
// gives twice the work-groups (more warps in flight on each compute unit when the grid is small).
// K advances MMA_BK columns a step. Each work-item reads its share of the next step from global memory
// into registers before the warps multiply the current one, then stores it (as f16) into local
// memory: MMA_BK 32 keeps two buffers of tiles, so one barrier a step suffices; MMA_BK 64 has one
// buffer and two barriers, but half the steps.
//
// Local layout of a tile (f16): row r is MMA_BK / 16 chunks of 16 columns. Within a chunk the columns
// are stored in the order 0 1 8 9 | 2 3 10 11 | 4 5 12 13 | 6 7 14 15, so the lane with
// threadID_in_group t finds its fragment pair (columns 2t, 2t+1 and 2t+8, 2t+9 — A's a0/a2, B's b0/b1)
// in one 8-byte word. Chunks are permuted per row (chunk ^ MMA_SWZ(r)) so the 4 rows a half-warp's
// fragment load touches fall in distinct banks.

#ifndef MMA_BK
#define MMA_BK 32
#endif
#ifndef MMA_BM
#define MMA_BM 128
#endif
#define MMA_BN 128
#define MMA_WG 256
#define MMA_WMT (MMA_BM / 32)       // 16-row mma tiles a warp covers in m
#define MMA_ROW_CHUNKS (MMA_BK / 16)  // 16-column chunks a tile row has
#define MMA_ROW_WORDS (MMA_BK / 2)    // 32-bit words (two halves) per tile row
#define MMA_XC (MMA_BM * MMA_ROW_CHUNKS / MMA_WG)  // x chunks a work-item stages per step
#define MMA_WC (MMA_BN * MMA_ROW_CHUNKS / MMA_WG)  // weight chunks a work-item stages per step
#if MMA_BK == 32
#define MMA_BUFS 2
#define MMA_SWZ(r) (((r) >> 1) & 1u)  // rows 64 bytes apart: rows r and r + 2 share banks
#elif MMA_BK == 64
#define MMA_BUFS 1
#define MMA_SWZ(r) ((r) & 3u)  // rows 128 bytes apart: each row starts at bank 0
#else
#error "MMA_BK is 32 or 64"
#endif
#if (MMA_BM != 64 && MMA_BM != 128) || MMA_XC < 1
#error "MMA_BM is 128, or 64 with MMA_BK 64"
#endif

// Two floats as one f16x2 word, `lo` in the low half (the lower column).
inline uint pack_half2(float lo, float hi) {
  uint r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Word offset in a tile of 16-column chunk `part` of row `row` (permuted as above).
inline uint tile_chunk_offset(uint row, uint part) { return row * MMA_ROW_WORDS + ((part ^ MMA_SWZ(row)) << 3); }

// Stores 16 consecutive columns (v[0..15], column order) as one tile chunk, in the fragment order.
inline uint4 chunk_words_lo(const float* v) {
  return (uint4)(pack_half2(v[0], v[1]), pack_half2(v[8], v[9]), pack_half2(v[2], v[3]), pack_half2(v[10], v[11]));
}
inline uint4 chunk_words_hi(const float* v) {
  return (uint4)(pack_half2(v[4], v[5]), pack_half2(v[12], v[13]), pack_half2(v[6], v[7]), pack_half2(v[14], v[15]));
}
inline void store_chunk(__local uint* tile, uint row, uint part, const float* v) {
  __local uint4* p = (__local uint4*)(tile + tile_chunk_offset(row, part));
  p[0] = chunk_words_lo(v);
  p[1] = chunk_words_hi(v);
}

inline float mma_scale(__global const uchar* base, uint dtype, ulong i) {
  if (dtype == DT_F32) return ((__global const float*)base)[i];
  if (dtype == DT_F16) return vload_half(i, (__global const half*)base);
  return bf16_to_float(((__global const ushort*)base)[i]);
}

// A work-item's staged chunks (16 columns of one row) between the global read and the local store:
// x already as f16 pairs in the tile's chunk order (gemm_mma_pack_x), the weight as codes.
typedef struct {
  uint4 v[2];
} XChunk;
typedef struct {
  uint4 codes;  // 4-bit: .xy hold the 16 codes; 8-bit: all four words
  float scale, bias;
} WChunk;

__attribute__((always_inline)) inline void load_x_chunk(XChunk* c, uint row, uint col, uint M, uint K,
                                                        __global const uint* xh) {
  if (row < M) {
    __global const uint4* p = (__global const uint4*)(xh + ((ulong)row * K + col) / 2);
    c->v[0] = p[0];
    c->v[1] = p[1];
  } else {
    c->v[0] = c->v[1] = (uint4)(0u);
  }
}

__attribute__((always_inline)) inline void load_w_chunk(WChunk* c, uint row, uint col, uint N, __global const uint* words, ulong words_per_row, uint bits,
                         __global const uchar* scales, __global const uchar* biases, uint scale_dtype, uint groups_per_row,
                         uint group_shift) {
  if (row < N) {
    __global const uint* w = words + (ulong)row * words_per_row + col * bits / 32;
    c->codes = bits == 4 ? (uint4)(vload2(0, w), 0u, 0u) : vload4(0, w);
    const ulong g = (ulong)row * groups_per_row + (col >> group_shift);
    c->scale = mma_scale(scales, scale_dtype, g);
    c->bias = mma_scale(biases, scale_dtype, g);
  } else {
    c->codes = (uint4)(0u);
    c->scale = c->bias = 0.0f;  // rows past N multiply as zeros
  }
}

__attribute__((always_inline)) inline void store_x_chunk(const XChunk* c, __local uint* tile, uint row, uint chunk) {
  __local uint4* p = (__local uint4*)(tile + tile_chunk_offset(row, chunk));
  p[0] = c->v[0];
  p[1] = c->v[1];
}

// q (< 2²³) as a float without an integer conversion (a quarter-rate instruction on NVIDIA): the
// bits of 2²³ + q, minus 2²³ — exact.
inline float code_to_float(uint q) { return as_float(0x4B000000u | q) - 8388608.0f; }

__attribute__((always_inline)) inline void store_w_chunk(const WChunk* c, __local uint* tile, uint row, uint chunk, uint bits) {
  float v[16];
  if (bits == 4) {
#pragma unroll
    for (uint i = 0; i < 16; ++i) {
      const uint q = ((i < 8 ? c->codes.x : c->codes.y) >> (4 * (i & 7))) & 15u;
      v[i] = fma(c->scale, code_to_float(q), c->bias);
    }
  } else {
    const uint w[4] = {c->codes.x, c->codes.y, c->codes.z, c->codes.w};
#pragma unroll
    for (uint i = 0; i < 16; ++i) v[i] = fma(c->scale, code_to_float((w[i >> 2] >> (8 * (i & 3))) & 255u), c->bias);
  }
  store_chunk(tile, row, chunk, v);
}

// One step's share of work-item tid: chunk q = tid + 256·c of a tile is row q / MMA_ROW_CHUNKS, chunk
// q % MMA_ROW_CHUNKS (neighbouring work-items read neighbouring 64-byte runs of a row).
__attribute__((always_inline)) inline void load_step(XChunk* xs, WChunk* ws, uint k0, uint tid, uint m0, uint n0, uint M, uint N, uint K,
                      __global const uint* xh, __global const uint* words, ulong words_per_row, uint bits,
                      __global const uchar* scales, __global const uchar* biases, uint scale_dtype, uint groups_per_row,
                      uint group_shift) {
#pragma unroll
  for (uint c = 0; c < MMA_XC; ++c) {
    const uint q = tid + MMA_WG * c;
    load_x_chunk(&xs[c], m0 + q / MMA_ROW_CHUNKS, k0 + (q % MMA_ROW_CHUNKS) * 16, M, K, xh);
  }
#pragma unroll
  for (uint c = 0; c < MMA_WC; ++c) {
    const uint q = tid + MMA_WG * c;
    load_w_chunk(&ws[c], n0 + q / MMA_ROW_CHUNKS, k0 + (q % MMA_ROW_CHUNKS) * 16, N, words, words_per_row, bits, scales,
                 biases, scale_dtype, groups_per_row, group_shift);
  }
}

__attribute__((always_inline)) inline void store_step(const XChunk* xs, const WChunk* ws, __local uint* xt, __local uint* wt, uint tid, uint bits) {
#pragma unroll
  for (uint c = 0; c < MMA_XC; ++c) {
    const uint q = tid + MMA_WG * c;
    store_x_chunk(&xs[c], xt, q / MMA_ROW_CHUNKS, q % MMA_ROW_CHUNKS);
  }
#pragma unroll
  for (uint c = 0; c < MMA_WC; ++c) {
    const uint q = tid + MMA_WG * c;
    store_w_chunk(&ws[c], wt, q / MMA_ROW_CHUNKS, q % MMA_ROW_CHUNKS, bits);
  }
}

inline void mma_16816(float* c, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
  float d0, d1, d2, d3;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
      : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
  c[0] = d0;
  c[1] = d1;
  c[2] = d2;
  c[3] = d3;
}

// x (M × K float32) as f16 pairs, each 16-column chunk in the tiles' column order
// (0 1 8 9 | 2 3 10 11 | ...), so the GEMM stages it with plain copies: converted once per product
// rather than once per work-group column. K is a multiple of 16.
__kernel void gemm_mma_pack_x(uint M, uint K, __global const float* x, __global uint* xh) {
  const uint chunk = get_global_id(0), row = get_global_id(1);
  if (chunk >= K / 16 || row >= M) return;
  __global const float4* p = (__global const float4*)(x + (ulong)row * K + chunk * 16);
  float v[16];
#pragma unroll
  for (uint i = 0; i < 4; ++i) {
    const float4 f = p[i];
    v[4 * i] = f.x;
    v[4 * i + 1] = f.y;
    v[4 * i + 2] = f.z;
    v[4 * i + 3] = f.w;
  }
  __global uint4* o = (__global uint4*)(xh + ((ulong)row * K + chunk * 16) / 2);
  o[0] = chunk_words_lo(v);
  o[1] = chunk_words_hi(v);
}

// M activation rows (xh: gemm_mma_pack_x's), N weight rows (this segment's), K columns (a multiple of
// MMA_BK and of the group size, a power of two ≥ 16: 1 << group_shift). Writes out[m · ldc + col0 + n].
__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1)))
void gemm_mma_quant(uint M, uint N, uint K, __global const uint* xh, __global const uint* words, ulong words_off,
                    uint bits, __global const uchar* scales, ulong scales_off, __global const uchar* biases,
                    ulong biases_off, uint scale_dtype, uint group_shift, __global float* out, uint ldc, uint col0) {
  __local uint4 x_tiles[MMA_BUFS][MMA_BM * MMA_ROW_WORDS / 4];
  __local uint4 w_tiles[MMA_BUFS][MMA_BN * MMA_ROW_WORDS / 4];
  words += words_off;
  scales += scales_off;
  biases += biases_off;
  const ulong words_per_row = (ulong)K * bits / 32;
  const uint groups_per_row = K >> group_shift;

  const uint tid = get_local_id(0), lane = tid & 31u, warp = tid >> 5;
  const uint m0 = get_group_id(0) * MMA_BM, n0 = get_group_id(1) * MMA_BN;
  // Compute: this warp's sub-block and this lane's place in the fragments.
  const uint wm = (warp & 1u) * (MMA_BM / 2), wn = (warp >> 1) * 32;
  const uint g = lane >> 2, t = lane & 3u;

  float acc[MMA_WMT][4][4];
#pragma unroll
  for (uint i = 0; i < MMA_WMT; ++i)
#pragma unroll
    for (uint j = 0; j < 4; ++j)
#pragma unroll
      for (uint r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

  XChunk xs[MMA_XC];
  WChunk ws[MMA_WC];
  load_step(xs, ws, 0, tid, m0, n0, M, N, K, xh, words, words_per_row, bits, scales, biases, scale_dtype, groups_per_row,
            group_shift);
  store_step(xs, ws, (__local uint*)x_tiles[0], (__local uint*)w_tiles[0], tid, bits);
  barrier(CLK_LOCAL_MEM_FENCE);

  const uint steps = K / MMA_BK;
  for (uint step = 0; step < steps; ++step) {
    const uint buf = MMA_BUFS == 2 ? (step & 1u) : 0u;
    const bool more = step + 1 < steps;
    if (more)
      load_step(xs, ws, (step + 1) * MMA_BK, tid, m0, n0, M, N, K, xh, words, words_per_row, bits, scales, biases, scale_dtype,
                groups_per_row, group_shift);
    __local const uint* xt = (__local const uint*)x_tiles[buf];
    __local const uint* wt = (__local const uint*)w_tiles[buf];
#pragma unroll
    for (uint kh = 0; kh < MMA_ROW_CHUNKS; ++kh) {  // the 16-column chunks of the step
      uint2 a_lo[MMA_WMT], a_hi[MMA_WMT], b[4];
#pragma unroll
      for (uint i = 0; i < MMA_WMT; ++i) {
        const uint r = wm + i * 16 + g;
        a_lo[i] = *(__local const uint2*)(xt + tile_chunk_offset(r, kh) + 2 * t);      // row g: a0, a2
        a_hi[i] = *(__local const uint2*)(xt + tile_chunk_offset(r + 8, kh) + 2 * t);  // row g + 8: a1, a3
      }
#pragma unroll
      for (uint j = 0; j < 4; ++j) b[j] = *(__local const uint2*)(wt + tile_chunk_offset(wn + j * 8 + g, kh) + 2 * t);
#pragma unroll
      for (uint i = 0; i < MMA_WMT; ++i)
#pragma unroll
        for (uint j = 0; j < 4; ++j) mma_16816(acc[i][j], a_lo[i].x, a_hi[i].x, a_lo[i].y, a_hi[i].y, b[j].x, b[j].y);
    }
    if (MMA_BUFS == 1) barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done reading the one buffer
    if (more) {
      const uint next = MMA_BUFS == 2 ? (buf ^ 1u) : 0u;
      store_step(xs, ws, (__local uint*)x_tiles[next], (__local uint*)w_tiles[next], tid, bits);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  // c0, c1: row g, columns 2t, 2t+1 of the 16 × 8 tile; c2, c3: row g + 8.
#pragma unroll
  for (uint i = 0; i < MMA_WMT; ++i) {
#pragma unroll
    for (uint j = 0; j < 4; ++j) {
      const uint n = n0 + wn + j * 8 + 2 * t;
#pragma unroll
      for (uint h = 0; h < 2; ++h) {
        const uint m = m0 + wm + i * 16 + g + h * 8;
        if (m >= M) continue;
        __global float* o = out + (ulong)m * ldc + col0 + n;
        if (n < N) o[0] = acc[i][j][2 * h];
        if (n + 1 < N) o[1] = acc[i][j][2 * h + 1];
      }
    }
  }
}
