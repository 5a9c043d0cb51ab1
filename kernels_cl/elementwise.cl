// Elementwise ops on float32 activations, one work-item per value.

__kernel void add_f32(__global const float* a, __global const float* b, __global float* out, ulong n) {
  const ulong i = get_global_id(0);
  if (i < n) out[i] = a[i] + b[i];
}

// out = x * scale, or tanh(x * scale / softcap) * softcap (softcap > 0); out may be x.
__kernel void scale_f32(__global const float* x, __global float* out, ulong n, float scale, float softcap) {
  const ulong i = get_global_id(0);
  if (i < n) out[i] = softcap > 0.0f ? tanh(x[i] * scale / softcap) * softcap : x[i] * scale;
}

// out[r, dst_col + c] = x[r / repeat, src_col + c] for c < width; out's other columns kept. One work item a value.
__kernel void copy_columns_f32(__global const float* x, uint x_cols, __global float* out, uint out_cols, uint out_rows, uint src_col,
                               uint dst_col, uint width, uint repeat) {
  const ulong i = get_global_id(0);
  if (i >= (ulong)out_rows * width) return;
  const ulong r = i / width, c = i % width;
  out[r * out_cols + dst_col + c] = x[(r / repeat) * x_cols + src_col + c];
}

// out = act(gate) * up.
__kernel void gated_activation(__global const float* gate, __global const float* up, __global float* out, ulong n,
                               uint activation) {
  const ulong i = get_global_id(0);
  if (i < n) out[i] = activation_of(gate[i], activation) * up[i];
}

// gpt-oss's clamped SwiGLU (SL_ACT_SWIGLU_CLAMPED): g = min(gate, limit), u = clamp(up, -limit, limit),
// out = g * sigmoid(alpha * g) * (u + 1).
__kernel void swiglu_clamped(__global const float* gate, __global const float* up, __global float* out, ulong n, float alpha,
                             float limit) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  const float g = fmin(gate[i], limit), u = clamp(up[i], -limit, limit);
  out[i] = g / (1.0f + exp(-alpha * g)) * (u + 1.0f);
}

#ifdef SLUICE_PTX_SHFL
// Decode on NVIDIA (rows of row_len values, row_len % 32 == 0, work-groups of whole warps): the same,
// plus the output's 15-bit form for the dp4a product that reads it next (kernels_cl/warp.cl) — a warp
// holds one block of 32 values of one row; the rows' forms one after another (one row, or a decode
// batch's rows for the dp4a batch kernel).
__kernel void gated_activation_int15(__global const float* gate, __global const float* up, __global float* out, ulong n,
                                     uint activation, __global uchar* xq, __global float2* blocks, uint row_len) {
  const ulong i = get_global_id(0);
  const bool live = i < n;
  const float v = live ? activation_of(gate[i], activation) * up[i] : 0.0f;
  if (live) out[i] = v;
  int15_store_rows(v, i, live, row_len, xq, blocks);
}
#endif

// out[i, :] = table[ids[i], :] for unquantized tables of `rows` rows. The ids may come from the device
// (a greedy pass's choice, embed_device), so one outside the table gives zeros rather than a read
// past the table's end.
__kernel void embed_rows(__global const uchar* table, ulong t_off, uint dtype, uint cols, uint rows, __global const int* ids,
                         ulong ids_off, __global float* out) {
  const uint c = get_global_id(0), i = get_global_id(1);
  if (c >= cols) return;
  table += t_off;
  const int id = ids[ids_off + i];
  out[(ulong)i * cols + c] = id >= 0 && (uint)id < rows ? load_value(table, dtype, (ulong)id * cols + c) : 0.0f;
}

// The same for affine-quantized tables.
__kernel void embed_rows_quant(__global const uchar* wbase, ulong w_off, ulong words_per_row, uint bits,
                               __global const uchar* scales, ulong s_off, __global const uchar* biases, ulong b_off,
                               uint scale_dtype, uint group_size, uint cols, uint rows, __global const int* ids,
                               ulong ids_off, __global float* out) {
  const uint c = get_global_id(0), i = get_global_id(1);
  if (c >= cols) return;
  __global const uint* words = (__global const uint*)(wbase + w_off);
  scales += s_off;
  biases += b_off;
  const int id = ids[ids_off + i];
  out[(ulong)i * cols + c] = id >= 0 && (uint)id < rows ? quant_value(words, words_per_row, bits, scales, biases, scale_dtype,
                                                                      cols / group_size, group_size, (uint)id, c)
                                                        : 0.0f;
}

