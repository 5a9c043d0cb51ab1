// Helpers shared by every Sluice OpenCL program: reading weights of each stored form as float.
// Weights arrive as a byte pointer plus a form code (sl_dtype); quantized weights are a bit stream of
// `bits`-bit codes per row (low bits first; for 2/4/8 bits exactly 32/bits codes per uint32 word),
// with one scale and one bias per group of group_size columns.

#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2

inline float bf16_to_float(ushort h) { return as_float(((uint)h) << 16); }

// MXFP4 weights (ABI 2.3): the sixteen e2m1 values of a 4-bit code (bit 3 the sign), and a block's
// scale byte s as 2^(s - 127) — the exponent field, or for s = 0 the subnormal 2^-127 (which a device
// without single-precision denormals flushes to zero).
__constant float MXFP4_E2M1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
inline float mxfp4_scale(uchar s) { return as_float(s ? ((uint)s) << 23 : 0x00400000u); }
// The eight values of a word of codes (nibble k: column k, low nibble first), scaled.
inline float8 mxfp4_eight(uint w, float s) {
  return (float8)(MXFP4_E2M1[w & 15u], MXFP4_E2M1[(w >> 4) & 15u], MXFP4_E2M1[(w >> 8) & 15u], MXFP4_E2M1[(w >> 12) & 15u],
                  MXFP4_E2M1[(w >> 16) & 15u], MXFP4_E2M1[(w >> 20) & 15u], MXFP4_E2M1[(w >> 24) & 15u], MXFP4_E2M1[w >> 28]) * s;
}

inline float load_value(__global const uchar* base, uint dtype, ulong i) {
  if (dtype == DT_F32) return ((__global const float*)base)[i];
  if (dtype == DT_F16) return vload_half(i, (__global const half*)base);
  return bf16_to_float(((__global const ushort*)base)[i]);
}

// The code of value `index` in a row of `bits`-bit codes starting at `words`.
inline uint quant_code(__global const uint* words, ulong index, uint bits) {
  const ulong bit = index * bits;
  const ulong w = bit >> 5;
  const uint shift = (uint)(bit & 31u);
  uint v = words[w] >> shift;
  if (shift + bits > 32u) v |= words[w + 1] << (32u - shift);
  return v & ((1u << bits) - 1u);
}

// Dequantized element (r, c) of a quantized weight.
inline float quant_value(__global const uint* words, ulong words_per_row, uint bits, __global const uchar* scales,
                         __global const uchar* biases, uint scale_dtype, uint groups_per_row, uint group_size, uint r,
                         uint c) {
  const uint q = quant_code(words + (ulong)r * words_per_row, c, bits);
  const ulong g = (ulong)r * groups_per_row + c / group_size;
  return load_value(scales, scale_dtype, g) * (float)q + load_value(biases, scale_dtype, g);
}

// act(g) of a gated MLP (sl_activation): 0 SiLU, 1 GELU (tanh approximation), 2 GELU (erf), 3 sigmoid.
inline float activation_of(float g, uint activation) {
  if (activation == 0u) return g / (1.0f + exp(-g));
  if (activation == 1u) return 0.5f * g * (1.0f + tanh(0.7978845608028654f * (g + 0.044715f * g * g * g)));
  if (activation == 4u) return 1.0f / (1.0f + exp(-g));  // SL_ACT_SIGMOID
  return 0.5f * g * (1.0f + erf(g * 0.7071067811865476f));
}

// The batch products' parts (matvec_q4_batch, matvec_q4_batch_dp4a, matvec_q4_batch_mma): up to three
// products of the same x in one launch (q/k/v, gate/up). Part p's weight lies in the launch's shared
// buffers at its own offsets; it has its rows, its own output (rows of out_stride values) and bias
// (bit p of has_bias). The launch's blocks of weight rows are the parts' blocks one after another:
// part p's end at block_end (each block's chunks of activation rows are consecutive work-groups). One
// product is one part; row0: where part 0's rows start in its output (a segment of a weight larger
// than one device allocation).
#define BATCH_PART_ARGS(p)                                                                                     \
  ulong w_off##p, ulong s_off##p, ulong b_off##p, uint rows##p, uint block_end##p, __global float *out##p,    \
      uint out_stride##p, __global const uchar *bias##p, ulong bias_off##p
#define BATCH_PARTS_ARGS BATCH_PART_ARGS(0), BATCH_PART_ARGS(1), BATCH_PART_ARGS(2), uint has_bias, uint bias_dtype, uint row0_of_part0
#define BATCH_PART_PASS(p) w_off##p, s_off##p, b_off##p, rows##p, block_end##p, out##p, out_stride##p, bias##p, bias_off##p
#define BATCH_PARTS_PASS BATCH_PART_PASS(0), BATCH_PART_PASS(1), BATCH_PART_PASS(2), has_bias, bias_dtype, row0_of_part0
#define BATCH_PICK(p, name) ((p) == 0u ? name##0 : (p) == 1u ? name##1 : name##2)

// Block `block` of the launch as its part's: the block's index in the part and the part's fields.
typedef struct {
  uint block, rows, out_stride, row0, biased;
  ulong w_off, s_off, b_off;
  __global float* out;
  __global const uchar* bias;  // at the part's bias (read only where biased)
} BatchBlock;

inline BatchBlock batch_block(uint block, BATCH_PARTS_ARGS) {
  BatchBlock b;
  const uint part = block < block_end0 ? 0u : block < block_end1 ? 1u : 2u;
  b.block = block - (part == 0u ? 0u : part == 1u ? block_end0 : block_end1);
  b.rows = BATCH_PICK(part, rows);
  b.out_stride = BATCH_PICK(part, out_stride);
  b.row0 = part == 0u ? row0_of_part0 : 0u;
  b.biased = (has_bias >> part) & 1u;
  b.w_off = BATCH_PICK(part, w_off);
  b.s_off = BATCH_PICK(part, s_off);
  b.b_off = BATCH_PICK(part, b_off);
  b.out = BATCH_PICK(part, out);
  b.bias = BATCH_PICK(part, bias) + BATCH_PICK(part, bias_off);
  return b;
}
