#pragma once
// Quantized weights for the backend op tests: random rows quantized to MLX affine codes (or packed
// words given as they are), uploaded to the backend, with the dequantized values the reference math
// uses; and activations whose groups differ in scale by orders of magnitude.
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend_fixture.h"
#include "quant/affine.h"

namespace sluice::test {

class QuantWeightTest : public BackendOpsTest {
 protected:
  struct QWeight {
    std::vector<float> values;  // dequantized [rows * cols]
    Buffer words, scales, biases;
    sl_weight weight{};
  };
  // From packed words and float parameters, stored as `scale_dtype` (bf16: the MLX form).
  QWeight from_words(const std::vector<uint32_t>& words, std::vector<float> scales, std::vector<float> biases, int bits,
                     int group, uint32_t rows, uint32_t cols, DType scale_dtype = DType::kBF16) {
    QWeight q;
    const std::size_t wpr = std::size_t(cols) * bits / 32, groups = cols / group, psize = dtype_size(scale_dtype);
    std::vector<std::byte> sb(scales.size() * psize), bb(biases.size() * psize);
    quant::store_as(scale_dtype, scales.data(), scales.size(), sb.data());
    quant::store_as(scale_dtype, biases.data(), biases.size(), bb.data());
    // The reference uses the parameters as stored (rounded to their dtype).
    quant::load_as_f32(scale_dtype, sb.data(), scales.size(), scales.data());
    quant::load_as_f32(scale_dtype, bb.data(), biases.size(), biases.data());
    q.values.resize(std::size_t(rows) * cols);
    for (uint32_t r = 0; r < rows; ++r)
      quant::dequantize_row(words.data() + r * wpr, scales.data() + r * groups, biases.data() + r * groups, cols, bits,
                            group, q.values.data() + std::size_t(r) * cols);
    q.words = upload_bytes(words.data(), words.size() * 4);
    q.scales = upload_bytes(sb.data(), sb.size());
    q.biases = upload_bytes(bb.data(), bb.size());
    sl_weight& s = q.weight;
    s.struct_size = sizeof(s);
    s.data = q.words.get();
    s.dtype = SL_DTYPE_U32;
    s.rows = rows;
    s.cols = cols;
    s.bits = static_cast<uint32_t>(bits);
    s.group_size = static_cast<uint32_t>(group);
    s.scale_dtype = scale_dtype == DType::kF32 ? SL_DTYPE_F32 : scale_dtype == DType::kF16 ? SL_DTYPE_F16 : SL_DTYPE_BF16;
    s.scales = q.scales.get();
    s.biases = q.biases.get();
    return q;
  }
  QWeight make_quantized(int bits, int group, uint32_t rows, uint32_t cols, DType scale_dtype = DType::kBF16) {
    const std::vector<float> w = random(std::size_t(rows) * cols, 0.5f, 0.1f);
    const std::size_t wpr = std::size_t(cols) * bits / 32, groups = cols / group;
    std::vector<uint32_t> words(rows * wpr);
    std::vector<float> scales(rows * groups), biases(rows * groups);
    for (uint32_t r = 0; r < rows; ++r)
      quant::quantize_row(w.data() + std::size_t(r) * cols, cols, bits, group, scale_dtype, words.data() + r * wpr,
                          scales.data() + r * groups, biases.data() + r * groups);
    return from_words(words, scales, biases, bits, group, rows, cols, scale_dtype);
  }
  // Activations whose runs of 128 columns have scales from 1e-2 to 1e1 (so groups of 256 and 512 mix
  // scales), the first 32 columns all zero (a group of zeros), and a common offset.
  std::vector<float> activations(std::size_t n, uint32_t cols) {
    std::vector<float> x = random(n * cols, 1.0f, 0.3f);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::size_t column = i % cols;
      x[i] *= std::pow(10.0f, float(int(column / 128 % 4) - 2));
      if (column < 32) x[i] = 0.0f;
    }
    return x;
  }
};

}  // namespace sluice::test
