// The CPU backend's opt-in int8-activation decode products (`activations=int8`, quant_int8.cpp) held to
// their own bound: each activation group is rounded to steps of max|x_g| / 127, so a product may differ
// from double-precision math on the dequantized weights by Σ_c |w_c| · step_g(c) / 2 (and float
// rounding). The bound is the documented one (quant_kernels.h, ActivationForm); the same cases through
// the default int16 form stay within 2e-5 of the magnitude, which shows the mode really changed the
// arithmetic. Also: the options a backend is created with are checked (an unknown one, a bad prefetch).
#include <cmath>
#include <random>
#include <vector>

#include "quant_weight_test.h"
#include "reference.h"
#include "plugin/backend_handle.h"
#include "plugin/plugin_registry.h"

namespace sluice::test {

std::vector<BackendUnderTest> backends_under_test() {
  return {BackendUnderTest{"cpu", binary_path("lib"), "", "activations=int8 prefetch=1024"}};
}

namespace {

// The CPU backend created with `options`, or why not.
Result<std::unique_ptr<BackendHandle>> open_cpu(PluginRegistry& registry, const std::string& options) {
  for (const auto& r : registry.records())
    if (r.kind == "backend" && r.name == "cpu" && r.loaded)
      return BackendHandle::open(static_cast<const sl_backend_api*>(r.descriptor->api), "cpu", "", 1, options);
  return make_error("no CPU backend plugin in " + binary_path("lib").string());
}

// Whether this machine runs the int8 kernels (AVX-512 VNNI in the CPU and the build).
bool int8_kernels_here() {
  PluginRegistry registry;
  registry.scan(binary_path("lib"));
  return open_cpu(registry, "activations=int8").ok();
}

class Int8Activations : public QuantWeightTest {
 protected:
  // Checks every output against the bound; returns the largest error as a share of the bound.
  double expect_within_bound(const QWeight& c, uint32_t n, int group) {
    const uint32_t rows = c.weight.rows, cols = c.weight.cols;
    const auto x = activations(n, cols);
    auto xb = upload(x);
    auto out = zeros(std::size_t(n) * rows);
    sl_error err{};
    EXPECT_EQ(ops().matmul(xb.get(), n, &c.weight, nullptr, out.get(), &err), SL_OK) << err.message;
    const auto got = download(out, std::size_t(n) * rows);
    double worst = 0;
    for (uint32_t t = 0; t < n; ++t) {
      std::vector<double> step(cols / group);
      for (std::size_t g = 0; g < step.size(); ++g) {
        double m = 0;
        for (int i = 0; i < group; ++i) m = std::max(m, double(std::abs(x[std::size_t(t) * cols + g * group + i])));
        step[g] = m / 127.0;
      }
      for (uint32_t r = 0; r < rows; ++r) {
        double ref = 0, mag = 0, bound = 0;
        for (uint32_t k = 0; k < cols; ++k) {
          const double wv = c.values[std::size_t(r) * cols + k], xv = x[std::size_t(t) * cols + k];
          ref += wv * xv;
          mag += std::abs(wv * xv);
          bound += std::abs(wv) * step[k / group] / 2;
        }
        const double e = std::abs(got[std::size_t(t) * rows + r] - ref);
        EXPECT_LE(e, bound + 2e-5 * mag + 1e-5) << c.weight.bits << "-bit g" << group << " " << rows << "x" << cols << " n=" << n
                                                << " token " << t << " row " << r;
        worst = std::max(worst, e / bound);
        if (HasFailure()) return worst;
      }
    }
    return worst;
  }
};

TEST_P(Int8Activations, ProductsStayWithinTheInt8Bound) {
  if (!int8_kernels_here()) GTEST_SKIP() << "no AVX-512 VNNI here: the option is refused (see the next test)";
  double worst = 0;
  for (int bits : {4, 8})
    for (int group : {32, 64, 128})
      for (uint32_t rows : {1u, 17u, 67u})
        for (uint32_t n : {1u, 2u, 4u, 7u}) {  // 7: two passes of the four-row kernels
          auto c = make_quantized(bits, group, rows, group == 128 && bits == 8 ? 1024 : 896);
          worst = std::max(worst, expect_within_bound(c, n, group));
          if (HasFailure()) return;
        }
  // Random activations use a good part of the bound: the products were rounded to int8, not int16
  // (whose error would be ~1/258 of this bound).
  EXPECT_GT(worst, 0.01) << "the int8 rounding should show";
}

TEST_P(Int8Activations, LongGroupsAndRowsStayWithinTheBound) {
  if (!int8_kernels_here()) GTEST_SKIP() << "no AVX-512 VNNI here";
  for (int bits : {4, 8}) {
    auto c = make_quantized(bits, 256, 35, 4864 / 256 * 256);  // groups of several runs, folded once per group
    expect_within_bound(c, 3, 256);
  }
}

INSTANTIATE_TEST_SUITE_P(Backend, Int8Activations, ::testing::ValuesIn(backends_under_test()), backend_test_name);

// Options outside the table are refused with a message naming them; int8 where the kernels are absent too.
TEST(CpuBackendOptions, UnknownOrMalformedOptionsAreRefusedByName) {
  PluginRegistry registry;
  registry.scan(binary_path("lib"));
  for (const char* bad : {"activations=int4", "prefetch=", "prefetch=-1", "prefetch=99999999", "turbo=yes", "kernels=sse2"}) {
    auto be = open_cpu(registry, bad);
    ASSERT_FALSE(be.ok()) << bad;
    EXPECT_NE(be.message().find(std::string(bad).substr(0, std::string(bad).find('='))), std::string::npos) << be.message();
  }
  auto fine = open_cpu(registry, "activations=int16 prefetch=0");
  EXPECT_TRUE(fine.ok()) << fine.message();
  // int8 activations run only in the AVX-512 kernels: asked for with the AVX2 ones, refused.
  auto both = open_cpu(registry, "kernels=avx2 activations=int8");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.message().find("kernels=avx2"), std::string::npos) << both.message();
  if (!int8_kernels_here()) {
    auto be = open_cpu(registry, "activations=int8");
    EXPECT_NE(be.message().find("AVX-512 VNNI"), std::string::npos) << be.message();
  }
}

}  // namespace
}  // namespace sluice::test
