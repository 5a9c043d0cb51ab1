// --gpu-layers with no OpenCL platform (the ICD loader pointed at an empty vendor directory): the
// runtime refuses with the reason, nothing crashes. Its own process: the ICD loader reads
// OCL_ICD_VENDORS once.
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "engine/runtime.h"
#include "reference.h"

namespace sluice {
namespace {

class LayerSplitNoDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/config.json");
    const auto empty = std::filesystem::temp_directory_path() / "sluice-no-opencl-vendors";
    std::filesystem::create_directories(empty);
    ::setenv("OCL_ICD_VENDORS", empty.c_str(), 1);
  }
  EngineOptions options(const std::string& backend, const std::string& gpu_layers) {
    EngineOptions o;
    o.model_dir = test::reference_path("models/tiny-code-qwen2").string();
    o.plugin_dir = test::binary_path("lib").string();
    o.backend = backend;
    o.gpu_layers = gpu_layers;
    o.threads = 2;
    o.ctx_size = 64;
    return o;
  }
};

TEST_F(LayerSplitNoDevice, NamedOpenclBackendIsRefusedWithTheProbesReason) {
  auto rt = Runtime::open(options("opencl", "2"));
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.message().find("--gpu-layers"), std::string::npos) << rt.message();
  EXPECT_NE(rt.message().find("opencl"), std::string::npos) << rt.message();
  EXPECT_NE(rt.message().find("not available"), std::string::npos) << rt.message();
}

TEST_F(LayerSplitNoDevice, AutoBackendFindsNoGpuAndSaysHowToNameOne) {
  auto rt = Runtime::open(options("auto", "auto"));
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.message().find("no GPU or accelerator"), std::string::npos) << rt.message();
}

TEST_F(LayerSplitNoDevice, WithoutGpuLayersTheCpuStillRunsTheModel) {
  auto rt = Runtime::open(options("auto", ""));
  ASSERT_TRUE(rt.ok()) << rt.message();
  EXPECT_EQ((*rt)->backend().name(), "cpu");
  auto zero = Runtime::open(options("opencl", "0"));  // no layer offloaded: the CPU runs them all
  ASSERT_TRUE(zero.ok()) << zero.message();
  EXPECT_EQ((*zero)->backend().name(), "cpu");
}

}  // namespace
}  // namespace sluice
