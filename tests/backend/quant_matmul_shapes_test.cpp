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

#include "quant_weight_test.h"
#include "reference.h"

namespace sluice::test {

// The default kernels (AVX-512 VNNI where the build has them) and the AVX2 ones on the same machine.
std::vector<BackendUnderTest> backends_under_test() {
  return {BackendUnderTest{"cpu", binary_path("lib"), ""}, BackendUnderTest{"cpu", binary_path("lib"), "", "kernels=avx2"}};
}

namespace {

class QuantMatmulShapes : public QuantWeightTest {
 protected:
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

// An output of over 1 MiB (300 tokens × 1040 rows): the CPU's prefill GEMM writes it with non-temporal
// stores, unit by unit, except the last unit of 16 rows (a partial one: copied as before).
TEST_P(QuantMatmulShapes, LargeOutputsMatchTheDequantizedReference) {
  for (int bits : {4, 8}) {
    auto w = make_quantized(bits, 64, 1040, 256);
    expect_matches(w, activations(300, 256), 300, "large output");
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