#ifdef SLUICE_PTX_SHFL
// A decode step's embedding with layer 0's norm joined as the residual products join theirs
// (matvec_q4_dp4a_res): a work-item a column writes the embedding's value into x (zeros for an id
// outside the table's `rows`), the next product's input (w + w_offset) ⊙ x in 15-bit form, and a
// warp's block Σ x² into parts; the product that reads the norm scales by 1/rms (cl_ops.cpp,
// embed_join). Global size dim (a multiple of 32), work-groups of whole warps.
__kernel void embed_norm_blocks(__global const uchar* table, ulong t_off, uint t_dtype, uint bits, ulong words_per_row,
                                __global const uchar* scales, ulong s_off, __global const uchar* biases, ulong b_off,
                                uint scale_dtype, uint group_size, uint rows, __global const int* ids, ulong ids_off,
                                __global float* x, uint dim, __global const uchar* nw, ulong nw_off, uint nw_dtype,
                                float nw_offset, __global uchar* out_q, __global float2* out_blocks, __global float* parts) {
  const uint c = get_global_id(0);
  const int id = ids[ids_off];
  float v = 0.0f;
  if (id >= 0 && (uint)id < rows)
    v = bits ? quant_value((__global const uint*)(table + t_off), words_per_row, bits, scales + s_off, biases + b_off, scale_dtype,
                           dim / group_size, group_size, (uint)id, c)
             : load_value(table + t_off, t_dtype, (ulong)id * dim + c);
  x[c] = v;
  int15_store((load_value(nw + nw_off, nw_dtype, c) + nw_offset) * v, c, true, dim, out_q, out_blocks);
  const float ss = warp_sum(v * v);
  if (c % 32u == 0u) parts[c / 32u] = ss;
}
#endif

// Greedy decoding's choice, left on the device for the next pass's embedding: ids[ids_off + r] = the
// first index of the largest value of row r of x [n_rows, dim], NaN passed over (0 when the row has
// nothing else). Two launches, so a 128k-entry row is read by many work-groups at once, not walked
// by one: argmax_parts gives each of n_parts groups a row's columns c ≡ group·WG + lid (mod
// n_parts·WG) and writes its first maximum; argmax_rows keeps the best of a row's parts. Everywhere
// the larger value wins, the lower index on a tie.
#define ARGMAX_WG 256

// Folds the group's (value, index) pairs, index -1 meaning none, into lid 0's.
void argmax_group(float bv, int bi, __local float* best_v, __local int* best_i, float* out_v, int* out_i) {
  const uint lid = get_local_id(0);
  best_v[lid] = bv;
  best_i[lid] = bi;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint step = ARGMAX_WG / 2; step > 0; step /= 2) {
    if (lid < step) {
      const float ov = best_v[lid + step];
      const int oi = best_i[lid + step];
      if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
        bv = ov;
        bi = oi;
        best_v[lid] = bv;
        best_i[lid] = bi;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  *out_v = bv;
  *out_i = bi;
}

__kernel __attribute__((reqd_work_group_size(ARGMAX_WG, 1, 1)))
void argmax_parts(__global const float* x, uint dim, __global float* part_v, __global int* part_i) {
  __local float best_v[ARGMAX_WG];
  __local int best_i[ARGMAX_WG];
  const uint g = get_group_id(0), n_parts = get_num_groups(0), r = get_group_id(1);
  __global const float* row = x + (ulong)r * dim;
  float bv = 0.0f;
  int bi = -1;
  for (uint c = g * ARGMAX_WG + get_local_id(0); c < dim; c += n_parts * ARGMAX_WG) {
    const float v = row[c];
    if (!isnan(v) && (bi < 0 || v > bv)) {
      bv = v;
      bi = (int)c;
    }
  }
  argmax_group(bv, bi, best_v, best_i, &bv, &bi);
  if (get_local_id(0) == 0) {
    part_v[(ulong)r * n_parts + g] = bv;
    part_i[(ulong)r * n_parts + g] = bi;
  }
}

__kernel __attribute__((reqd_work_group_size(ARGMAX_WG, 1, 1)))
void argmax_rows(__global const float* part_v, __global const int* part_i, uint n_parts, __global int* ids, ulong ids_off) {
  __local float best_v[ARGMAX_WG];
  __local int best_i[ARGMAX_WG];
  const uint r = get_group_id(0);
  float bv = 0.0f;
  int bi = -1;
  for (uint p = get_local_id(0); p < n_parts; p += ARGMAX_WG) {  // parts in order: a tie keeps the lower index
    const float v = part_v[(ulong)r * n_parts + p];
    const int i = part_i[(ulong)r * n_parts + p];
    if (i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi))) {
      bv = v;
      bi = i;
    }
  }
  argmax_group(bv, bi, best_v, best_i, &bv, &bi);
  if (get_local_id(0) == 0) ids[ids_off + r] = bi < 0 ? 0 : bi;
}

