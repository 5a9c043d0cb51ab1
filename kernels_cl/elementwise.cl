// Elementwise ops on float32 activations, one work-item per value.

__kernel void add_f32(__global const float* a, __global const float* b, __global float* out, ulong n) {
  const ulong i = get_global_id(0);
  if (i < n) out[i] = a[i] + b[i];
}

__kernel void mul_f32(__global const float* a, __global const float* b, __global float* out, ulong n) {
  const ulong i = get_global_id(0);
  if (i < n) out[i] = a[i] * b[i];
}

__kernel void scale_f32(__global float* x, float s, ulong n) {
  const ulong i = get_global_id(0);
  if (i < n) x[i] = x[i] * s;
}

// out = act(gate) * up.
__kernel void gated_activation(__global const float* gate, __global const float* up, __global float* out, ulong n,
                               uint activation) {
  const ulong i = get_global_id(0);
  if (i < n) out[i] = activation_of(gate[i], activation) * up[i];
}

#ifdef SLUICE_PTX_SHFL
// Decode on NVIDIA (n % 32 == 0, work-groups of whole warps): the same, plus the output's 15-bit form
// for the dp4a matvec that reads it next (kernels_cl/warp.cl) — a warp holds one block of 32 values.
__kernel void gated_activation_int15(__global const float* gate, __global const float* up, __global float* out, ulong n,
                                     uint activation, __global uchar* xq, __global float2* blocks) {
  const ulong i = get_global_id(0);
  const bool live = i < n;
  const float v = live ? activation_of(gate[i], activation) * up[i] : 0.0f;
  if (live) out[i] = v;
  int15_store(v, (uint)i, live, (uint)n, xq, blocks);
}
#endif

// out[i, :] = table[ids[i], :] for unquantized tables.
__kernel void embed_rows(__global const uchar* table, ulong t_off, uint dtype, uint cols, __global const int* ids,
                         __global float* out) {
  const uint c = get_global_id(0), i = get_global_id(1);
  if (c >= cols) return;
  table += t_off;
  out[(ulong)i * cols + c] = load_value(table, dtype, (ulong)ids[i] * cols + c);
}

// The same for affine-quantized tables.
__kernel void embed_rows_quant(__global const uchar* wbase, ulong w_off, ulong words_per_row, uint bits,
                               __global const uchar* scales, ulong s_off, __global const uchar* biases, ulong b_off,
                               uint scale_dtype, uint group_size, uint cols, __global const int* ids,
                               __global float* out) {
  const uint c = get_global_id(0), i = get_global_id(1);
  if (c >= cols) return;
  __global const uint* words = (__global const uint*)(wbase + w_off);
  scales += s_off;
  biases += b_off;
  out[(ulong)i * cols + c] = quant_value(words, words_per_row, bits, scales, biases, scale_dtype, cols / group_size,
                                         group_size, (uint)ids[i], c);
}

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
