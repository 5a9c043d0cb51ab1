// With no OpenCL platform (the ICD loader pointed at an empty vendor directory), the plugin's probe
// fails with a reason, the loader records it as skipped, and nothing crashes. Its own process: the
// ICD loader reads OCL_ICD_VENDORS once.
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "plugin/plugin_registry.h"
#include "reference.h"

namespace sluice {
namespace {

TEST(OpenclNoDevice, ProbeFailsWithAReasonAndThePluginIsSkipped) {
  const auto empty = std::filesystem::temp_directory_path() / "sluice-no-opencl-vendors";
  std::filesystem::create_directories(empty);
  ::setenv("OCL_ICD_VENDORS", empty.c_str(), 1);
  PluginRegistry registry;
  registry.scan(test::binary_path("lib"));
  bool seen = false;
  for (const auto& r : registry.records()) {
    if (r.name != "opencl") continue;
    seen = true;
    EXPECT_FALSE(r.loaded);
    EXPECT_NE(r.status.find("OpenCL"), std::string::npos) << r.status;
  }
  EXPECT_TRUE(seen);
  EXPECT_EQ(registry.find(SL_PLUGIN_BACKEND, "opencl"), nullptr);
  EXPECT_NE(registry.find(SL_PLUGIN_BACKEND, "cpu"), nullptr) << "the CPU backend still loads";
}

}  // namespace
}  // namespace sluice
