/* TurboQuant MSE-stage KV codec (turbo2/3/4): device functions for attention on the compressed cache.
 *
 * Not a complete program: the codec instance prepends the definitions below (see
 * docs/PLUGINS-kvcodec.md) and a backend pastes the result into its attention program. The K and
 * V instances each bring their own copy; SL_TQ(name) gives every symbol the instance's prefix
 * (sl_tq_k_ / sl_tq_v_), and the prefix block #undefs its macros after this body.
 *
 * Prepended by the instance:
 *   #define SL_TQ(name)        sl_tq_k_##name   (or sl_tq_v_##name)
 *   #define SL_TQ_HEAD_DIM     head_dim
 *   #define SL_TQ_BITS         b (1..4)
 *   #define SL_TQ_ROW_BYTES    bytes of one stored row
 *   #define SL_TQ_N_BLOCKS     rotation blocks (1..4)
 *   #define SL_TQ_N_ROT        candidate rotations R (1, 2, 4, 8 or 16)
 *   __constant uint  SL_TQ(n_rot) = R;                 the same, for kernels (the macros are #undef'd)
 *   __constant uint  SL_TQ(block_offset)[N_BLOCKS], SL_TQ(block_size)[N_BLOCKS], SL_TQ(block_byte)[N_BLOCKS];
 *   __constant float SL_TQ(codebook)[N_BLOCKS * 16];  centroids (z units) of each block's codebook
 *   __constant float SL_TQ(signs)[N_ROT * HEAD_DIM];  [r][i]: ±1/√n of rotation r for coordinate i
 *
 * Row layout, per block: a 16-bit header, then n indices of b bits, index j at bit j·b
 * (little-endian). Header with R = 1: the half scale s. With R > 1: bits 15..4 are bits 14..3 of the
 * half s (sign and 3 low mantissa bits dropped), bits 3..0 the block's rotation r.
 * The reconstruction in rotation r's domain is ŷ_j = s · codebook[idx_j]; the original block is
 * x = D_r·H·ŷ/√n. Attention stays rotated: rotate the query once under every r (rotate_local into
 * R slots of HEAD_DIM), score keys with dot(q_rot[r_block], ŷ) (score_local), accumulate values as ŷ
 * into the slot of the block's rotation (value, rotation_of), and rotate each slot back once and sum
 * (unrotate_local).
 */

/* IEEE half bits (sign 0, finite) → float, without cl_khr_fp16. */
inline float SL_TQ(half_bits)(uint h) {
  const uint e = (h >> 10) & 31u, m = h & 1023u;
  if (e == 0u) return (float)m * 5.9604645e-8f;
  return as_float(((e + 112u) << 23) | (m << 13));
}

inline uint SL_TQ(header)(__global const uchar* block) { return (uint)block[0] | ((uint)block[1] << 8); }

/* Block b's scale and rotation in a row. */
inline float SL_TQ(scale_of)(__global const uchar* row, uint b) {
  __global const uchar* p = row + SL_TQ(block_byte)[b];
  if (SL_TQ_N_ROT == 1u) return vload_half(0, (__global const half*)p);
  return SL_TQ(half_bits)((SL_TQ(header)(p) >> 4) << 3);
}
inline uint SL_TQ(rotation_of)(__global const uchar* row, uint b) {
  return SL_TQ_N_ROT == 1u ? 0u : (SL_TQ(header)(row + SL_TQ(block_byte)[b]) & 15u);
}

/* The block holding coordinate i. */
inline uint SL_TQ(block_of)(uint i) {
  uint b = 0;
  for (uint k = 1; k < SL_TQ_N_BLOCKS; ++k)
    if (i >= SL_TQ(block_offset)[k]) b = k;
  return b;
}

/* Reconstructed coordinate i of a row, in the rotated domain (scale included). */
inline float SL_TQ(value)(__global const uchar* row, uint i) {
  const uint b = SL_TQ(block_of)(i);
  __global const uchar* p = row + SL_TQ(block_byte)[b];
  const uint bit = (i - SL_TQ(block_offset)[b]) * SL_TQ_BITS;
  __global const uchar* idx = p + 2 + bit / 8;
  uint word = idx[0];
  if ((bit % 8) + SL_TQ_BITS > 8) word |= (uint)idx[1] << 8;
  const uint code = (word >> (bit % 8)) & ((1u << SL_TQ_BITS) - 1u);
  return SL_TQ(scale_of)(row, b) * SL_TQ(codebook)[b * 16 + code];
}

/* dot(q_rot, ŷ) for one row, by one work-item; q_rot holds N_ROT slots of HEAD_DIM. */
inline float SL_TQ(score_local)(__global const uchar* row, __local const float* q_rot_all) {
  float sum = 0.0f;
  for (uint b = 0; b < SL_TQ_N_BLOCKS; ++b) {
    __global const uchar* p = row + SL_TQ(block_byte)[b];
    const uint n = SL_TQ(block_size)[b], off = SL_TQ(block_offset)[b];
    __local const float* q_rot = q_rot_all + SL_TQ(rotation_of)(row, b) * SL_TQ_HEAD_DIM;
    float part = 0.0f;
    for (uint g = 0; g < n; g += 8) {  /* 8 coordinates = SL_TQ_BITS bytes */
      __global const uchar* q8 = p + 2 + (g / 8) * SL_TQ_BITS;
      uint word = 0;
      for (uint k = 0; k < SL_TQ_BITS; ++k) word |= (uint)q8[k] << (8 * k);
      for (uint l = 0; l < 8; ++l)
        part += q_rot[off + g + l] * SL_TQ(codebook)[b * 16 + ((word >> (l * SL_TQ_BITS)) & ((1u << SL_TQ_BITS) - 1u))];
    }
    sum += SL_TQ(scale_of)(row, b) * part;
  }
  return sum;
}

/* In-place unnormalised Walsh–Hadamard transform of each block of v, by a whole work-group. */
inline void SL_TQ(fwht_local)(__local float* v, uint lid, uint lsize) {
  for (uint h = 1; h < 256; h *= 2) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint b = 0; b < SL_TQ_N_BLOCKS; ++b) {
      const uint n = SL_TQ(block_size)[b], off = SL_TQ(block_offset)[b];
      if (h >= n) continue;
      for (uint t = lid; t < n / 2; t += lsize) {
        const uint i = off + (t / h) * 2 * h + (t % h);
        const float a = v[i], c = v[i + h];
        v[i] = a + c;
        v[i + h] = a - c;
      }
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

/* q (head_dim floats in local memory) → H·D_r·q/√n per block, in place; whole work-group. */
inline void SL_TQ(rotate_local)(__local float* v, uint r, uint lid, uint lsize) {
  for (uint i = lid; i < SL_TQ_HEAD_DIM; i += lsize) v[i] *= SL_TQ(signs)[r * SL_TQ_HEAD_DIM + i];
  SL_TQ(fwht_local)(v, lid, lsize);
}

/* An accumulator slot of rotation r → D_r·H·acc/√n per block, in place; whole work-group. */
inline void SL_TQ(unrotate_local)(__local float* v, uint r, uint lid, uint lsize) {
  SL_TQ(fwht_local)(v, lid, lsize);
  for (uint i = lid; i < SL_TQ_HEAD_DIM; i += lsize) v[i] *= SL_TQ(signs)[r * SL_TQ_HEAD_DIM + i];
  barrier(CLK_LOCAL_MEM_FENCE);
}
