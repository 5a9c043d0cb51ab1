// MLX-format quantized models against HF transformers' float32 goldens computed from the same stored
// weights (dequantized): greedy ids identical, last-position logits within 1e-3 × max|logit|, and the
// held-out window's mean NLL within 2e-3 — the same bounds as the unquantized model.
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


EngineOptions options_for(const std::string& model) { return test::golden_options(model, "cpu", "f32", 2048); }

class QuantizedGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizedGolden, GreedyIdsAndLastLogitsMatchTransformers) {
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

// The same last-position logits through the decode kernels: the prompt fed one token at a time.
TEST_P(QuantizedGolden, TokenByTokenDecodeReachesTheSameLastLogits) {
  const std::string model = GetParam();
  SLUICE_REQUIRE_REFERENCE("models/" + model + "/golden.json");
  auto golden = json::parse_file(test::reference_path("models/" + model + "/golden.json"));
  ASSERT_TRUE(golden.ok()) << golden.message();
  auto opts = options_for(model);
  opts.prefill_size = 1;
  auto rt = Runtime::open(opts);
  ASSERT_TRUE(rt.ok()) << rt.message();
  for (const auto& prompt : (*golden)["prompts"].GetArray()) {
    SequenceState seq;
    std::vector<float> logits;
    ASSERT_TRUE((*rt)->run(seq, test::golden_ids(prompt["ids"]), false, logits).ok());
    (*rt)->release(seq);
    const auto& expected = prompt["last_logits"].GetArray();
    ASSERT_EQ(logits.size(), expected.Size());
    const auto [max_err, max_abs] = test::logit_distance(logits, prompt["last_logits"]);
    EXPECT_LE(max_err, 1e-3 * max_abs) << model << ": prompt " << prompt["text"].GetString();
  }
}

TEST_P(QuantizedGolden, HeldOutWindowMeanNllMatchesTransformers) {
  const std::string model = GetParam();
  SLUICE_REQUIRE_REFERENCE("models/" + model + "/golden.json");
  auto golden = json::parse_file(test::reference_path("models/" + model + "/golden.json"));
  ASSERT_TRUE(golden.ok());
  const auto& eval = (*golden)["nll_eval"];
  auto rt = Runtime::open(options_for(model), 1024);
  ASSERT_TRUE(rt.ok()) << rt.message();
  PerplexityOptions opt;
  opt.ctx = 1024;
  opt.chunks = 1;
  opt.scoring = PerplexityScoring::kAll;
  auto result = compute_perplexity(**rt, test::golden_ids(eval["ids"]), opt);
  ASSERT_TRUE(result.ok()) << result.message();
  EXPECT_EQ(result->tokens_scored, static_cast<int64_t>(eval["nll"].Size()));
  EXPECT_NEAR(result->mean_nll, eval["mean_nll"].GetDouble(), 2e-3);
}

INSTANTIATE_TEST_SUITE_P(Models, QuantizedGolden, ::testing::Values("tiny-code-qwen2-4bit", "tiny-code-qwen2-8bit"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace sluice
