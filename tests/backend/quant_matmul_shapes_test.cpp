// Quantized matmul on the CPU backend across the shapes its kernels split work by: odd output-row counts
// (16-row GEMM tiles, thread ranges), activation row counts on both sides of the decode/prefill switch
// and of the 4-token GEMM tile, group sizes 32 to 512 (int32 folds every 128 columns), every width, and
// activations whose groups differ in scale by orders of magnitude (per-group int16 steps) — all against
// double-precision math on the dequantized weights, with quant_backend_ops_test's bound. (Within one
// group the int16 step follows the group's largest value: a group mixing values 1e4 apart keeps only
// the large ones' precision, as any per-group integer form does; those are not what this pins.)
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend_fixture.h"
#include "quant/affine.h"
#include "reference.h"

namespace sluice::test {

// The default kernels (AVX-512 VNNI where the build has them) and the AVX2 ones on the same machine.
std::vector<BackendUnderTest> backends_under_test() {
  return {BackendUnderTest{"cpu", binary_path("lib"), ""}, BackendUnderTest{"cpu", binary_path("lib"), "", "kernels=avx2"}};
}

namespace {

class QuantMatmulShapes : public BackendOpsTest {
 protected:
  struct QWeight {
    std::vector<float> values;  // dequantized [rows * cols]
    Buffer words, scales, biases;
    sl_weight weight{};
  };
  // From packed words and float parameters (stored as bf16, the MLX form).
  QWeight from_words(const std::vector<uint32_t>& words, std::vector<float> scales, std::vector<float> biases, int bits,
                     int group, uint32_t rows, uint32_t cols) {
    QWeight q;
    const std::size_t wpr = std::size_t(cols) * bits / 32, groups = cols / group;
    std::vector<std::byte> sb(scales.size() * 2), bb(biases.size() * 2);
    quant::store_as(DType::kBF16, scales.data(), scales.size(), sb.data());
    quant::store_as(DType::kBF16, biases.data(), biases.size(), bb.data());
    // The reference uses the parameters as stored (rounded to bf16).
    quant::load_as_f32(DType::kBF16, sb.data(), scales.size(), scales.data());
    quant::load_as_f32(DType::kBF16, bb.data(), biases.size(), biases.data());
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
    s.scale_dtype = SL_DTYPE_BF16;
    s.scales = q.scales.get();
    s.biases = q.biases.get();
    return q;
  }
  QWeight make_quantized(int bits, int group, uint32_t rows, uint32_t cols) {
    const std::vector<float> w = random(std::size_t(rows) * cols, 0.5f, 0.1f);
    const std::size_t wpr = std::size_t(cols) * bits / 32, groups = cols / group;
    std::vector<uint32_t> words(rows * wpr);
    std::vector<float> scales(rows * groups), biases(rows * groups);
    for (uint32_t r = 0; r < rows; ++r)
      quant::quantize_row(w.data() + std::size_t(r) * cols, cols, bits, group, DType::kBF16, words.data() + r * wpr,
                          scales.data() + r * groups, biases.data() + r * groups);
    return from_words(words, scales, biases, bits, group, rows, cols);
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
  void expect_matches(const QWeight& w, const std::vector<float>& x, uint32_t n, const char* what) {
    const uint32_t rows = w.weight.rows, cols = w.weight.cols;
    auto xb = upload(x);
    auto out = zeros(std::size_t(n) * rows);
    sl_error err{};
    ASSERT_EQ(ops().matmul(xb.get(), n, &w.weight, nullptr, out.get(), &err), SL_OK) << err.message;
    const auto got = download(out, std::size_t(n) * rows);
    int failures = 0;
    for (uint32_t t = 0; t < n && failures < 5; ++t)
      for (uint32_t r = 0; r < rows && failures < 5; ++r) {
        double ref = 0, mag = 0;
        for (uint32_t k = 0; k < cols; ++k) {
          const double p = double(x[std::size_t(t) * cols + k]) * w.values[std::size_t(r) * cols + k];
          ref += p;
          mag += std::abs(p);
        }
        const double err_abs = std::abs(got[std::size_t(t) * rows + r] - ref);
        if (err_abs > 2e-5 * mag + 1e-5) ++failures;
        EXPECT_NEAR(got[std::size_t(t) * rows + r], ref, 2e-5 * mag + 1e-5)
            << what << " " << w.weight.bits << "-bit g" << w.weight.group_size << " " << rows << "x" << cols
            << " n=" << n << " token " << t << " row " << r;
      }
  }
};

TEST_P(QuantMatmulShapes, EveryWidthGroupAndTokenCountMatchesTheDequantizedReference) {
  for (int bits : {4, 8, 2, 3, 5, 6})
    for (int group : {32, 64, 128, 256}) {
      for (uint32_t rows : {1u, 17u, 67u}) {
        const uint32_t cols = group == 256 ? 1024 : 896;  // 896: Qwen2-0.5B's hidden size
        auto w = make_quantized(bits, group, rows, cols);
        for (uint32_t n : {1u, 2u, 4u, 5u, 6u, 9u, 21u}) {
          expect_matches(w, activations(n, cols), n, "mixed-scale activations");
          if (HasFailure()) return;
        }
      }
    }
}

TEST_P(QuantMatmulShapes, LongRowsAndManyTokensMatchTheDequantizedReference) {
  for (int bits : {4, 8}) {
    auto w = make_quantized(bits, 64, 35, 4864);  // Qwen2-0.5B's down_proj width, a partial last tile
    expect_matches(w, activations(37, 4864), 37, "long rows");
  }
}

// Largest codes against activations at full scale and one sign: the int32 sums are at their largest,
// for groups up to 512 (folded every 128 columns).
TEST_P(QuantMatmulShapes, LargestCodesAndActivationsDoNotOverflow) {
  for (int bits : {4, 8})
    for (int group : {64, 128, 512}) {
      const uint32_t rows = 19, cols = 1024;
      const std::size_t wpr = std::size_t(cols) * bits / 32, groups = cols / group;
      std::vector<uint32_t> words(rows * wpr, 0xffffffffu);
      std::vector<float> scales(rows * groups, 0.01f), biases(rows * groups, -1.0f);
      auto w = from_words(words, scales, biases, bits, group, rows, cols);
      for (uint32_t n : {1u, 7u}) {
        std::vector<float> x(std::size_t(n) * cols, 3.0f);
        expect_matches(w, x, n, "largest codes");
        for (auto& v : x) v = -3.0f;
        expect_matches(w, x, n, "largest codes, negative activations");
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Backend, QuantMatmulShapes, ::testing::ValuesIn(backends_under_test()), backend_test_name);

}  // namespace
}  // namespace sluice::test
