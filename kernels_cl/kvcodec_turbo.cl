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
 *   __constant uint  SL_TQ(sign_bits)[], SL_TQ(sign_scale)[N_BLOCKS]; the same as bits (set = −) and magnitudes
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

/* The scale and the rotation of the block at p, whose header is `header`. */
inline float SL_TQ(header_scale)(__global const uchar* p, uint header) {
  return SL_TQ_N_ROT == 1u ? vload_half(0, (__global const half*)p) : SL_TQ(half_bits)((header >> 4) << 3);
}
inline uint SL_TQ(header_rotation)(uint header) { return SL_TQ_N_ROT == 1u ? 0u : (header & 15u); }

/* Block b's scale and rotation in a row. */
inline float SL_TQ(scale_of)(__global const uchar* row, uint b) {
  __global const uchar* p = row + SL_TQ(block_byte)[b];
  return SL_TQ(header_scale)(p, SL_TQ(header)(p));
}
inline uint SL_TQ(rotation_of)(__global const uchar* row, uint b) {
  return SL_TQ(header_rotation)(SL_TQ(header)(row + SL_TQ(block_byte)[b]));
}

/* The index of coordinate j of a block whose index bytes start at idx_bytes (j at bit j·SL_TQ_BITS). */
inline uint SL_TQ(code_at)(__global const uchar* idx_bytes, uint j) {
  const uint bit = j * SL_TQ_BITS;
  uint word = idx_bytes[bit / 8];
  if ((bit % 8) + SL_TQ_BITS > 8) word |= (uint)idx_bytes[bit / 8 + 1] << 8;
  return (word >> (bit % 8)) & ((1u << SL_TQ_BITS) - 1u);
}

/* The indices of 8 coordinates (SL_TQ_BITS bytes at q8), coordinate l at bit l·SL_TQ_BITS. */
inline uint SL_TQ(codes8)(__global const uchar* q8) {
  uint word = 0;
  for (uint k = 0; k < SL_TQ_BITS; ++k) word |= (uint)q8[k] << (8 * k);
  return word;
}

/* The block holding coordinate i. */
inline uint SL_TQ(block_of)(uint i) {
  uint b = 0;
  for (uint k = 1; k < SL_TQ_N_BLOCKS; ++k)
    if (i >= SL_TQ(block_offset)[k]) b = k;
  return b;
}

/* signs[r·head_dim + i] (±1/√n of i's block) from the bit table: neighbouring work-items read one
 * word, where the float table costs the constant cache one access per distinct address. */
inline float SL_TQ(sign)(uint r, uint i) {
  const uint k = r * SL_TQ_HEAD_DIM + i;
  const uint negative = (SL_TQ(sign_bits)[k >> 5] >> (k & 31u)) & 1u;
  return as_float(as_uint(SL_TQ(sign_scale)[SL_TQ(block_of)(i)]) | (negative << 31));
}

/* Reconstructed coordinate i of a row, in the rotated domain (scale included). */
inline float SL_TQ(value)(__global const uchar* row, uint i) {
  const uint b = SL_TQ(block_of)(i);
  const uint code = SL_TQ(code_at)(row + SL_TQ(block_byte)[b] + 2, i - SL_TQ(block_offset)[b]);
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
      const uint word = SL_TQ(codes8)(q8);
      for (uint l = 0; l < 8; ++l)
        part += q_rot[off + g + l] * SL_TQ(codebook)[b * 16 + ((word >> (l * SL_TQ_BITS)) & ((1u << SL_TQ_BITS) - 1u))];
    }
    sum += SL_TQ(scale_of)(row, b) * part;
  }
  return sum;
}

/* In-place unnormalised Walsh–Hadamard transform of each block of n_slots vectors (slot k at
 * v + (k / per_group)·group_stride + (k % per_group)·stride: groups of slots, e.g. one per head;
 * element i of a slot at i·es from its start), by a whole work-group, one barrier per stage for all of them. One flat loop per
 * stage over every slot's coordinate pairs (pair p: coordinates 2p, 2p + 1, in the block holding
 * them) and a fixed stage count: per-block loops with early exits between barriers crash or
 * miscompile PoCL's work-group compiler. */
