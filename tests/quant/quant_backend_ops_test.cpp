// Quantized matmul and embedding on a backend plugin, for every width (2, 3, 4, 5, 6, 8), group size
// (32, 64, 128) and scale dtype, against double-precision math on the dequantized values — through
// the decode path (1 and 3 activation rows) and the prefill path (9 rows). Written for any backend.
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/affine.h"
#include "quant_weight_test.h"
#include "reference.h"

namespace sluice::test {

std::vector<BackendUnderTest> backends_under_test() { return {BackendUnderTest{"cpu", binary_path("lib"), ""}}; }

namespace {

struct QuantCase {
  int bits, group;
  DType scale_dtype;
};

class QuantOpsTest : public QuantWeightTest {
 protected:
  QWeight make_quantized(QuantCase c, uint32_t rows, uint32_t cols) {
    return QuantWeightTest::make_quantized(c.bits, c.group, rows, cols, c.scale_dtype);
  }
  bool supported(int bits, sl_op op = SL_OP_MATMUL) {
    sl_weight form{};
    form.struct_size = sizeof(form);
    form.dtype = SL_DTYPE_U32;
    form.bits = static_cast<uint32_t>(bits);
    form.group_size = 32;
    form.rows = 32;
    form.cols = 128;
    return backend().runs_weight(op, form);
  }
};

std::vector<QuantCase> all_cases() {
  std::vector<QuantCase> v;
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128}) v.push_back({bits, group, DType::kBF16});
  for (int bits : {4, 8, 3}) {
    v.push_back({bits, 64, DType::kF16});
    v.push_back({bits, 64, DType::kF32});
  }
  return v;
}

TEST_P(QuantOpsTest, MatmulOnPackedWeightsMatchesTheDequantizedReference) {
  for (const QuantCase c : all_cases()) {
    if (!supported(c.bits)) continue;
    const uint32_t rows = 67, cols = 384;  // odd row count: thread ranges and 4-row tails
    auto w = make_quantized(c, rows, cols);
    for (uint32_t n : {1u, 3u, 9u}) {
      const std::vector<float> x = random(std::size_t(n) * cols);
      auto xb = upload(x);
      auto out = zeros(std::size_t(n) * rows);
      sl_error err{};
      ASSERT_EQ(ops().matmul(xb.get(), n, &w.weight, nullptr, out.get(), &err), SL_OK) << err.message;
      const auto got = download(out, std::size_t(n) * rows);
      for (uint32_t t = 0; t < n; ++t)
        for (uint32_t r = 0; r < rows; ++r) {
          double ref = 0, mag = 0;
          for (uint32_t k = 0; k < cols; ++k) {
            const double p = double(x[t * cols + k]) * w.values[std::size_t(r) * cols + k];
            ref += p;
            mag += std::abs(p);
          }
          EXPECT_NEAR(got[t * rows + r], ref, 2e-5 * mag + 1e-5)
              << c.bits << "-bit g" << c.group << " " << to_string(c.scale_dtype) << " n=" << n << " row " << r;
        }
    }
  }
}

TEST_P(QuantOpsTest, EmbeddingLookupDequantizesOneRow) {
  for (const QuantCase c : all_cases()) {
    if (!supported(c.bits, SL_OP_EMBED)) continue;
    const uint32_t vocab = 50, dim = 128;
    auto table = make_quantized(c, vocab, dim);
    const std::vector<int32_t> ids = {0, 49, 7, 7};
    auto out = zeros(ids.size() * dim);
    sl_error err{};
    ASSERT_EQ(ops().embed(&table.weight, ids.data(), uint32_t(ids.size()), out.get(), &err), SL_OK) << err.message;
    const auto got = download(out, ids.size() * dim);
    for (std::size_t i = 0; i < ids.size(); ++i)
      for (uint32_t k = 0; k < dim; ++k)
        ASSERT_NEAR(got[i * dim + k], table.values[std::size_t(ids[i]) * dim + k], 1e-6 * (1 + std::abs(got[i * dim + k])))
            << c.bits << "-bit g" << c.group;
  }
}

TEST_P(QuantOpsTest, MalformedQuantizedWeightsAreErrorsNotCrashes) {
  if (!supported(4)) GTEST_SKIP() << "backend does not run 4-bit weights";
  auto w = make_quantized({4, 64, DType::kBF16}, 8, 128);
  auto x = zeros(128);
  auto out = zeros(8);
  auto expect_refused = [&](sl_weight bad, const char* why) {
    sl_error err{};
    EXPECT_NE(ops().matmul(x.get(), 1, &bad, nullptr, out.get(), &err), SL_OK) << why;
    EXPECT_STRNE(err.message, "") << why;
    const int32_t id = 0;
    EXPECT_NE(ops().embed(&bad, &id, 1, out.get(), &err), SL_OK) << why;
  };
  sl_weight bad = w.weight;
  bad.bits = 7;
  expect_refused(bad, "7 bits");
  bad = w.weight;
  bad.rows = 9;  // one row more than the words hold
  expect_refused(bad, "rows past the words");
  bad = w.weight;
  bad.group_size = 32;  // twice the scales the buffer holds
  expect_refused(bad, "group past the scales");
  bad = w.weight;
  bad.cols = 100;
  expect_refused(bad, "cols not a multiple of the group");
  bad = w.weight;
  bad.scales = nullptr;
  expect_refused(bad, "no scales");
}

INSTANTIATE_TEST_SUITE_P(Backend, QuantOpsTest, ::testing::ValuesIn(backends_under_test()), backend_test_name);

}  // namespace
}  // namespace sluice::test
