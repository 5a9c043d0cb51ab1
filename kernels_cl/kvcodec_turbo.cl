/* TurboQuant MSE-stage KV codec (turbo2/3/4): device functions.
 *
 * Not a complete program: the codec instance prepends the definitions below and a backend pastes
 * the result into its attention program after defining SL_KV_FN(name) (sl_k_##name before the K
 * codec's source, sl_v_##name before the V codec's; docs/PLUGINS.md). Every symbol here is made
 * through SL_TQ(name) = SL_KV_FN(tq_##name), so K and V instances coexist; the instance #undefs its
 * macros after this body.
 *
 * The contract of docs/PLUGINS.md (what the OpenCL backend's generic attention uses):
 *   void  SL_KV_FN(encode_row)(__global const float* src, __global uchar* row, uint n);
 *   float SL_KV_FN(load)(__global const uchar* row, uint i);   element i, original domain: O(n)
 * and, for a fused attention kernel (docs/PLUGINS-kvcodec.md), the rotated-domain functions below
 * (value, score_local, rotate_local, unrotate_local, rotation_of), which never de-rotate a key.
 *
 * Prepended by the instance:
 *   #define SL_TQ(name)        SL_KV_FN(tq_##name)
 *   #define SL_TQ_HEAD_DIM     head_dim
 *   #define SL_TQ_BITS         b (1..4)
 *   #define SL_TQ_ROW_BYTES    bytes of one stored row
 *   #define SL_TQ_N_BLOCKS     rotation blocks (1..4)
 *   #define SL_TQ_MAX_BLOCK    the largest block size
 *   #define SL_TQ_N_ROT        candidate rotations R (1, 2, 4, 8 or 16)
 *   #define SL_TQ_SCALE_MODE   0 exact, 1 raw, 2 ls, 3 unbiased (mse_stage.h)
 *   __constant uint  SL_TQ(n_rot) = R;                 the same, for kernels (the macros are #undef'd)
 *   __constant uint  SL_TQ(block_offset)[N_BLOCKS], SL_TQ(block_size)[N_BLOCKS], SL_TQ(block_byte)[N_BLOCKS];
 *   __constant float SL_TQ(codebook)[N_BLOCKS * 16];  centroids (z units) of each block's codebook
 *   __constant float SL_TQ(signs)[N_ROT * HEAD_DIM];  [r][i]: ±1/√n of rotation r for coordinate i
 *
 * Row layout, per block: a 16-bit header, then n indices of b bits, index j at bit j·b
 * (little-endian). Header with R = 1: the half scale s. With R > 1: bits 15..4 are bits 14..3 of the
 * half s (sign and 3 low mantissa bits dropped, rounded), bits 3..0 the block's rotation r.
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

/* ---- the docs/PLUGINS.md contract ---------------------------------------------------------- */

/* In-place unnormalised Walsh–Hadamard transform of n (a power of two) private values. */
inline void SL_TQ(fwht_private)(float* v, uint n) {
  for (uint h = 1; h < n; h *= 2)
    for (uint i = 0; i < n; i += 2 * h)
      for (uint j = i; j < i + h; ++j) {
        const float a = v[j], c = v[j + h];
        v[j] = a + c;
        v[j + h] = a - c;
      }
}

/* Block b of src under rotation r: the indices, the scale and the squared error (as the host encoder). */
inline void SL_TQ(try_rotation)(__global const float* src, uint b, uint r, uchar* idx, float* s_out, float* err_out) {
  float y[SL_TQ_MAX_BLOCK];
  const uint levels = 1u << SL_TQ_BITS;
  const uint n = SL_TQ(block_size)[b], off = SL_TQ(block_offset)[b];
  __constant const float* cb = SL_TQ(codebook) + b * 16;
  for (uint j = 0; j < n; ++j) y[j] = src[off + j] * SL_TQ(signs)[r * SL_TQ_HEAD_DIM + off + j];
  SL_TQ(fwht_private)(y, n);
  float norm2 = 0.0f;
  for (uint j = 0; j < n; ++j) norm2 += y[j] * y[j];
  float s = 0.0f, err = isfinite(norm2) ? norm2 : 0.0f;
  if (norm2 > 0.0f && isfinite(norm2)) {
    const float to_z = sqrt((float)n / norm2);
    float cc = 0.0f, yc = 0.0f;
    for (uint j = 0; j < n; ++j) {
      const float z = y[j] * to_z;
      uint k = 0;
      while (k + 1 < levels && z > 0.5f * (cb[k] + cb[k + 1])) ++k;
      idx[j] = (uchar)k;
      cc += cb[k] * cb[k];
      yc += cb[k] * y[j];
    }
    if (SL_TQ_SCALE_MODE == 1) s = sqrt(norm2 / (float)n);
    else if (SL_TQ_SCALE_MODE == 2) s = yc / cc;
    else if (SL_TQ_SCALE_MODE == 3) s = yc > 0.0f ? norm2 / yc : sqrt(norm2 / cc);
    else s = sqrt(norm2 / cc);
    err = fmax(0.0f, norm2 - 2.0f * s * yc + s * s * cc);
  } else {
    for (uint j = 0; j < n; ++j) idx[j] = 0;
  }
  *s_out = s;
  *err_out = err;
}

