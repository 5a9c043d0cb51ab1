#pragma once
// MLX affine quantization, host side: the quantizer's rounding and the bit packing, shared by
// `sluice quantize`, `sluice make-model` and the tests.
//
// Per group of `group` consecutive values along a row (as MLX computes it, in float32):
//   the edge is whichever of min and max has the larger magnitude (min on ties goes to max);
//   scale = max((max - min) / (2^bits - 1), 1e-7), negated when the edge is the max;
//   q0 = round(edge / scale); when q0 != 0: scale = edge / q0 and bias = edge (so 0.0 is exactly
//   representable), else bias = 0;
//   scale and bias are rounded to their storage dtype (bf16 for bf16 weights) and the codes are
//   q = clamp(round((w - bias) / scale), 0, 2^bits - 1) with those rounded values; round is
//   to nearest, ties to even. Checked bit for bit against models/tiny-code-qwen2-{4,8}bit.
// Codes are packed as one little-endian bit stream per row, low bits first, in uint32 words.
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/safetensors.h"

namespace sluice::quant {

inline bool supported_bits(int bits) { return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8; }
inline bool supported_group(int group) { return group == 32 || group == 64 || group == 128; }

float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);  // round to nearest even
// A float rounded through the storage dtype (F32, F16 or BF16) and back.
float round_to(DType dtype, float v);
// Stores n floats as dtype (F32, F16 or BF16) into out (n * dtype_size bytes).
void store_as(DType dtype, const float* v, std::size_t n, std::byte* out);
// Reads n values of dtype (F32, F16 or BF16) as floats.
void load_as_f32(DType dtype, const std::byte* src, std::size_t n, float* out);

// Quantizes one row of cols values (cols a multiple of group): writes cols * bits / 32 words, and
// cols / group scales and biases, already rounded through scale_dtype.
void quantize_row(const float* w, std::size_t cols, int bits, int group, DType scale_dtype, uint32_t* words,
                  float* scales, float* biases);
// The inverse: cols floats from the packed row and its groups' scales and biases.
void dequantize_row(const uint32_t* words, const float* scales, const float* biases, std::size_t cols, int bits,
                    int group, float* out);

}  // namespace sluice::quant
