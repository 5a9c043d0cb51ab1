// Prefill's out[m, n] = x[m, k] · W[n, k]ᵀ on NVIDIA tensor cores (sm_80+), straight from an
// affine-quantized weight (4 or 8 bits, w = scale·q + bias per group of group_size columns), through
// inline PTX mma.sync.m16n8k16 (f16 inputs, f32 accumulation). Built only when the device accepts
// PTX; the portable path (dequantize to float32 + CLBlast SGEMM) is the reference and the fallback.
//
// Precision: x (float32) and the dequantized weight (scale·q + bias computed in float32) are each
// rounded to f16 (round-to-nearest-even) when staged into local memory; products and sums are f32.
// Each product so carries a relative error ≤ ~2·2⁻¹¹, i.e. |out − exact| ≲ 2⁻¹⁰ · Σ|x||w| plus f32
// accumulation error. |x| above 65504 (f16's largest value) would become infinite.
//
// Tiling: a work-group of 8 warps computes a 128 (m) × 128 (n) block of out; warp w owns the
// 64 × 32 sub-block at m (w % 2)·64, n (w / 2)·32 as 4 × 4 mma tiles of 16 × 8 (64 f32 accumulators a
// work-item). K advances 32 columns at a time through two local-memory buffers (x and W, 8 KiB each):
// while the warps multiply one, each work-item holds its share of the next in registers and stores it
// into the other, so one barrier a step suffices.
//
// Local layout of a 128 × 32 tile (f16): row r is 64 bytes, two 16-column halves. Within a half the
// columns are stored in the order 0 1 8 9 | 2 3 10 11 | 4 5 12 13 | 6 7 14 15, so the lane with
// threadID_in_group t finds its fragment pair (columns 2t, 2t+1 and 2t+8, 2t+9 — A's a0/a2, B's b0/b1)
// in one 8-byte word. The halves of rows with bit 1 set are swapped, so the 8 rows one fragment load
// touches (4 of them per half-warp phase) fall in distinct banks.

#define MMA_BM 128
#define MMA_BN 128
#define MMA_BK 32
#define MMA_WG 256
#define MMA_ROW_WORDS (MMA_BK / 2)  // 32-bit words (two halves) per tile row

