// Warp-level pieces for NVIDIA (inline PTX, built only with SLUICE_PTX_SHFL): sums and maxima over
// a warp's 32 lanes, and the decode activation's 15-bit form that the dp4a matvec
// (kernels_cl/matvec.cl, matvec_q4_dp4a) reads. The form is written by whichever kernel produces the
// activation — rms_norm, add_rms_norm, gated_activation (one launch fewer per product than rounding
// it separately) — or by matvec_x_int15 when no producer did.
//
// The form, per block of 32 columns (cols % 32 == 0): 64 bytes — the high bytes h of the codes (32),
// then the low 7 bits l (32), q = 128·h + l, each in the order nibbles come out of a weight word: per
// 8 columns the even columns, then the odd ones (w & 0x0f0f0f0f holds columns 0, 2, 4, 6 of the word,
// (w >> 4) & 0x0f0f0f0f columns 1, 3, 5, 7) — and a float2 (step, step · Σ q): the block's scale and
// the sum of its rounded values (the weights' bias term uses the same rounded x). q = round(x / step)
// with step = max|x| / 16383: |x − q·step| <= step/2, the CPU backend's int16 error doubled.
// The 64 bytes are stored as four 16-byte quarters, quarter k of every block in plane k (plane k of
// block b at uint4 k·n_blocks + b): the matvec's work-items read the quarters of consecutive blocks
// at once, and with planes a warp's load is 512 contiguous bytes rather than 32 pieces 64 bytes apart.
inline __global uchar* int15_byte(__global uchar* xq, uint n_blocks, uint b, uint offset) {
  return xq + ((ulong)(offset / 16u) * n_blocks + b) * 16u + offset % 16u;
}

#ifdef SLUICE_PTX_SHFL
// v of the lane whose index differs from this one's in bit pattern m (a butterfly step).
inline float shfl_xor(float v, int m) {
  int o;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(o) : "r"(as_int(v)), "r"(m));
  return as_float(o);
}

inline float warp_sum(float v) {
  for (int m = 16; m > 0; m >>= 1) v += shfl_xor(v, m);
  return v;
}

inline float warp_max(float v) {
  for (int m = 16; m > 0; m >>= 1) v = fmax(v, shfl_xor(v, m));
  return v;
}

// Column c's value v, called by all 32 lanes of a warp together, lane i holding column 32·b + i of
// block b (the shuffles need every lane: callers pass 0 for columns past the end and store nothing).
inline void int15_store(float v, uint c, bool live, uint cols, __global uchar* xq, __global float2* blocks) {
  const uint lane = c % 32u;
  const float m = warp_max(fabs(v));
  const float step = m / 16383.0f, inv = m > 0.0f ? 16383.0f / m : 0.0f;
  const int q = clamp(convert_int_rte(v * inv), -16383, 16383);
  const int total = (int)warp_sum((float)q);  // |Σ q| <= 32 · 16383: exact in float
  if (!live) return;
  const uint b = c / 32u, word = 2u * (lane / 8u) + (lane % 2u), byte = (lane % 8u) / 2u;
  *int15_byte(xq, cols / 32u, b, word * 4u + byte) = (uchar)((q >> 7) & 255);
  *int15_byte(xq, cols / 32u, b, 32u + word * 4u + byte) = (uchar)(q & 127);
  if (lane == 0) blocks[b] = (float2)(step, step * (float)total);
}

// int15_store for value i of rows of row_len values (row_len % 32 == 0), row t's form at xq + t·2·row_len
// bytes and blocks + t·row_len/32 (matvec_x_int15_rows' layout): one row, or a decode batch's rows for
// the dp4a batch kernel, written by the producer of the activation (attention, gated_activation).
inline void int15_store_rows(float v, ulong i, bool live, uint row_len, __global uchar* xq, __global float2* blocks) {
  const ulong row = i / row_len;
  int15_store(v, (uint)(i % row_len), live, row_len, xq + row * 2u * row_len, blocks + row * (row_len / 32u));
}

// Max and sum over each aligned group of 8 lanes.
inline float lanes8_max(float v) {
  for (int m = 1; m < 8; m <<= 1) v = fmax(v, shfl_xor(v, m));
  return v;
}

inline float lanes8_sum(float v) {
  for (int m = 1; m < 8; m <<= 1) v += shfl_xor(v, m);
  return v;
}

// Columns c0..c0+3 (c0 % 4 == 0) held by one work-item, called by whole warps whose aligned groups of
// 8 lanes hold the 32 columns of one block each — a norm's float4 loop, with no second pass over
// memory. Columns c0 and c0+2 are even: adjacent bytes of one word; c0+1 and c0+3 of the next.
inline void int15_store4(float4 v, uint c0, uint cols, __global uchar* xq, __global float2* blocks) {
  const float4 a = fabs(v);
  const float m = lanes8_max(fmax(fmax(a.x, a.y), fmax(a.z, a.w)));
  const float step = m / 16383.0f, inv = m > 0.0f ? 16383.0f / m : 0.0f;
  const int4 q = clamp(convert_int4_rte(v * inv), -16383, 16383);
  const float total = lanes8_sum((float)(q.x + q.y + q.z + q.w));  // exact: |Σ| <= 32 · 16383
  const uint in = c0 % 32u, b = c0 / 32u;
  const int4 h = (q >> 7) & 255, l = q & 127;
  const uint even = 8u * (in / 8u) + (in % 8u) / 2u, nb = cols / 32u;  // word 2·(in/8), byte (in%8)/2; 4 bytes on: odd
  *(__global ushort*)int15_byte(xq, nb, b, even) = (ushort)(h.x | (h.z << 8));
  *(__global ushort*)int15_byte(xq, nb, b, even + 4u) = (ushort)(h.y | (h.w << 8));
  *(__global ushort*)int15_byte(xq, nb, b, 32u + even) = (ushort)(l.x | (l.z << 8));
  *(__global ushort*)int15_byte(xq, nb, b, 36u + even) = (ushort)(l.y | (l.w << 8));
  if (in == 0u) blocks[b] = (float2)(step, step * total);
}

// The form of a row already in global memory, written by this work-group (callers fence first):
// each warp of the work-group (wg_size items, a multiple of 32) takes every n-th block.
inline void int15_row(__global const float* x, uint cols, uint wg_size, __global uchar* xq, __global float2* blocks) {
  const uint lid = get_local_id(0);
  for (uint c = lid; c < cols; c += wg_size) int15_store(x[c], c, true, cols, xq, blocks);
}

// x (cols floats) → the form, for a product whose activation no producer rounded.
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void matvec_x_int15(__global const float* x, uint cols, __global uchar* xq, __global float2* blocks) {
  const uint c = get_global_id(0);
  const bool live = c < cols;  // cols % 32 == 0: a warp is wholly inside or outside
  int15_store(live ? x[c] : 0.0f, c, live, cols, xq, blocks);
}

// Rows of x (n_t rows of cols floats, one a sequence of a batched decode step) → one form each, row t's
// at xq + t · 2·cols bytes and blocks + t · cols/32: the input of matvec_q4_batch_dp4a.
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void matvec_x_int15_rows(__global const float* x, uint cols, __global uchar* xq, __global float2* blocks) {
  const uint c = get_global_id(0), t = get_global_id(1);
  const bool live = c < cols;  // cols % 32 == 0: a warp is wholly inside or outside
  int15_store(live ? x[(ulong)t * cols + c] : 0.0f, c, live, cols, xq + (ulong)t * 2u * cols, blocks + (ulong)t * (cols / 32u));
}
#endif