#define SL_TQ_BATCH 4 /* butterflies a work-item loads before it stores: a stage's pairs are disjoint */
inline void SL_TQ(fwht_slots)(__local float* v, uint n_slots, uint stride, uint per_group, uint group_stride, uint es,
                              uint lid, uint lsize) {
  const uint total = n_slots * (SL_TQ_HEAD_DIM / 2);
  /* Neighbouring work-items take neighbouring words: coordinate pairs when a slot's elements are
   * adjacent (es = 1), else the slots of a group (interleaved layouts, stride 1) — the other way
   * round, every access of a warp fell in a quarter of the local memory banks. */
  const bool slots_fast = es != 1u;
  for (uint lg = 0; (1u << lg) < SL_TQ_MAX_BLOCK; ++lg) {
    const uint h = 1u << lg;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint t0 = lid; t0 < total; t0 += SL_TQ_BATCH * lsize) {
      __local float* at[SL_TQ_BATCH];
      float a[SL_TQ_BATCH], c[SL_TQ_BATCH];
      bool live[SL_TQ_BATCH];
      for (uint k = 0; k < SL_TQ_BATCH; ++k) {
        const uint t = t0 + k * lsize;
        uint pair, group, member;
        if (slots_fast) {
          member = t % per_group;
          pair = (t / per_group) % (SL_TQ_HEAD_DIM / 2);
          group = t / per_group / (SL_TQ_HEAD_DIM / 2);
        } else {
          pair = t % (SL_TQ_HEAD_DIM / 2);
          const uint slot = t / (SL_TQ_HEAD_DIM / 2);
          member = slot % per_group;
          group = slot / per_group;
        }
        const uint b = SL_TQ(block_of)(2 * pair);
        const uint n = SL_TQ(block_size)[b], off = SL_TQ(block_offset)[b];
        live[k] = t < total && h < n;
        const uint u = pair - off / 2;
        at[k] = v + group * group_stride + member * stride + (off + ((u >> lg) << (lg + 1)) + (u & (h - 1u))) * es;
        a[k] = live[k] ? at[k][0] : 0.0f;
        c[k] = live[k] ? at[k][h * es] : 0.0f;
      }
      for (uint k = 0; k < SL_TQ_BATCH; ++k)
        if (live[k]) {
          at[k][0] = a[k] + c[k];
          at[k][h * es] = a[k] - c[k];
        }
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

inline void SL_TQ(fwht_local)(__local float* v, uint lid, uint lsize) { SL_TQ(fwht_slots)(v, 1u, 0u, 1u, 0u, 1u, lid, lsize); }

/* q (head_dim floats in local memory) → H·D_r·q/√n per block, in place; whole work-group. */
inline void SL_TQ(rotate_local)(__local float* v, uint r, uint lid, uint lsize) {
  for (uint i = lid; i < SL_TQ_HEAD_DIM; i += lsize) v[i] *= SL_TQ(sign)(r, i);
  SL_TQ(fwht_local)(v, lid, lsize);
}

/* An accumulator slot of rotation r → D_r·H·acc/√n per block, in place; whole work-group. */
inline void SL_TQ(unrotate_local)(__local float* v, uint r, uint lid, uint lsize) {
  SL_TQ(fwht_local)(v, lid, lsize);
  for (uint i = lid; i < SL_TQ_HEAD_DIM; i += lsize) v[i] *= SL_TQ(sign)(r, i);
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

/* The encoders' sums (‖y‖², ⟨c,c⟩, ⟨c,y⟩) in one fixed order whoever takes them: SL_TQ_PARTS partial
 * sums (coordinate j into partial j % SL_TQ_PARTS, in increasing j, by fma), then a fixed tree. The
 * group encoder's work-items then each take one partial — where one work-item summing 128 coordinates
 * in order was the longest chain of a kv_write — and its bytes stay encode_row's. */
#define SL_TQ_PARTS 4u
inline float SL_TQ(parts_total)(float p0, float p1, float p2, float p3) { return (p0 + p1) + (p2 + p3); }

/* A block's scale by the scale mode (mse_stage.h) from its sums, and its squared error (*err). */
inline float SL_TQ(scale_of_sums)(float norm2, float cc, float yc, uint n, float* err) {
  float s;
  if (SL_TQ_SCALE_MODE == 1) s = sqrt(norm2 / (float)n);
  else if (SL_TQ_SCALE_MODE == 2) s = yc / cc;
  else if (SL_TQ_SCALE_MODE == 3) s = yc > 0.0f ? norm2 / yc : sqrt(norm2 / cc);
  else s = sqrt(norm2 / cc);
  *err = fmax(0.0f, norm2 - 2.0f * s * yc + s * s * cc);
  return s;
}

/* Block b of src under rotation r: the indices, the scale and the squared error (as the host encoder). */
inline void SL_TQ(try_rotation)(__global const float* src, uint b, uint r, uchar* idx, float* s_out, float* err_out) {
  float y[SL_TQ_MAX_BLOCK];
  const uint levels = 1u << SL_TQ_BITS;
  const uint n = SL_TQ(block_size)[b], off = SL_TQ(block_offset)[b];
  __constant const float* cb = SL_TQ(codebook) + b * 16;
  for (uint j = 0; j < n; ++j) y[j] = src[off + j] * SL_TQ(signs)[r * SL_TQ_HEAD_DIM + off + j];
  SL_TQ(fwht_private)(y, n);
  float np[SL_TQ_PARTS];
  for (uint k = 0; k < SL_TQ_PARTS; ++k) {
    np[k] = 0.0f;
    for (uint j = k; j < n; j += SL_TQ_PARTS) np[k] = fma(y[j], y[j], np[k]);
  }
  const float norm2 = SL_TQ(parts_total)(np[0], np[1], np[2], np[3]);
  float s = 0.0f, err = isfinite(norm2) ? norm2 : 0.0f;
  if (norm2 > 0.0f && isfinite(norm2)) {
    const float to_z = sqrt((float)n / norm2);
    for (uint j = 0; j < n; ++j) {
      const float z = y[j] * to_z;
      uint k = 0;
      while (k + 1 < levels && z > 0.5f * (cb[k] + cb[k + 1])) ++k;
      idx[j] = (uchar)k;
    }
    float ccp[SL_TQ_PARTS], ycp[SL_TQ_PARTS];
    for (uint k = 0; k < SL_TQ_PARTS; ++k) {
      ccp[k] = 0.0f;
      ycp[k] = 0.0f;
      for (uint j = k; j < n; j += SL_TQ_PARTS) {
        const float c = cb[idx[j]];
        ccp[k] = fma(c, c, ccp[k]);
        ycp[k] = fma(c, y[j], ycp[k]);
      }
    }
    const float cc = SL_TQ(parts_total)(ccp[0], ccp[1], ccp[2], ccp[3]);
    const float yc = SL_TQ(parts_total)(ycp[0], ycp[1], ycp[2], ycp[3]);
    s = SL_TQ(scale_of_sums)(norm2, cc, yc, n, &err);
  } else {
    for (uint j = 0; j < n; ++j) idx[j] = 0;
  }
  *s_out = s;
  *err_out = err;
}

/* A block's 16-bit header at p: the scale, and the rotation where there are several. */
inline void SL_TQ(store_header)(__global uchar* p, float s, uint r) {
  ushort hs;
  vstore_half_rte(SL_TQ_N_ROT == 1u ? s : fmax(s, 0.0f), 0, (__private half*)&hs);
  uint field = hs;
  if (SL_TQ_N_ROT > 1u) field = (min(((uint)(hs & 0x7fffu) + 4u) >> 3, 0xfffu) << 4) | r;
  p[0] = (uchar)(field & 255u);
  p[1] = (uchar)(field >> 8);
}

/* Indices 8g..8g+7 of a block, b bits each from bit 0 of `codes`, into its index bytes b·g..b·g+b−1.
 * Whole bytes, written once: no read-modify-write of global memory, whose round trips made packing
 * a row one work-item's long dependent chain. */
inline void SL_TQ(store_codes8)(__global uchar* idx_bytes, uint g, uint codes) {
  for (uint k = 0; k < SL_TQ_BITS; ++k) idx_bytes[g * SL_TQ_BITS + k] = (uchar)(codes >> (8 * k));
}

/* Writes block b: header (scale, rotation) and the packed indices. */
inline void SL_TQ(pack_block)(__global uchar* row, uint b, float s, uint r, const uchar* idx) {
  const uint n = SL_TQ(block_size)[b];
  __global uchar* p = row + SL_TQ(block_byte)[b];
  SL_TQ(store_header)(p, s, r);
  for (uint g = 0; g < n / 8; ++g) {
    uint codes = 0;
    for (uint l = 0; l < 8; ++l) codes |= (uint)idx[8 * g + l] << (l * SL_TQ_BITS);
    SL_TQ(store_codes8)(p + 2, g, codes);
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

/* The same by a whole work-group (docs/PLUGINS.md, optional; lsize a power of two >= 16 and >=
 * 4 × N_ROT: 64 for 16 rotations). Every rotation of a block gets lsize / N_ROT work-items: they apply
 * the signs, run the Walsh–Hadamard stages and quantise the coordinates in parallel; the sums (norm,
 * ⟨y,c⟩, ‖c‖²) are taken by its first SL_TQ_PARTS work-items, a partial each, in the order encode_row
 * takes them, so the bytes are the same. The smallest error wins (the lowest rotation on ties) and its
 * first work-item packs the block. scratch: 32 × head_dim + 2 × lsize floats of local memory. */
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
      for (uint j = part; j < n; j += per_rot) y[j] = src[off + j] * SL_TQ(sign)(r, off + j);
    /* The butterflies of each stage spread over the rotation's work-items. The stage loop has a
     * fixed trip count (the largest block's): barriers in a loop whose count changes from block to
     * block crash or miscompile PoCL's work-group compiler. */
    for (uint h = 1; h < SL_TQ_MAX_BLOCK; h *= 2) {
      barrier(CLK_LOCAL_MEM_FENCE);
      if (mine && h < n)
        for (uint t0 = part; t0 < n / 2; t0 += SL_TQ_BATCH * per_rot) {
          uint at[SL_TQ_BATCH];
          float a[SL_TQ_BATCH], c[SL_TQ_BATCH];
          for (uint k = 0; k < SL_TQ_BATCH; ++k) {
            const uint t = t0 + k * per_rot;
            at[k] = (t / h) * 2 * h + (t % h);
            a[k] = t < n / 2 ? y[at[k]] : 0.0f;
            c[k] = t < n / 2 ? y[at[k] + h] : 0.0f;
          }
          for (uint k = 0; k < SL_TQ_BATCH; ++k)
            if (t0 + k * per_rot < n / 2) {
              y[at[k]] = a[k] + c[k];
              y[at[k] + h] = a[k] - c[k];
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* The norm: SL_TQ_PARTS partial sums by the rotation's first work-items (the order encode_row
     * takes), into best[r·PARTS + k]; the decision thresholds between neighbouring centroids and the
     * codebook into best[lsize...] (free until the argmin): the search and the lookups below read them
     * from local memory, where divergent indices cost nothing extra (the constant cache serialises
     * them), and the search halves the interval instead of walking it — the same index, since the
     * thresholds increase. */
    if (mine && part < SL_TQ_PARTS) {
      float acc = 0.0f;
      for (uint j = part; j < n; j += SL_TQ_PARTS) acc = fma(y[j], y[j], acc);
      best[r * SL_TQ_PARTS + part] = acc;
    }
    if (lid + 1 < levels) best[lsize + lid] = 0.5f * (cb[lid] + cb[lid + 1]);
    if (lid < levels) best[lsize + 16u + lid] = cb[lid];
    barrier(CLK_LOCAL_MEM_FENCE);
    __local const float* np = best + r * SL_TQ_PARTS;
    const float norm2 = mine ? SL_TQ(parts_total)(np[0], np[1], np[2], np[3]) : 0.0f;
    const bool live = norm2 > 0.0f && isfinite(norm2);
    __local const float* thresholds = best + lsize;
    __local const float* book = best + lsize + 16u;
    /* Each coordinate's index, kept beside the value (as a float) in the block's second half. */
    __local float* idx = ys + SL_TQ_N_ROT * n + r * n;
    if (mine && live) {
      const float to_z = sqrt((float)n / norm2);
      for (uint j = part; j < n; j += per_rot) {
        const float z = y[j] * to_z;
        uint k = 0;
        for (uint step = levels / 2; step > 0; step >>= 1)
          if (z > thresholds[k + step - 1]) k += step;
        idx[j] = (float)k;
      }
    } else if (mine) {
      for (uint j = part; j < n; j += per_rot) idx[j] = 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* ⟨c,c⟩ and ⟨c,y⟩ by partial sums as the norm; through best[r·2·PARTS ...] once every lookup of
     * the codebook in best[lsize...] is done (with lsize = 4·N_ROT the two areas meet). */
    float ccp = 0.0f, ycp = 0.0f;
    if (mine && live && part < SL_TQ_PARTS)
      for (uint j = part; j < n; j += SL_TQ_PARTS) {
        const float c = book[(uint)idx[j]];
        ccp = fma(c, c, ccp);
        ycp = fma(c, y[j], ycp);
      }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (mine && part < SL_TQ_PARTS) {
      best[r * 2u * SL_TQ_PARTS + part] = ccp;
      best[r * 2u * SL_TQ_PARTS + SL_TQ_PARTS + part] = ycp;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float err = INFINITY, s = 0.0f;
    if (mine && part == 0) {
      err = isfinite(norm2) ? norm2 : 0.0f;
      if (live) {
        __local const float* cp = best + r * 2u * SL_TQ_PARTS;
        const float cc = SL_TQ(parts_total)(cp[0], cp[1], cp[2], cp[3]);
        const float yc = SL_TQ(parts_total)(cp[4], cp[5], cp[6], cp[7]);
        s = SL_TQ(scale_of_sums)(norm2, cc, yc, n, &err);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* argmin over the rotations (their first work-items hold err), lowest rotation on ties: log2(N_ROT)
     * stages, a fixed count. */
    if (mine && part == 0) {
      best[r] = err;
      best[lsize + r] = (float)r;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint h = SL_TQ_N_ROT / 2u; h > 0; h >>= 1) {
      if (lid < h) {
        const float e2 = best[lid + h], i2 = best[lsize + lid + h];
        if (e2 < best[lid] || (e2 == best[lid] && i2 < best[lsize + lid])) {
          best[lid] = e2;
          best[lsize + lid] = i2;
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    /* The winner writes the header; every work-item packs groups of 8 of the winner's indices. */
    const uint winner = (uint)best[lsize];  /* a rotation */
    __global uchar* p = row + SL_TQ(block_byte)[b];
    if (lid == winner * per_rot) SL_TQ(store_header)(p, s, r);
    __local const float* win_idx = ys + SL_TQ_N_ROT * n + winner * n;
    for (uint g = lid; g < n / 8; g += lsize) {
      uint codes = 0;
      for (uint l = 0; l < 8; ++l) codes |= (uint)win_idx[8 * g + l] << (l * SL_TQ_BITS);
      SL_TQ(store_codes8)(p + 2, g, codes);
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
    const float c = cb[SL_TQ(code_at)(p, j)];
    sum += (popcount(li & j) & 1u) ? -c : c;
  }
  return SL_TQ(signs)[SL_TQ(rotation_of)(row, b) * SL_TQ_HEAD_DIM + i] * SL_TQ(scale_of)(row, b) * sum;
}

/* n_rows stored rows (row k at first + k·stride bytes) in the original domain into
 * out[k·head_dim + i], by a whole work-group (docs/PLUGINS.md, optional): every coordinate's
 * reconstruction in its block's rotated domain, one Walsh–Hadamard transform of all the rows' blocks
 * (one barrier a stage), then each block's signs — O(log n) an element where load is O(n).
 * out: n_rows × head_dim floats of local memory. Begins and ends with a barrier. */
void SL_KV_FN(decode_rows_group)(__global const uchar* first, uint stride, uint n_rows, __local float* out, uint lid,
                                 uint lsize) {
  /* A coordinate a work-item: neighbouring work-items store neighbouring floats. (By octets — one
   * header and BITS bytes for eight coordinates — measured slower on the H200, 463 against 386 µs a
   * layer at depth 32768: probably the eight-way local-memory bank conflicts of its stores.) */
  barrier(CLK_LOCAL_MEM_FENCE); /* the caller's last reads of out are done */
  for (uint e = lid; e < n_rows * SL_TQ_HEAD_DIM; e += lsize)
    out[e] = SL_TQ(value)(first + (e / SL_TQ_HEAD_DIM) * stride, e % SL_TQ_HEAD_DIM);
  SL_TQ(fwht_slots)(out, n_rows, SL_TQ_HEAD_DIM, n_rows, 0u, 1u, lid, lsize);
  for (uint e = lid; e < n_rows * SL_TQ_HEAD_DIM; e += lsize) {
    const uint i = e % SL_TQ_HEAD_DIM;
    out[e] *= SL_TQ(sign)(SL_TQ(rotation_of)(first + (e / SL_TQ_HEAD_DIM) * stride, SL_TQ(block_of)(i)), i);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

/* ---- the fused device path (docs/PLUGINS.md): what the OpenCL backend's attention_fused calls -- */

/* Local layout of the query area: slot r (the query under rotation r) at r·(head_dim + 1) — the
 * padding puts the same coordinate of different slots in different banks, since neighbouring
 * keys use different rotations — then the codebooks (n_blocks × 16 floats), read with divergent
 * indices, which local memory serves far better than the constant cache. */
#define SL_TQ_QS (SL_TQ_HEAD_DIM + 1u)

/* One head's query (in q_slots[0, head_dim)) under every rotation, slot r at r·SL_TQ_QS, then the
 * codebooks. All rotations' transforms at once: one barrier per Walsh–Hadamard stage. */
void SL_KV_FN(fused_prepare_query)(__local float* q_slots, uint lid, uint lsize) {
  barrier(CLK_LOCAL_MEM_FENCE);  /* slot 0, as the caller's work-items wrote it, is read across them */
  for (uint i = SL_TQ_HEAD_DIM + lid; i < SL_TQ_N_ROT * SL_TQ_HEAD_DIM; i += lsize) {  /* slots 1.. from slot 0 */
    const uint r = i / SL_TQ_HEAD_DIM, d = i % SL_TQ_HEAD_DIM;
    q_slots[r * SL_TQ_QS + d] = q_slots[d] * SL_TQ(sign)(r, d);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint i = lid; i < SL_TQ_HEAD_DIM; i += lsize) q_slots[i] *= SL_TQ(sign)(0u, i);
  for (uint i = lid; i < SL_TQ_N_BLOCKS * 16u; i += lsize) q_slots[SL_TQ_N_ROT * SL_TQ_QS + i] = SL_TQ(codebook)[i];
  SL_TQ(fwht_slots)(q_slots, SL_TQ_N_ROT, SL_TQ_QS, SL_TQ_N_ROT, 0u, 1u, lid, lsize);
}

/* The multi-head layout of fused_prepare_queries / fused_score_heads: the n_heads queries of one
 * rotation and coordinate side by side, (r·QS + d)·n_heads + g, so a key's score for every head takes
 * one vector load per coordinate; the codebooks after the last rotation. */
#define SL_TQ_QH(r, d, g, nh) ((((r) * SL_TQ_QS + (d)) * (nh)) + (g))

/* Part `part` of n_parts of fused_prepare_queries (docs/PLUGINS.md, optional): the rotations
 * [part·R/n_parts, (part+1)·R/n_parts) of its layout, the codebooks with the last part — so that a
 * decode step's few query areas (one a group of heads: 8 on Llama-3-8B) are transformed by several
 * work-groups each. *first, *count: the floats of q_slots written (contiguous). Whole work-group. */
void SL_KV_FN(fused_prepare_queries_part)(__local float* q_slots, uint k_area, __local const float* queries, uint n_heads,
                                          uint part, uint n_parts, uint lid, uint lsize, uint* first, uint* count) {
  const uint r0 = part * SL_TQ_N_ROT / n_parts, r1 = (part + 1u) * SL_TQ_N_ROT / n_parts;
  const bool last = part + 1u == n_parts;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint i = lid; i < (r1 - r0) * SL_TQ_HEAD_DIM * n_heads; i += lsize) {
    const uint g = i % n_heads, rd = i / n_heads, r = r0 + rd / SL_TQ_HEAD_DIM, d = rd % SL_TQ_HEAD_DIM;
    q_slots[SL_TQ_QH(r, d, g, n_heads)] = queries[g * SL_TQ_HEAD_DIM + d] * SL_TQ(sign)(r, d);
  }
  if (last)
    for (uint i = lid; i < SL_TQ_N_BLOCKS * 16u; i += lsize) q_slots[SL_TQ_N_ROT * SL_TQ_QS * n_heads + i] = SL_TQ(codebook)[i];
  SL_TQ(fwht_slots)(q_slots + r0 * SL_TQ_QS * n_heads, (r1 - r0) * n_heads, 1u, n_heads, SL_TQ_QS * n_heads, n_heads, lid, lsize);
  *first = r0 * SL_TQ_QS * n_heads;
  *count = (r1 - r0) * SL_TQ_QS * n_heads + (last ? SL_TQ_N_BLOCKS * 16u : 0u);
}

/* n_heads queries (queries[g·head_dim + d]) under every rotation into q_slots (n_heads·k_area floats,
 * laid out as SL_TQ_QH): every head's and rotation's transform at once, one barrier per stage. */
void SL_KV_FN(fused_prepare_queries)(__local float* q_slots, uint k_area, __local const float* queries, uint n_heads,
                                     uint lid, uint lsize) {
  uint first, count;
  SL_KV_FN(fused_prepare_queries_part)(q_slots, k_area, queries, n_heads, 0u, 1u, lid, lsize, &first, &count);
}

/* ⟨q, x̂⟩ of one stored key, by one work-item. */
float SL_KV_FN(fused_score)(__global const uchar* row, __local const float* q_slots) {
  __local const float* book = q_slots + SL_TQ_N_ROT * SL_TQ_QS;
  float sum = 0.0f;
  for (uint b = 0; b < SL_TQ_N_BLOCKS; ++b) {
    __global const uchar* p = row + SL_TQ(block_byte)[b];
    const uint header = SL_TQ(header)(p);
    const uint n = SL_TQ(block_size)[b], off = SL_TQ(block_offset)[b];
    __local const float* q = q_slots + SL_TQ(header_rotation)(header) * SL_TQ_QS + off;
    __local const float* cb = book + b * 16;
    float part = 0.0f;
    for (uint g = 0; g < n; g += 8) {  /* 8 coordinates = SL_TQ_BITS bytes */
      __global const uchar* q8 = p + 2 + (g / 8) * SL_TQ_BITS;
      const uint word = SL_TQ(codes8)(q8);
      for (uint l = 0; l < 8; ++l) part += q[g + l] * cb[(word >> (l * SL_TQ_BITS)) & ((1u << SL_TQ_BITS) - 1u)];
    }
    const float s = SL_TQ(header_scale)(p, header);
    sum += s * part;
  }
  return sum;
}

/* ⟨q_g, x̂⟩ of one stored key for the n_heads queries fused_prepare_queries laid out, by one
 * work-item: each index is unpacked and looked up once for every head, and the heads' query values
 * of a coordinate come in one vector load (4 heads: float4).
 * Work-item i takes an octet's coordinates from (i − r) mod 8 on, not in order. Slot r's coordinate
 * d sits at 16-byte word r·QS + d, i.e. in bank quad (r + d) mod 8, and a warp's 16-byte loads are
 * served 8 work-items at a time: in coordinate order, neighbouring keys of different rotations
 * collided in a quad (2–3-way conflicts on the kernel's most frequent load); staggered, the 8 of a
 * phase read quads (i + l) mod 8, all different. */
void SL_KV_FN(fused_score_heads)(__global const uchar* row, __local const float* q_slots, uint k_area, uint n_heads,
                                 float* scores) {
  __local const float* book = q_slots + SL_TQ_N_ROT * SL_TQ_QS * n_heads;
  for (uint g = 0; g < n_heads; ++g) scores[g] = 0.0f;
  const uint lane8 = (uint)get_local_id(0) & 7u;
  for (uint b = 0; b < SL_TQ_N_BLOCKS; ++b) {
    __global const uchar* p = row + SL_TQ(block_byte)[b];
    const uint header = SL_TQ(header)(p);
    const uint n = SL_TQ(block_size)[b], off = SL_TQ(block_offset)[b];
    const uint r = SL_TQ(header_rotation)(header);
    __local const float* cb = book + b * 16;
    const float s = SL_TQ(header_scale)(p, header);
    const uint first = (lane8 - r) & 7u;
    for (uint g8 = 0; g8 < n; g8 += 8) {  /* 8 coordinates = SL_TQ_BITS bytes */
      __global const uchar* q8 = p + 2 + (g8 / 8) * SL_TQ_BITS;
      const uint word = SL_TQ(codes8)(q8);
      for (uint l = 0; l < 8; ++l) {
        const uint k = (first + l) & 7u;
        const float c = s * cb[(word >> (k * SL_TQ_BITS)) & ((1u << SL_TQ_BITS) - 1u)];
        __local const float* q = q_slots + SL_TQ_QH(r, off + g8 + k, 0u, n_heads);
        if (n_heads == 4u) {  /* q_slots is 16-byte aligned (docs/PLUGINS.md): one 16-byte load */
          const float4 q4 = *(__local const float4*)q;
          scores[0] += q4.s0 * c;
          scores[1] += q4.s1 * c;
          scores[2] += q4.s2 * c;
          scores[3] += q4.s3 * c;
        } else {
          for (uint g = 0; g < n_heads; ++g) scores[g] += q[g] * c;
        }
      }
    }
  }
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
  *slot = SL_TQ(header_rotation)(header);
  return SL_TQ(header_scale)(p, header) * tables[b * 16 + SL_TQ(code_at)(p + 2, i - SL_TQ(block_offset)[b])];
}

/* x̂ of coordinates 8·octet .. 8·octet + 7 (one block: blocks are multiples of 8 long) in their
 * block's rotated domain, and its slot: one header, BITS bytes and eight lookups. */
void SL_KV_FN(fused_values8)(__global const uchar* row, uint octet, __local const float* tables, float* v, uint* slot) {
  const uint b = SL_TQ(block_of)(8u * octet);
  __global const uchar* p = row + SL_TQ(block_byte)[b];
  const uint header = SL_TQ(header)(p);
  *slot = SL_TQ(header_rotation)(header);
  const float s = SL_TQ(header_scale)(p, header);
  __global const uchar* q8 = p + 2 + (octet - SL_TQ(block_offset)[b] / 8u) * SL_TQ_BITS;
  const uint word = SL_TQ(codes8)(q8);
  __local const float* cb = tables + b * 16;
  for (uint l = 0; l < 8; ++l) v[l] = s * cb[(word >> (l * SL_TQ_BITS)) & ((1u << SL_TQ_BITS) - 1u)];
}

/* n_heads accumulators (head g's N_ROT slots at acc + g·stride) back to the original domain, each
 * summed into its first head_dim; whole work-group, one barrier per stage for all of them. */
void SL_KV_FN(fused_finish_heads)(__local float* acc, uint stride, uint n_heads, uint lid, uint lsize) {
  SL_TQ(fwht_slots)(acc, n_heads * SL_TQ_N_ROT, SL_TQ_HEAD_DIM, SL_TQ_N_ROT, stride, 1u, lid, lsize);
  for (uint i = lid; i < n_heads * SL_TQ_HEAD_DIM; i += lsize) {
    __local float* a = acc + (i / SL_TQ_HEAD_DIM) * stride;
    const uint d = i % SL_TQ_HEAD_DIM;
    float sum = a[d] * SL_TQ(sign)(0u, d);
    for (uint r = 1; r < SL_TQ_N_ROT; ++r) sum += a[r * SL_TQ_HEAD_DIM + d] * SL_TQ(sign)(r, d);
    a[d] = sum;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

/* Every slot back to the original domain, summed into acc[0, head_dim); whole work-group. */
void SL_KV_FN(fused_finish)(__local float* acc, uint lid, uint lsize) { SL_KV_FN(fused_finish_heads)(acc, 0u, 1u, lid, lsize); }

#undef SL_TQ_QS
#undef SL_TQ_QH
#undef SL_TQ_BATCH
#undef SL_TQ_PARTS