// Two floats as one f16x2 word, `lo` in the low half (the lower column).
inline uint pack_half2(float lo, float hi) {
  uint r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Word offset in a tile of the 16-column half `half` of row `row` (swizzled as above).
inline uint tile_half_offset(uint row, uint part) { return row * MMA_ROW_WORDS + ((part ^ ((row >> 1) & 1u)) << 3); }

// Stores 16 consecutive columns (v[0..15], column order) of one tile row half in the fragment order.
inline void store_half_row(__local uint* tile, uint row, uint part, const float* v) {
  __local uint4* p = (__local uint4*)(tile + tile_half_offset(row, part));
  p[0] = (uint4)(pack_half2(v[0], v[1]), pack_half2(v[8], v[9]), pack_half2(v[2], v[3]), pack_half2(v[10], v[11]));
  p[1] = (uint4)(pack_half2(v[4], v[5]), pack_half2(v[12], v[13]), pack_half2(v[6], v[7]), pack_half2(v[14], v[15]));
}

inline float mma_scale(__global const uchar* base, uint dtype, ulong i) {
  if (dtype == DT_F32) return ((__global const float*)base)[i];
  if (dtype == DT_F16) return vload_half(i, (__global const half*)base);
  return bf16_to_float(((__global const ushort*)base)[i]);
}

// One k-step's share of a work-item, held in registers between the global read and the local store:
// 16 columns of one x row and 16 columns of one weight row (codes, scale, bias).
typedef struct {
  float4 x[4];
  uint4 codes;  // 4-bit: .xy hold the 16 codes; 8-bit: all four words
  float scale, bias;
} StageRegs;

inline void stage_load(StageRegs* s, uint k0, uint lrow, uint part, uint m0, uint n0, uint M, uint N, uint K,
                       __global const float* x, __global const uint* words, ulong words_per_row, uint bits,
                       __global const uchar* scales, __global const uchar* biases, uint scale_dtype, uint groups_per_row,
                       uint group_size) {
  const uint col = k0 + part * 16;
  if (m0 + lrow < M) {
    __global const float4* p = (__global const float4*)(x + (ulong)(m0 + lrow) * K + col);
    s->x[0] = p[0];
    s->x[1] = p[1];
    s->x[2] = p[2];
    s->x[3] = p[3];
  } else {
    s->x[0] = s->x[1] = s->x[2] = s->x[3] = (float4)(0.0f);
  }
  if (n0 + lrow < N) {
    const ulong row = n0 + lrow;
    __global const uint* w = words + row * words_per_row + col * bits / 32;
    s->codes = bits == 4 ? (uint4)(vload2(0, w), 0u, 0u) : vload4(0, w);
    const ulong g = row * groups_per_row + col / group_size;
    s->scale = mma_scale(scales, scale_dtype, g);
    s->bias = mma_scale(biases, scale_dtype, g);
  } else {
    s->codes = (uint4)(0u);
    s->scale = s->bias = 0.0f;  // rows past N multiply as zeros
  }
}

inline void stage_store(const StageRegs* s, __local uint* xt, __local uint* wt, uint lrow, uint part, uint bits) {
  float v[16];
  for (uint i = 0; i < 4; ++i) {
    v[4 * i] = s->x[i].x;
    v[4 * i + 1] = s->x[i].y;
    v[4 * i + 2] = s->x[i].z;
    v[4 * i + 3] = s->x[i].w;
  }
  store_half_row(xt, lrow, part, v);
  if (bits == 4) {
    for (uint i = 0; i < 16; ++i) {
      const uint q = ((i < 8 ? s->codes.x : s->codes.y) >> (4 * (i & 7))) & 15u;
      v[i] = fma(s->scale, (float)q, s->bias);
    }
  } else {
    const uint w[4] = {s->codes.x, s->codes.y, s->codes.z, s->codes.w};
    for (uint i = 0; i < 16; ++i) v[i] = fma(s->scale, (float)((w[i >> 2] >> (8 * (i & 3))) & 255u), s->bias);
  }
  store_half_row(wt, lrow, part, v);
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

// M activation rows, N weight rows (this segment's), K columns (a multiple of 32 and of group_size,
// group_size a multiple of 32). Writes out[m · ldc + col0 + n].
__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1)))
void gemm_mma_quant(uint M, uint N, uint K, __global const float* x, __global const uint* words, ulong words_off,
                    uint bits, __global const uchar* scales, ulong scales_off, __global const uchar* biases,
                    ulong biases_off, uint scale_dtype, uint group_size, __global float* out, uint ldc, uint col0) {
  __local uint4 x_tiles[2][MMA_BM * MMA_ROW_WORDS / 4];
  __local uint4 w_tiles[2][MMA_BN * MMA_ROW_WORDS / 4];
  words += words_off;
  scales += scales_off;
  biases += biases_off;
  const ulong words_per_row = (ulong)K * bits / 32;
  const uint groups_per_row = K / group_size;

  const uint tid = get_local_id(0), lane = tid & 31u, warp = tid >> 5;
  const uint m0 = get_group_id(0) * MMA_BM, n0 = get_group_id(1) * MMA_BN;
  // Staging: work-item tid moves columns [16·part, 16·part + 16) of tile row lrow, for x and for W.
  const uint lrow = tid >> 1, part = tid & 1u;
  // Compute: this warp's sub-block and this lane's place in the fragments.
  const uint wm = (warp & 1u) * 64, wn = (warp >> 1) * 32;
  const uint g = lane >> 2, t = lane & 3u;

  float acc[4][4][4];
  for (uint i = 0; i < 4; ++i)
    for (uint j = 0; j < 4; ++j)
      for (uint r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

  StageRegs s;
  stage_load(&s, 0, lrow, part, m0, n0, M, N, K, x, words, words_per_row, bits, scales, biases, scale_dtype, groups_per_row,
             group_size);
  stage_store(&s, (__local uint*)x_tiles[0], (__local uint*)w_tiles[0], lrow, part, bits);
  barrier(CLK_LOCAL_MEM_FENCE);

  const uint steps = K / MMA_BK;
  for (uint step = 0; step < steps; ++step) {
    const uint buf = step & 1u;
    const bool more = step + 1 < steps;
    if (more)
      stage_load(&s, (step + 1) * MMA_BK, lrow, part, m0, n0, M, N, K, x, words, words_per_row, bits, scales, biases,
                 scale_dtype, groups_per_row, group_size);
    __local const uint* xt = (__local const uint*)x_tiles[buf];
    __local const uint* wt = (__local const uint*)w_tiles[buf];
#pragma unroll
    for (uint kh = 0; kh < 2; ++kh) {  // the two 16-column halves of the step
      uint2 a_lo[4], a_hi[4], b[4];
#pragma unroll
      for (uint i = 0; i < 4; ++i) {
        const uint r = wm + i * 16 + g;
        a_lo[i] = *(__local const uint2*)(xt + tile_half_offset(r, kh) + 2 * t);      // row g: a0, a2
        a_hi[i] = *(__local const uint2*)(xt + tile_half_offset(r + 8, kh) + 2 * t);  // row g + 8: a1, a3
      }
#pragma unroll
      for (uint j = 0; j < 4; ++j) b[j] = *(__local const uint2*)(wt + tile_half_offset(wn + j * 8 + g, kh) + 2 * t);
#pragma unroll
      for (uint i = 0; i < 4; ++i)
#pragma unroll
        for (uint j = 0; j < 4; ++j) mma_16816(acc[i][j], a_lo[i].x, a_hi[i].x, a_lo[i].y, a_hi[i].y, b[j].x, b[j].y);
    }
    if (more) stage_store(&s, (__local uint*)x_tiles[buf ^ 1u], (__local uint*)w_tiles[buf ^ 1u], lrow, part, bits);
    barrier(CLK_LOCAL_MEM_FENCE);
  }

  // c0, c1: row g, columns 2t, 2t+1 of the 16 × 8 tile; c2, c3: row g + 8.
#pragma unroll
  for (uint i = 0; i < 4; ++i) {
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
