// The forward pass on the OpenCL backend against HF transformers' float32 goldens: greedy ids
// identical and last-position logits within 1e-3 × max|logit|, with the f32 and f16 KV caches on the
// device. Skips with a message where no OpenCL device is present or the reference data is absent.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/runtime.h"
#include "plugin/plugin_registry.h"
#include "golden.h"
#include "golden_run.h"
#include "opencl_probe.h"
#include "reference.h"
#include "util/json.h"

namespace sluice {
namespace {


EngineOptions opencl_options(const std::string& model, const std::string& codec) {
  return test::golden_options(model, "opencl", codec, 512);
}

struct Case {
  std::string model, codec;
};

class OpenclGoldenModel : public ::testing::TestWithParam<Case> {};

TEST_P(OpenclGoldenModel, GreedyIdsAndLastLogitsMatchTransformers) {
  const auto& [model, codec] = GetParam();
  SLUICE_REQUIRE_REFERENCE("models/" + model + "/golden.json");
  if (auto why = test::opencl_unavailable(); !why.empty()) GTEST_SKIP() << "OpenCL backend unavailable: " << why;
  auto golden = json::parse_file(test::reference_path("models/" + model + "/golden.json"));
  ASSERT_TRUE(golden.ok()) << golden.message();
  auto rt = Runtime::open(opencl_options(model, codec));
  ASSERT_TRUE(rt.ok()) << rt.message();
  ASSERT_EQ((*rt)->backend().name(), "opencl");
  auto engine = Engine::create(opencl_options(model, codec));
  ASSERT_TRUE(engine.ok()) << engine.message();
  // The f16 cache rounds K and V: its logits are held to greedy ids only.
  test::expect_golden_prompts(**rt, **engine, *golden, model, codec == "f32");
}

INSTANTIATE_TEST_SUITE_P(Models, OpenclGoldenModel,
                         ::testing::Values(Case{"zoo/llama", "f32"}, Case{"zoo/qwen2", "f32"}, Case{"zoo/qwen3", "f32"},
                                           Case{"zoo/mistral", "f32"}, Case{"zoo/gemma2", "f32"}, Case{"zoo/gemma3_text", "f32"},
                                           Case{"zoo/phi3", "f32"}, Case{"zoo2/deepseek_v3", "f32"}, Case{"tiny-code-qwen2", "f32"},
                                           Case{"tiny-code-qwen2", "f16"}),
                         [](const auto& info) {
                           std::string n = info.param.model + "_" + info.param.codec;
                           for (auto& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace sluice
