// The conformance runner's comparison with a second backend (core/conformance/runner.h), on the CPU
// backend plugin: against itself every op's values are compared and identical; and the comparison
// fails an op whose values differ between the passes by more than the sum of their bounds, whose
// cases differ in number, or whose second backend fails reference math — while an op that backend
// does not offer runs against reference math alone.
#include <functional>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "conformance/conformance.h"
#include "conformance/runner.h"
#include "plugin/plugin_registry.h"
#include "reference.h"

namespace sluice {
namespace {

class CpuConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto& rec = registry_.load_file(test::binary_path("lib/sluice-backend-cpu.so"));
    ASSERT_TRUE(rec.loaded) << rec.status;
    const auto* api = static_cast<const sl_backend_api*>(rec.descriptor->api);
    auto a = BackendHandle::open(api, "cpu", "", 2), b = BackendHandle::open(api, "cpu", "", 2);
    ASSERT_TRUE(a) << a.message();
    ASSERT_TRUE(b) << b.message();
    under_test_ = std::move(*a);
    other_ = std::move(*b);
    options_.against = other_.get();
  }

  // One op whose body gets the pass number (1: the second backend, 2: the backend under test).
  conformance::OpResult run_op(const std::function<void(conformance::Runner&, int pass)>& body,
                               const conformance::Needs& needs = {}) {
    conformance::Runner r(*under_test_, options_);
    int pass = 0;
    r.op("op", needs, [&] { body(r, ++pass); });
    EXPECT_EQ(r.results.size(), 1u);
    return r.results.at(0);
  }

  PluginRegistry registry_;
  std::unique_ptr<BackendHandle> under_test_, other_;
  conformance::Options options_;
};

TEST_F(CpuConformance, AgainstItselfEveryOpIsComparedAndIdentical) {
  options_.quick = true;
  const auto results = conformance::run_all(*under_test_, options_);
  int compared_ops = 0;
  for (const auto& r : results) {
    EXPECT_TRUE(r.passed()) << r.op << ": " << r.status << " (" << r.detail << ")";
    if (r.status.rfind("skipped", 0) == 0) {
      EXPECT_EQ(r.compared, 0) << r.op;
      continue;
    }
    EXPECT_EQ(r.against, "compared") << r.op;
    EXPECT_GT(r.compared, 0) << r.op;
    // Same inputs, same kernels, same thread count: the CPU backend gives the same bits.
    EXPECT_EQ(r.against_max_diff, 0.0) << r.op;
    ++compared_ops;
  }
  EXPECT_GE(compared_ops, 40);
}

TEST_F(CpuConformance, BothPassesDrawTheSameInputs) {
  const auto r = run_op([](conformance::Runner& r, int) {
    r.new_case("random values");
    for (float x : r.random(100)) r.check(x, x, 1e-30, "value");
  });
  EXPECT_EQ(r.status, "pass") << r.detail;
  EXPECT_EQ(r.compared, 100);
  EXPECT_EQ(r.against_max_diff, 0.0);
}

TEST_F(CpuConformance, ValuesFurtherApartThanBothBoundsFail) {
  // Each pass is within its bound (1) of its own reference value, but the two values are 3 apart.
  const auto r = run_op([](conformance::Runner& r, int pass) {
    r.new_case("one value");
    const double value = pass == 1 ? 0.0 : 3.0;
    r.check(value, value, 1.0, "value");
  });
  EXPECT_EQ(r.status, "FAIL");
  EXPECT_EQ(r.worst_ratio, 0.0);
  EXPECT_DOUBLE_EQ(r.against_max_diff, 3.0);
  EXPECT_DOUBLE_EQ(r.against_worst_ratio, 1.5);
  EXPECT_NE(r.detail.find("cpu got 0"), std::string::npos) << r.detail;
  // Within the sum of the bounds (2): a pass.
  const auto close = run_op([](conformance::Runner& r, int pass) {
    r.new_case("one value");
    r.check(pass == 1 ? 1.0 : -0.9, 0.0, 1.0, "value");
  });
  EXPECT_EQ(close.status, "pass") << close.detail;
  EXPECT_DOUBLE_EQ(close.against_worst_ratio, 0.95);
}

TEST_F(CpuConformance, CasesThatDifferInNumberFail) {
  for (int extra_on : {1, 2}) {
    const auto r = run_op([&](conformance::Runner& r, int pass) {
      r.new_case("values");
      r.check(1.0, 1.0, 1.0, "first");
      if (pass == extra_on) r.check(1.0, 1.0, 1.0, "second");
    });
    EXPECT_EQ(r.status, "FAIL") << "extra value on pass " << extra_on;
    EXPECT_NE(r.detail.find("the cases differ between the backends"), std::string::npos) << r.detail;
  }
}

TEST_F(CpuConformance, ASecondBackendThatFailsReferenceMathFailsTheOpInItsName) {
  const auto r = run_op([](conformance::Runner& r, int pass) {
    r.new_case("one value");
    r.check(pass == 1 ? 5.0 : 0.0, 0.0, 1.0, "value");
  });
  EXPECT_EQ(r.status, "FAIL");
  EXPECT_EQ(r.against, "FAIL");
  EXPECT_EQ(r.worst_ratio, 0.0);  // the backend under test met the reference
  EXPECT_EQ(r.detail.rfind("on cpu (the backend compared with): one value, value: got 5", 0), 0u) << r.detail;
}

TEST_F(CpuConformance, AnOpTheSecondBackendLacksRunsAgainstReferenceMathAlone) {
  const BackendHandle* other = other_.get();
  int passes = 0;
  const auto r = run_op(
      [&](conformance::Runner& r, int) {
        ++passes;
        r.new_case("one value");
        r.check(1.0, 1.0, 1.0, "value");
      },
      [other](const BackendHandle& be) { return &be == other ? std::string("not implemented") : std::string(); });
  EXPECT_EQ(passes, 1);
  EXPECT_EQ(r.status, "pass") << r.detail;
  EXPECT_EQ(r.against, "not implemented");
  EXPECT_EQ(r.compared, 0);
  EXPECT_EQ(r.cases, 1);
}

}  // namespace
}  // namespace sluice
