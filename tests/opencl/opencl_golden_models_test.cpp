// The forward pass on the OpenCL backend against HF transformers' float32 goldens: greedy ids
// identical and last-position logits within 1e-3 × max|logit|, with the f32 and f16 KV caches on the
// device — Gemma 2 and 3's sliding layers keeping only their window's pages (SL_KV_WINDOW) — and
// Gemma 2's window pages against keeping every position and against a reused prefix. Skips with a
// message where no OpenCL device is present or the reference data is absent.
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
  bool sliding_first = false;  // layer 0 is a sliding-window layer (the cache keeps its window's pages alone), the last full
};

class OpenclGoldenModel : public ::testing::TestWithParam<Case> {};

TEST_P(OpenclGoldenModel, GreedyIdsAndLastLogitsMatchTransformers) {
  const auto& [model, codec, sliding_first] = GetParam();
  SLUICE_REQUIRE_REFERENCE("models/" + model + "/golden.json");
  if (auto why = test::opencl_unavailable(); !why.empty()) GTEST_SKIP() << "OpenCL backend unavailable: " << why;
  auto golden = json::parse_file(test::reference_path("models/" + model + "/golden.json"));
  ASSERT_TRUE(golden.ok()) << golden.message();
  auto rt = Runtime::open(opencl_options(model, codec));
  ASSERT_TRUE(rt.ok()) << rt.message();
  ASSERT_EQ((*rt)->backend().name(), "opencl");
  if (sliding_first) {
    EXPECT_EQ((*rt)->kv().layer_kind(0), uint32_t(SL_KV_WINDOW));
    const int last = (*rt)->config().num_layers - 1;  // Gemma's last layer is full (2 and 3 alternate; 4 ends on one)
    EXPECT_EQ((*rt)->kv().layer_kind(static_cast<uint32_t>(last)), uint32_t(SL_KV_FULL));
  }
  // MLA (DeepSeek-V3) runs with the latent cache: the OpenCL backend takes HEAD_MATMUL.
  if ((*rt)->config().mla.enabled()) {
    EXPECT_TRUE((*rt)->config().mla.latent_cache);
  }
  auto engine = Engine::create(opencl_options(model, codec));
  ASSERT_TRUE(engine.ok()) << engine.message();
  // The f16 cache rounds K and V: its logits are held to greedy ids only.
  test::expect_golden_prompts(**rt, **engine, *golden, model, codec == "f32");
}

INSTANTIATE_TEST_SUITE_P(Models, OpenclGoldenModel,
                         ::testing::Values(Case{"zoo/llama", "f32"}, Case{"zoo/qwen2", "f32"}, Case{"zoo/qwen3", "f32"},
                                           Case{"zoo/mistral", "f32"}, Case{"zoo/gemma2", "f32", true},
                                           Case{"zoo/gemma3_text", "f32", true},
                                           Case{"zoo/phi3", "f32"}, Case{"zoo2/gemma4_text", "f32", true},
                                           Case{"zoo2/gemma4_text_moe", "f32", true}, Case{"tiny-code-qwen2", "f32"},
                                           Case{"tiny-code-qwen2", "f16"}, Case{"zoo2/gpt_oss", "f32", true},
                                           Case{"zoo2/qwen3_5_text", "f32"}, Case{"zoo2/qwen3_5_moe_text", "f32"},
                                           Case{"zoo2/deepseek_v3", "f32"}),
                         [](const auto& info) {
                           std::string n = info.param.model + "_" + info.param.codec;
                           for (auto& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

GenerationRequest greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

// As tests/engine/kv_layers_test.cpp's Gemma case on the CPU: zoo/gemma2 (window 8) with its sliding
// layer's window pages released as a sequence grows, against the cache that keeps every position,
// and a second request that reuses 48 tokens of the first (with their window pages) against
// computing them.
TEST(OpenclKvLayers, GemmaWindowPagesEqualKeepingEveryPositionAndAReusedPrefix) {
  SLUICE_REQUIRE_REFERENCE("models/zoo/gemma2/config.json");
  if (auto why = test::opencl_unavailable(); !why.empty()) GTEST_SKIP() << "OpenCL backend unavailable: " << why;
  EngineOptions released = opencl_options("zoo/gemma2", "f32"), kept = released;
  released.prefill_size = 16;  // several chunks: pages released between them
  kept.prefill_size = 16;
  kept.kv_window_pages = false;
  auto warm = Engine::create(released);
  auto full = Engine::create(kept);
  ASSERT_TRUE(warm.ok()) << warm.message();
  ASSERT_TRUE(full.ok()) << full.message();
  EXPECT_GT((*warm)->metrics().kv_window_pages_total, 0u);
  EXPECT_EQ((*full)->metrics().kv_window_pages_total, 0u);
  std::vector<int32_t> first;
  for (int j = 0; j < 56; ++j) first.push_back(3 + (j * 37) % 200);
  const auto a = (*warm)->generate(greedy(first, 12)), b = (*full)->generate(greedy(first, 12));
  ASSERT_EQ(a.finish, FinishReason::kLength) << a.error;
  EXPECT_EQ(a.ids, b.ids);
  auto shared = first;
  shared.resize(50);
  for (int j = 0; j < 7; ++j) shared.push_back(100 + j);
  const auto reused = (*warm)->generate(greedy(shared, 12));
  const auto computed = (*full)->generate(greedy(shared, 12));
  EXPECT_GT(reused.stats.cached_tokens, 0);
  EXPECT_EQ(reused.ids, computed.ids);
}

}  // namespace
}  // namespace sluice