#ifdef SLUICE_PTX_FENCE
// On NVIDIA (sm_70+: fence.acq_rel), argmax_parts and argmax_rows in one launch: each part's group writes its maximum, fences
// it at device scope and counts itself on done[r]; the group whose count completes the row fences
// again (acquire), folds the row's parts (read past L1: other compute units wrote them) and sets the
// count back to zero for the next launch. One launch less a decode step (~5 µs of ~3 ms).
__kernel __attribute__((reqd_work_group_size(ARGMAX_WG, 1, 1)))
void argmax_parts_last(__global const float* x, uint dim, __global float* part_v, __global int* part_i, __global uint* done,
                       __global int* ids, ulong ids_off) {
  __local float best_v[ARGMAX_WG];
  __local int best_i[ARGMAX_WG];
  __local uint last;
  const uint g = get_group_id(0), n_parts = get_num_groups(0), r = get_group_id(1), lid = get_local_id(0);
  __global const float* row = x + (ulong)r * dim;
  float bv = 0.0f;
  int bi = -1;
  for (uint c = g * ARGMAX_WG + lid; c < dim; c += n_parts * ARGMAX_WG) {
    const float v = row[c];
    if (!isnan(v) && (bi < 0 || v > bv)) {
      bv = v;
      bi = (int)c;
    }
  }
  argmax_group(bv, bi, best_v, best_i, &bv, &bi);
  if (lid == 0) {
    part_v[(ulong)r * n_parts + g] = bv;
    part_i[(ulong)r * n_parts + g] = bi;
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    const bool fin = atomic_inc(done + r) == n_parts - 1u;
    if (fin) asm volatile("fence.acq_rel.gpu;" ::: "memory");
    last = fin;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (!last) return;  // the whole group: `last` is one value for all its work-items
  bv = 0.0f;
  bi = -1;
  for (uint p = lid; p < n_parts; p += ARGMAX_WG) {
    const float v = ((volatile __global const float*)part_v)[(ulong)r * n_parts + p];
    const int i = ((volatile __global const int*)part_i)[(ulong)r * n_parts + p];
    if (i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi))) {
      bv = v;
      bi = i;
    }
  }
  argmax_group(bv, bi, best_v, best_i, &bv, &bi);
  if (lid == 0) {
    ids[ids_off + r] = bi < 0 ? 0 : bi;
    done[r] = 0u;
  }
}
#endif

// Rows of a weight (any unquantized form) to float32: dst[r * cols + c], for the prefill GEMMs.
__kernel void dequant_rows(__global const uchar* w, ulong w_off, uint dtype, uint cols, __global float* dst) {
  const uint c = get_global_id(0), r = get_global_id(1);
  if (c >= cols) return;
  w += w_off;
  dst[(ulong)r * cols + c] = load_value(w, dtype, (ulong)r * cols + c);
}

// Rows of a quantized weight to float32. `words`, `scales`, `biases` point at the block's first row.
__kernel void dequant_rows_quant(__global const uchar* wbase, ulong w_off, ulong words_per_row, uint bits,
                                 __global const uchar* scales, ulong s_off, __global const uchar* biases, ulong b_off,
                                 uint scale_dtype, uint group_size, uint cols, __global float* dst) {
  const uint c = get_global_id(0), r = get_global_id(1);
  if (c >= cols) return;
  __global const uint* words = (__global const uint*)(wbase + w_off);
  scales += s_off;
  biases += b_off;
  dst[(ulong)r * cols + c] =
      quant_value(words, words_per_row, bits, scales, biases, scale_dtype, cols / group_size, group_size, r, c);
}

