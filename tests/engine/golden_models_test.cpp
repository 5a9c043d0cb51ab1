// The forward pass against HF transformers' float32 goldens (../shared/models/*/golden.json):
// greedy ids identical, last-position logits within 1e-3 × max|logit|, and the held-out NLL.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/perplexity.h"
#include "engine/runtime.h"
#include "golden.h"
#include "golden_run.h"
#include "reference.h"
#include "util/json.h"

namespace sluice {
namespace {


EngineOptions options_for(const std::string& model, const std::string& codec = "f32") {
  return test::golden_options(model, "cpu", codec, 2048);
}

class GoldenModel : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenModel, GreedyIdsAndLastLogitsMatchTransformers) {
  const std::string model = GetParam();
  SLUICE_REQUIRE_REFERENCE("models/" + model + "/golden.json");
  auto golden = json::parse_file(test::reference_path("models/" + model + "/golden.json"));
  ASSERT_TRUE(golden.ok()) << golden.message();
  auto rt = Runtime::open(options_for(model));
  ASSERT_TRUE(rt.ok()) << rt.message();
  auto engine = Engine::create(options_for(model));
  ASSERT_TRUE(engine.ok()) << engine.message();
  test::expect_golden_prompts(**rt, **engine, *golden, model);
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenModel,
                         ::testing::Values("zoo/llama", "zoo/qwen2", "zoo/qwen3", "zoo/mistral", "zoo/gemma2", "zoo/gemma3_text", "zoo/phi3",
                                           "zoo2/gemma4_text", "zoo2/gemma4_text_moe",
                                           "zoo2/qwen3_5_text", "zoo2/qwen3_5_moe_text", "zoo2/deepseek_v3",
                                           "tiny-code-qwen2"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(GoldenPerplexity, HeldOutWindowMeanNllMatchesTransformers) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/golden.json");
  auto golden = json::parse_file(test::reference_path("models/tiny-code-qwen2/golden.json"));
  ASSERT_TRUE(golden.ok());
  const auto& eval = (*golden)["nll_eval"];
  const auto ids = test::golden_ids(eval["ids"]);
  auto rt = Runtime::open(options_for("tiny-code-qwen2"), 1024);
  ASSERT_TRUE(rt.ok()) << rt.message();
  PerplexityOptions opt;
  opt.ctx = 1024;
  opt.chunks = 1;
  opt.scoring = PerplexityScoring::kAll;
  auto result = compute_perplexity(**rt, ids, opt);
  ASSERT_TRUE(result.ok()) << result.message();
  EXPECT_EQ(result->tokens_scored, static_cast<int64_t>(eval["nll"].Size()));
  EXPECT_NEAR(result->mean_nll, eval["mean_nll"].GetDouble(), 2e-3);
}

TEST(GoldenPerplexity, HalfPrecisionCacheKeepsGreedyIds) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/golden.json");
  auto golden = json::parse_file(test::reference_path("models/tiny-code-qwen2/golden.json"));
  ASSERT_TRUE(golden.ok());
  auto engine = Engine::create(options_for("tiny-code-qwen2", "f16"));
  ASSERT_TRUE(engine.ok()) << engine.message();
  for (const auto& prompt : (*golden)["prompts"].GetArray()) {
    GenerationRequest req;
    req.prompt_ids = test::golden_ids(prompt["ids"]);
    req.max_tokens = static_cast<int>(prompt["greedy_ids"].Size());
    req.sampling.temperature = 0;
    req.ignore_eos = true;
    EXPECT_EQ((*engine)->generate(req).ids, test::golden_ids(prompt["greedy_ids"]));
  }
}

TEST(ChunkedPrefill, SmallChunksGiveTheSameLogitsAsOnePass) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/golden.json");
  auto whole = Runtime::open(options_for("tiny-code-qwen2"));
  auto opts = options_for("tiny-code-qwen2");
  opts.prefill_size = 7;  // odd size: chunks straddle KV pages
  auto chunked = Runtime::open(opts);
  ASSERT_TRUE(whole.ok() && chunked.ok());
  std::vector<int32_t> ids;
  for (int i = 0; i < 100; ++i) ids.push_back((i * 37 + 11) % 8000);
  SequenceState a, b;
  std::vector<float> la, lb;
  ASSERT_TRUE((*whole)->run(a, ids, true, la).ok());
  ASSERT_TRUE((*chunked)->run(b, ids, true, lb).ok());
  ASSERT_EQ(la.size(), lb.size());
  double max_err = 0;
  for (std::size_t i = 0; i < la.size(); ++i) max_err = std::max(max_err, double(std::abs(la[i] - lb[i])));
  EXPECT_LT(max_err, 1e-3);
}

}  // namespace
}  // namespace sluice