/* Writes block b: header (scale, rotation) and the packed indices. */
inline void SL_TQ(pack_block)(__global uchar* row, uint b, float s, uint r, const uchar* idx) {
  const uint n = SL_TQ(block_size)[b];
  __global uchar* p = row + SL_TQ(block_byte)[b];
  ushort hs;
  vstore_half_rte(SL_TQ_N_ROT == 1u ? s : fmax(s, 0.0f), 0, (__private half*)&hs);
  uint field = hs;
  if (SL_TQ_N_ROT > 1u) field = (min(((uint)(hs & 0x7fffu) + 4u) >> 3, 0xfffu) << 4) | r;
  p[0] = (uchar)(field & 255u);
  p[1] = (uchar)(field >> 8);
  for (uint k = 0; k < n * SL_TQ_BITS / 8; ++k) p[2 + k] = 0;
  for (uint j = 0; j < n; ++j) {
    const uint bit = j * SL_TQ_BITS, v = (uint)idx[j] << (bit % 8);
    p[2 + bit / 8] |= (uchar)(v & 255u);
    if ((bit % 8) + SL_TQ_BITS > 8) p[2 + bit / 8 + 1] |= (uchar)(v >> 8);
  }
}

/* One head vector → one row, by one work-item: each block under every candidate rotation, the
 * smallest error kept (the first on ties, as the host encoder does). */
void SL_KV_FN(encode_row)(__global const float* src, __global uchar* row, uint n_values) {
  uchar idx[SL_TQ_MAX_BLOCK], best_idx[SL_TQ_MAX_BLOCK];
  for (uint b = 0; b < SL_TQ_N_BLOCKS; ++b) {
    float best_err = INFINITY, best_s = 0.0f;
    uint best_r = 0;
    for (uint r = 0; r < SL_TQ_N_ROT; ++r) {
      float s, err;
      SL_TQ(try_rotation)(src, b, r, idx, &s, &err);
      if (r == 0 || err < best_err) {
        best_err = err;
        best_s = s;
        best_r = r;
        for (uint j = 0; j < SL_TQ(block_size)[b]; ++j) best_idx[j] = idx[j];
      }
    }
    SL_TQ(pack_block)(row, b, best_s, best_r, best_idx);
  }
}

/* The same by a whole work-group (docs/PLUGINS.md, optional; lsize a power of two >= 16). Every
 * rotation of a block gets lsize / N_ROT work-items: they apply the signs, run the Walsh–Hadamard
 * stages and quantise the coordinates in parallel; the sums (norm, ⟨y,c⟩, ‖c‖²) are taken by the
 * rotation's first work-item in coordinate order, as encode_row does, so the bytes are the same.
 * The smallest error wins (the lowest rotation on ties) and its first work-item packs the block.
 * scratch: 32 × head_dim + 2 × lsize floats of local memory. */