// Rows of an MXFP4 weight (ABI 2.3) to float32: `codes` and `scales` point at the block's first row.
__kernel void dequant_rows_mxfp4(__global const uchar* codes, ulong c_off, __global const uchar* scales, ulong s_off, uint cols,
                                 __global float* dst) {
  const uint c = get_global_id(0), r = get_global_id(1);
  if (c >= cols) return;
  const uchar byte = codes[c_off + ((ulong)r * cols + c) / 2];
  const uchar s = scales[s_off + ((ulong)r * cols + c) / 32];
  dst[(ulong)r * cols + c] = MXFP4_E2M1[c % 2u ? byte >> 4 : byte & 15u] * mxfp4_scale(s);
}

// HEAD_MATMUL (ABI 2.4): per head h, x's head times rows h * head_rows + row_offset … + slice_rows of a
// weight, plain (bits 0: dtype) or affine-quantized (bits > 0), transposed as in MATMUL or not
// (sl_head_matmul_params). MLA's absorbed products: slices of a few hundred values, so one work-item
// an output value is enough. Global (out width rounded up, n_heads, tokens).
__kernel void head_matmul(__global const float* x, __global float* out, uint n_heads, uint cols, uint head_rows, uint row_offset,
                          uint slice_rows, uint transpose, __global const uchar* w, ulong w_off, uint dtype, uint bits,
                          ulong words_per_row, __global const uchar* scales, ulong s_off, __global const uchar* biases, ulong b_off,
                          uint scale_dtype, uint group_size) {
  const uint o = get_global_id(0), h = get_global_id(1);
  const ulong t = get_global_id(2);
  const uint in_w = transpose ? slice_rows : cols, out_w = transpose ? cols : slice_rows;
  if (o >= out_w) return;
  __global const float* xt = x + (t * n_heads + h) * in_w;
  w += w_off;
  scales += s_off;
  biases += b_off;
  const uint groups = bits ? cols / group_size : 0u;
  float sum = 0.0f;
  for (uint i = 0; i < in_w; ++i) {
    const uint r = h * head_rows + row_offset + (transpose ? i : o), c = transpose ? o : i;
    const float wv = bits ? quant_value((__global const uint*)w, words_per_row, bits, scales, biases, scale_dtype, groups, group_size, r, c)
                          : load_value(w, dtype, (ulong)r * cols + c);
    sum += xt[i] * wv;
  }
  out[(t * n_heads + h) * out_w + o] = sum;
}

// out[t, r] += bias[r] (after a GEMM).
__kernel void add_bias(__global float* out, __global const uchar* bias, ulong b_off, uint dtype, uint n_out) {
  const uint r = get_global_id(0), t = get_global_id(1);
  if (r >= n_out) return;
  bias += b_off;
  out[(ulong)t * n_out + r] += load_value(bias, dtype, r);
}

// Mixture-of-Experts row movement (ABI 1.1), rows of dim floats. gather: dst[i, :] = src[rows[i], :],
// work-item (column, i).
__kernel void gather_rows_f32(__global const float* src, __global const int* rows, uint dim, __global float* dst) {
  const uint c = get_global_id(0), i = get_global_id(1);
  if (c < dim) dst[(ulong)i * dim + c] = src[(ulong)rows[i] * dim + c];
}

// scatter: dst[rows[i], :] += weights[i] · src[i, :] in order of i — a work-item a column walks every
// i, so a row named twice sums in the caller's order.
__kernel void scatter_add_rows_f32(__global const float* src, __global const int* rows, __global const float* weights, uint n,
                                   uint dim, __global float* dst) {
  const uint c = get_global_id(0);
  if (c >= dim) return;
  for (uint i = 0; i < n; ++i) {
    __global float* d = dst + (ulong)rows[i] * dim + c;
    *d += weights[i] * src[(ulong)i * dim + c];
  }
}
