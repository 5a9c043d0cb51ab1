// The conformance checks `sluice conformance` runs (core/conformance), against the OpenCL plugin:
// every op, every weight form (f32/f16/bf16 and 2..8-bit affine), device and host-fallback KV codecs.
#include <gtest/gtest.h>

#include "conformance/conformance.h"
#include "plugin/plugin_registry.h"
#include "reference.h"

namespace sluice {
namespace {

TEST(OpenclConformance, EveryOpMatchesReferenceMath) {
  PluginRegistry registry;
  registry.scan(test::binary_path("lib"));
  const PluginRecord* rec = registry.find(SL_PLUGIN_BACKEND, "opencl");
  if (!rec) {
    for (const auto& r : registry.records())
      if (r.name == "opencl") GTEST_SKIP() << "OpenCL backend unavailable: " << r.status;
    FAIL() << "no sluice-backend-opencl.so in " << test::binary_path("lib");
  }
  auto backend = BackendHandle::open(static_cast<const sl_backend_api*>(rec->descriptor->api), "opencl", "", 2);
  if (!backend) GTEST_SKIP() << backend.message();
  conformance::Options options;
  options.quick = true;  // PoCL: keep CI short
  const auto results = conformance::run_all(**backend, options);
  EXPECT_GE(results.size(), 20u);
  for (const auto& r : results) {
    EXPECT_TRUE(r.passed()) << r.op << ": " << r.status << " (" << r.detail << ")";
    EXPECT_EQ(r.status.rfind("skipped", 0), std::string::npos) << r.op << " should run on OpenCL";
  }
}

}  // namespace
}  // namespace sluice