void SL_KV_FN(encode_row_group)(__global const float* src, __global uchar* row, uint n_values, uint lid, uint lsize,
                                __local float* scratch) {
  const uint levels = 1u << SL_TQ_BITS;
  const uint per_rot = lsize / SL_TQ_N_ROT, r = lid / per_rot, part = lid % per_rot;
  __local float* ys = scratch;                            /* [N_ROT][block] rotated blocks, then their indices */
  __local float* best = scratch + 32u * SL_TQ_HEAD_DIM;   /* [lsize] errors, [lsize] rotations */
  for (uint b = 0; b < SL_TQ_N_BLOCKS; ++b) {
    const uint n = SL_TQ(block_size)[b], off = SL_TQ(block_offset)[b];
    __constant const float* cb = SL_TQ(codebook) + b * 16;
    __local float* y = ys + r * n;
    const bool mine = r < SL_TQ_N_ROT;
    if (mine)
      for (uint j = part; j < n; j += per_rot) y[j] = src[off + j] * SL_TQ(signs)[r * SL_TQ_HEAD_DIM + off + j];
    for (uint h = 1; h < n; h *= 2) {  /* the butterflies of each stage spread over the rotation's work-items */
      barrier(CLK_LOCAL_MEM_FENCE);
      if (mine)
        for (uint t = part; t < n / 2; t += per_rot) {
          const uint a_i = (t / h) * 2 * h + (t % h);
          const float a = y[a_i], c = y[a_i + h];
          y[a_i] = a + c;
          y[a_i + h] = a - c;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* The norm, in order, by the rotation's first work-item; shared through best[]. */
    if (mine && part == 0) {
      float norm2 = 0.0f;
      for (uint j = 0; j < n; ++j) norm2 += y[j] * y[j];
      best[lid] = norm2;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float norm2 = mine ? best[r * per_rot] : 0.0f;
    const bool live = norm2 > 0.0f && isfinite(norm2);
    /* Each coordinate's index, kept beside the value (as a float) in the block's second half. */
    __local float* idx = ys + SL_TQ_N_ROT * n + r * n;
    if (mine && live) {
      const float to_z = sqrt((float)n / norm2);
      for (uint j = part; j < n; j += per_rot) {
        const float z = y[j] * to_z;
        uint k = 0;
        while (k + 1 < levels && z > 0.5f * (cb[k] + cb[k + 1])) ++k;
        idx[j] = (float)k;
      }
    } else if (mine) {
      for (uint j = part; j < n; j += per_rot) idx[j] = 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float err = INFINITY, s = 0.0f;
    if (mine && part == 0) {
      err = isfinite(norm2) ? norm2 : 0.0f;
      if (live) {
        float cc = 0.0f, yc = 0.0f;
        for (uint j = 0; j < n; ++j) {
          const float c = cb[(uint)idx[j]];
          cc += c * c;
          yc += c * y[j];
        }
        if (SL_TQ_SCALE_MODE == 1) s = sqrt(norm2 / (float)n);
        else if (SL_TQ_SCALE_MODE == 2) s = yc / cc;
        else if (SL_TQ_SCALE_MODE == 3) s = yc > 0.0f ? norm2 / yc : sqrt(norm2 / cc);
        else s = sqrt(norm2 / cc);
        err = fmax(0.0f, norm2 - 2.0f * s * yc + s * s * cc);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    best[lid] = err;  /* argmin over the rotations' first work-items, lowest rotation on ties */
    best[lsize + lid] = (float)lid;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = lsize / 2; h > 0; h >>= 1) {
      if (lid < h) {
        const float e2 = best[lid + h], i2 = best[lsize + lid + h];
        if (e2 < best[lid] || (e2 == best[lid] && i2 < best[lsize + lid])) {
          best[lid] = e2;
          best[lsize + lid] = i2;
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    const uint winner = (uint)best[lsize];
    if (lid == winner) {
      uchar packed[SL_TQ_MAX_BLOCK];
      for (uint j = 0; j < n; ++j) packed[j] = (uchar)idx[j];
      SL_TQ(pack_block)(row, b, s, r, packed);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

/* Element i of the row in the original domain: x_i = s_r(i)/√n · Σ_j H_ij · ŷ_j, O(block size). */
float SL_KV_FN(load)(__global const uchar* row, uint i) {
  const uint b = SL_TQ(block_of)(i), off = SL_TQ(block_offset)[b], n = SL_TQ(block_size)[b], li = i - off;
  __global const uchar* p = row + SL_TQ(block_byte)[b] + 2;
  __constant const float* cb = SL_TQ(codebook) + b * 16;
  float sum = 0.0f;
  for (uint j = 0; j < n; ++j) {
    const uint bit = j * SL_TQ_BITS;
    uint word = p[bit / 8];
    if ((bit % 8) + SL_TQ_BITS > 8) word |= (uint)p[bit / 8 + 1] << 8;
    const float c = cb[(word >> (bit % 8)) & ((1u << SL_TQ_BITS) - 1u)];
    sum += (popcount(li & j) & 1u) ? -c : c;
  }
  return SL_TQ(signs)[SL_TQ(rotation_of)(row, b) * SL_TQ_HEAD_DIM + i] * SL_TQ(scale_of)(row, b) * sum;
}

/* ---- the fused device path (docs/PLUGINS.md): what the OpenCL backend's attention_fused calls -- */

/* Local layout of the query area: slot r (the query under rotation r) at r·(head_dim + 1) — the
 * padding puts the same coordinate of different slots in different banks, since neighbouring
 * keys use different rotations — then the codebooks (n_blocks × 16 floats), read with divergent
 * indices, which local memory serves far better than the constant cache. */
#define SL_TQ_QS (SL_TQ_HEAD_DIM + 1u)

void SL_KV_FN(fused_prepare_query)(__local float* q_slots, uint lid, uint lsize) {
  for (uint r = 1; r < SL_TQ_N_ROT; ++r)
    for (uint i = lid; i < SL_TQ_HEAD_DIM; i += lsize) q_slots[r * SL_TQ_QS + i] = q_slots[i];
  for (uint i = lid; i < SL_TQ_N_BLOCKS * 16u; i += lsize) q_slots[SL_TQ_N_ROT * SL_TQ_QS + i] = SL_TQ(codebook)[i];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint r = 0; r < SL_TQ_N_ROT; ++r) SL_TQ(rotate_local)(q_slots + r * SL_TQ_QS, r, lid, lsize);
}

/* ⟨q, x̂⟩ of one stored key, by one work-item. */
float SL_KV_FN(fused_score)(__global const uchar* row, __local const float* q_slots) {
  __local const float* book = q_slots + SL_TQ_N_ROT * SL_TQ_QS;
  float sum = 0.0f;
  for (uint b = 0; b < SL_TQ_N_BLOCKS; ++b) {
    __global const uchar* p = row + SL_TQ(block_byte)[b];
    const uint header = SL_TQ(header)(p);
    const uint n = SL_TQ(block_size)[b], off = SL_TQ(block_offset)[b];
    __local const float* q = q_slots + (SL_TQ_N_ROT == 1u ? 0u : (header & 15u)) * SL_TQ_QS + off;
    __local const float* cb = book + b * 16;
    float part = 0.0f;
    for (uint g = 0; g < n; g += 8) {  /* 8 coordinates = SL_TQ_BITS bytes */
      __global const uchar* q8 = p + 2 + (g / 8) * SL_TQ_BITS;
      uint word = 0;
      for (uint k = 0; k < SL_TQ_BITS; ++k) word |= (uint)q8[k] << (8 * k);
      for (uint l = 0; l < 8; ++l) part += q[g + l] * cb[(word >> (l * SL_TQ_BITS)) & ((1u << SL_TQ_BITS) - 1u)];
    }
    const float s = SL_TQ_N_ROT == 1u ? vload_half(0, (__global const half*)p) : SL_TQ(half_bits)((header >> 4) << 3);
    sum += s * part;
  }
  return sum;
}

/* The codebooks into the 64 floats of local memory the backend gives the V codec. */
void SL_KV_FN(fused_prepare_values)(__local float* tables, uint lid, uint lsize) {
  for (uint i = lid; i < SL_TQ_N_BLOCKS * 16u; i += lsize) tables[i] = SL_TQ(codebook)[i];
}

/* x̂_i in its block's rotated domain, and the accumulator slot it belongs to (the block's rotation). */
float SL_KV_FN(fused_value)(__global const uchar* row, uint i, __local const float* tables, uint* slot) {
  const uint b = SL_TQ(block_of)(i);
  __global const uchar* p = row + SL_TQ(block_byte)[b];
  const uint header = SL_TQ(header)(p);
  *slot = SL_TQ_N_ROT == 1u ? 0u : (header & 15u);
  const float s = SL_TQ_N_ROT == 1u ? vload_half(0, (__global const half*)p) : SL_TQ(half_bits)((header >> 4) << 3);
  const uint bit = (i - SL_TQ(block_offset)[b]) * SL_TQ_BITS;
  __global const uchar* idx = p + 2 + bit / 8;
  uint word = idx[0];
  if ((bit % 8) + SL_TQ_BITS > 8) word |= (uint)idx[1] << 8;
  return s * tables[b * 16 + ((word >> (bit % 8)) & ((1u << SL_TQ_BITS) - 1u))];
}

/* Every slot back to the original domain, summed into acc[0, head_dim); whole work-group. */
void SL_KV_FN(fused_finish)(__local float* acc, uint lid, uint lsize) {
  for (uint r = 0; r < SL_TQ_N_ROT; ++r) SL_TQ(unrotate_local)(acc + r * SL_TQ_HEAD_DIM, r, lid, lsize);
  for (uint i = lid; i < SL_TQ_HEAD_DIM; i += lsize) {
    float sum = acc[i];
    for (uint r = 1; r < SL_TQ_N_ROT; ++r) sum += acc[r * SL_TQ_HEAD_DIM + i];
    acc[i] = sum;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

#undef SL_TQ_QS
