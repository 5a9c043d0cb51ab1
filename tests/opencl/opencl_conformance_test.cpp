// The conformance checks `sluice conformance` runs (core/conformance), against the OpenCL plugin:
// every op, every weight form (f32/f16/bf16 and 2..8-bit affine), device and host-fallback KV codecs —
// each value against double-precision reference math and against the CPU backend plugin's value on the
// same inputs (the CPU backend held to the reference math too).
#include <cstdio>

#include <gtest/gtest.h>

#include "conformance/conformance.h"
#include "plugin/plugin_registry.h"
#include "reference.h"

namespace sluice {
namespace {

TEST(OpenclConformance, EveryOpMatchesReferenceMathAndTheCpuBackend) {
  PluginRegistry registry;
  registry.scan(test::binary_path("lib"));
  const PluginRecord* rec = registry.find(SL_PLUGIN_BACKEND, "opencl");
  if (!rec) {
    for (const auto& r : registry.records())
      if (r.name == "opencl") GTEST_SKIP() << "OpenCL backend unavailable: " << r.status;
    FAIL() << "no sluice-backend-opencl.so in " << test::binary_path("lib");
  }
  const PluginRecord* cpu_rec = registry.find(SL_PLUGIN_BACKEND, "cpu");
  ASSERT_NE(cpu_rec, nullptr) << "no sluice-backend-cpu.so in " << test::binary_path("lib");
  auto backend = BackendHandle::open(static_cast<const sl_backend_api*>(rec->descriptor->api), "opencl", "", 2);
  if (!backend) GTEST_SKIP() << backend.message();
  auto cpu = BackendHandle::open(static_cast<const sl_backend_api*>(cpu_rec->descriptor->api), "cpu", "", 2);
  ASSERT_TRUE(cpu) << cpu.message();
  conformance::Options options;
  options.quick = true;  // PoCL: keep CI short
  options.against = cpu->get();
  const auto results = conformance::run_all(**backend, options);
  EXPECT_GE(results.size(), 20u);
  for (const auto& r : results) {
    EXPECT_TRUE(r.passed()) << r.op << ": " << r.status << " (" << r.detail << ")";
    // Every check runs here, the per-layer caches' too (K and V of other widths, window pages, state).
    EXPECT_EQ(r.status.rfind("skipped", 0), std::string::npos) << r.op << " should run on OpenCL";
    if (r.status != "pass") continue;
    // The CPU backend offers every op the OpenCL one does except 7-bit products (and plans); every op it
    // runs is compared value by value.
    if (r.op == "matmul q7") {
      EXPECT_EQ(r.against, "unsupported") << r.op;
      continue;
    }
    if (r.op == "graph plans") {  // the CPU backend offers none: the plan is checked against OpenCL's own graph_compute
      EXPECT_EQ(r.against, "not implemented (optional)") << r.op;
      EXPECT_GT(r.cases, 0) << r.op;
      continue;
    }
    EXPECT_EQ(r.against, "compared") << r.op;
    EXPECT_GT(r.compared, 0) << r.op;
    EXPECT_LE(r.against_worst_ratio, 1.0) << r.op;
    std::printf("%-44s %8d values, max |opencl - cpu| %10.3g, / (both bounds) %8.3g; err/bound %8.3g\n", r.op.c_str(), r.compared,
                r.against_max_diff, r.against_worst_ratio, r.worst_ratio);
  }
}

}  // namespace
}  // namespace sluice
