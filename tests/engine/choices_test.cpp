// A request's n choices (the prompt computed once, its pages shared by the forked sequences) and
// logit_bias (through plain sampling, speculative decoding and decoding a token ahead), with the
// bundled model on the CPU backend.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "choice_results.h"
#include "greedy_requests.h"
#include "model/model_config.h"
#include "plugin/plugin_registry.h"
#include "reference.h"

namespace sluice {
namespace {

using test::ChoiceResults;
using test::greedy;
using test::run_choices;
using test::prompt_of;

std::unique_ptr<Engine> make_engine(int parallel = 4, const std::string& decode_ahead = "off", const std::string& draft = "",
                                    const std::string& backend = "cpu") {
  EngineOptions o;
  o.model_dir = test::source_path("models/tiny-code-qwen2").string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = backend;
  o.threads = 2;
  o.ctx_size = 512;
  o.parallel = parallel;
  o.prefill_size = 64;
  o.decode_ahead = decode_ahead;
  o.draft = draft;
  auto e = Engine::create(o);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(*e) : nullptr;
}

GenerationRequest with_n(GenerationRequest r, int n) {
  r.n = n;
  return r;
}

void wait_idle(Engine& engine) {
  for (int i = 0; i < 200 && engine.metrics().active_sequences != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

TEST(Choices, GreedyChoicesAreIdenticalToOneChoiceAndThePromptIsPrefilledOnce) {
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  const auto prompt = prompt_of(3, 37);  // two full blocks and a partial one: the fork copies a page
  const auto one = make_engine()->generate(greedy(prompt, 12));
  ASSERT_EQ(one.ids.size(), 12u);

  const auto got = run_choices(*engine, with_n(greedy(prompt, 12), 3));
  ASSERT_EQ(got.results.size(), 3u);
  for (int c = 0; c < 3; ++c) {
    const auto& r = got.results.at(c);
    EXPECT_EQ(r.choice, c);
    EXPECT_EQ(r.finish, FinishReason::kLength);
    EXPECT_EQ(r.ids, one.ids) << "choice " << c;
    EXPECT_EQ(got.streamed.at(c), r.ids) << "choice " << c;
  }
  wait_idle(*engine);
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.prefilled_tokens_total, prompt.size()) << "the prompt ran through the model once";
  EXPECT_EQ(m.forked_sequences_total, 2u);
  EXPECT_EQ(got.results.at(1).stats.cached_tokens, 37);
  EXPECT_EQ(got.results.at(0).stats.cached_tokens, 0);
  EXPECT_EQ(m.kv_pages_in_use, 0u);
}

// The fork's page copy on a device backend (kv_copy_page queued with the passes), greedy a token
// ahead (on: the n choices decode ahead together once forked).
TEST(Choices, OpenClForkedChoicesEqualOneChoice) {
  {
    PluginRegistry probe;
    probe.scan(test::binary_path("lib"));
    if (!probe.find(SL_PLUGIN_BACKEND, "opencl")) GTEST_SKIP() << "no usable OpenCL backend here (see `sluice plugins`)";
  }
  auto engine = make_engine(4, "on", "", "opencl");
  auto alone = make_engine(1, "off", "", "opencl");
  ASSERT_TRUE(engine && alone);
  const auto prompt = prompt_of(11, 45);
  const auto want = alone->generate(greedy(prompt, 10)).ids;
  const auto got = run_choices(*engine, with_n(greedy(prompt, 10), 3));
  ASSERT_EQ(got.results.size(), 3u);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(got.results.at(c).ids, want) << "choice " << c;
  EXPECT_EQ(engine->metrics().forked_sequences_total, 2u);
  EXPECT_GT(engine->metrics().ahead_rows_total, engine->metrics().ahead_steps_total) << "the choices decoded ahead together";
}

TEST(Choices, ChoicesBeyondTheFreeSlotsWaitAndReuseThePromptsBlocks) {
  auto engine = make_engine(1);
  ASSERT_TRUE(engine);
  const auto prompt = prompt_of(4, 37);
  const auto one = make_engine(1)->generate(greedy(prompt, 10));
  const auto got = run_choices(*engine, with_n(greedy(prompt, 10), 3));
  ASSERT_EQ(got.results.size(), 3u);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(got.results.at(c).ids, one.ids) << "choice " << c;
  wait_idle(*engine);
  // Choices 1 and 2 ran one after another in the single slot, each taking the prompt's two published
  // blocks from the prefix cache and computing its last 5 positions.
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.prefilled_tokens_total, 37u + 2 * 5);
  EXPECT_EQ(m.forked_sequences_total, 0u);
  EXPECT_EQ(got.results.at(2).stats.cached_tokens, 32);
}

// Each run on an engine of its own: a second run on the same engine would take the prompt's first
// block from the prefix cache and compute only its last positions — a product of 4 rows where the first
// run's was of 20 (the CPU backend's few-rows kernels and its GEMM sum in different orders), and at
// temperature 1.5 a last-bit difference can move a draw (perf/NOTES.md, 2026-11-29).
TEST(Choices, SeededChoicesDifferFromEachOtherAndAreReproduced) {
  auto engine = make_engine(), engine2 = make_engine(), engine3 = make_engine();
  ASSERT_TRUE(engine && engine2 && engine3);
  GenerationRequest r = greedy(prompt_of(5, 20), 16);
  r.sampling.temperature = 1.5f;
  r.sampling.seed = 1234;
  r.n = 4;
  const auto first = run_choices(*engine, r);
  const auto again = run_choices(*engine2, r);
  ASSERT_EQ(first.results.size(), 4u);
  ASSERT_EQ(again.results.size(), 4u);
  int distinct_pairs = 0;
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(first.results.at(c).ids, again.results.at(c).ids) << "choice " << c;
    for (int d = c + 1; d < 4; ++d) distinct_pairs += first.results.at(c).ids != first.results.at(d).ids;
  }
  EXPECT_GE(distinct_pairs, 5) << "choices share a seed";
  // Choice 0 samples as a request with n = 1 and the same seed does.
  GenerationRequest single = r;
  single.n = 1;
  EXPECT_EQ(engine3->generate(single).ids, first.results.at(0).ids);
}

TEST(Choices, ForkedChoicesSharePagesAndCancellingEndsThemAll) {
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  auto req = std::make_shared<GenerationRequest>(greedy(prompt_of(6, 160), 300));  // ten full blocks
  req->n = 4;
  std::atomic<int> seen{0};
  std::mutex mu;
  std::vector<GenerationResult> results;
  std::promise<void> all_done;
  req->on_token = [&](const TokenEvent&) { return ++seen < 100000; };
  req->on_done = [&](const GenerationResult& r) {
    std::lock_guard lock(mu);
    results.push_back(r);
    if (results.size() == 4) all_done.set_value();
  };
  ASSERT_TRUE(engine->submit(req).ok());
  while (seen.load() < 4 * 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Unshared, four sequences would hold 4 × 11 pages; forked they hold the prompt's 10 once and a
  // page each for what they generate.
  EXPECT_LE(engine->metrics().kv_pages_in_use, 10u + 4 * 2);
  EXPECT_EQ(engine->metrics().active_sequences, 4);
  req->cancelled->store(true);
  all_done.get_future().wait();
  for (const auto& r : results) EXPECT_EQ(r.finish, FinishReason::kCancelled) << "choice " << r.choice;
  wait_idle(*engine);
  EXPECT_EQ(engine->metrics().kv_pages_in_use, 0u);
}

TEST(Choices, SubmitRefusesNOutsideItsBounds) {
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  for (int n : {0, -1, GenerationRequest::kMaxChoices + 1}) {
    auto r = std::make_shared<GenerationRequest>(greedy(prompt_of(1, 5), 2));
    r->n = n;
    EXPECT_FALSE(engine->submit(r).ok()) << "n = " << n;
  }
  // generate() returns one result: it runs one choice.
  EXPECT_EQ(engine->generate(with_n(greedy(prompt_of(1, 5), 2), 2)).finish, FinishReason::kError);
}

TEST(LogitBias, MinusHundredBansTheGreedyTokenAndPlusHundredForcesOne) {
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  const auto prompt = prompt_of(7, 24);
  const auto plain = engine->generate(greedy(prompt, 8));
  ASSERT_EQ(plain.ids.size(), 8u);
  const int32_t favourite = plain.ids.front();

  GenerationRequest banned = greedy(prompt, 8);
  banned.sampling.logit_bias = {{favourite, -100.0f}};
  const auto without = engine->generate(banned);
  ASSERT_EQ(without.ids.size(), 8u);
  EXPECT_NE(without.ids.front(), favourite);
  EXPECT_EQ(std::count(without.ids.begin(), without.ids.end(), favourite), 0);

  GenerationRequest forced = greedy(prompt, 6);
  forced.top_logprobs = 1;
  const int32_t chosen = 4242;
  forced.sampling.logit_bias = {{chosen, 100.0f}};
  auto req = std::make_shared<GenerationRequest>(forced);
  std::vector<TokenEvent> events;
  std::promise<GenerationResult> done;
  req->on_token = [&](const TokenEvent& e) { events.push_back(e); return true; };
  req->on_done = [&](const GenerationResult& r) { done.set_value(r); };
  ASSERT_TRUE(engine->submit(req).ok());
  const auto result = done.get_future().get();
  EXPECT_EQ(result.ids, std::vector<int32_t>(6, chosen));
  // Logprobs are those of the biased distribution: the forced token is all but certain.
  ASSERT_EQ(events.size(), 6u);
  EXPECT_GT(events.front().logprob, -0.01f);
}

TEST(LogitBias, SampledRequestsNeverDrawABannedToken) {
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  GenerationRequest r = greedy(prompt_of(8, 16), 40);
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 3;
  r.sampling.seed = 9;
  const auto plain = engine->generate(r);
  std::vector<std::pair<int32_t, float>> bans;
  for (int32_t id : plain.ids)
    if (std::none_of(bans.begin(), bans.end(), [&](const auto& b) { return b.first == id; })) bans.emplace_back(id, -100.0f);
  r.sampling.logit_bias = bans;
  const auto biased = engine->generate(r);
  ASSERT_EQ(biased.ids.size(), 40u);
  for (int32_t id : biased.ids)
    EXPECT_TRUE(std::none_of(bans.begin(), bans.end(), [&](const auto& b) { return b.first == id; })) << "drew banned " << id;
}

// Decoding a token ahead picks on the device, where no bias applies: a biased request keeps to the
// host path, and speculative verification judges guesses against the biased logits.
TEST(LogitBias, DecodeAheadAndSpeculativeDecodingHonourTheBias) {
  auto plain = make_engine();
  auto ahead = make_engine(4, "on");
  auto spec = make_engine(4, "off", "ngram");
  ASSERT_TRUE(plain && ahead && spec);
  // A repetitive prompt, so the n-gram drafter has guesses to make.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 6; ++i)
    for (int32_t t : {500, 501, 502, 503}) prompt.push_back(t);
  const auto unbiased = plain->generate(greedy(prompt, 16));
  GenerationRequest r = greedy(prompt, 16);
  for (int32_t id : unbiased.ids) r.sampling.logit_bias.emplace_back(id, -100.0f);
  const auto want = plain->generate(r);
  ASSERT_EQ(want.ids.size(), 16u);
  for (int32_t id : want.ids) EXPECT_EQ(std::count(unbiased.ids.begin(), unbiased.ids.end(), id), 0);
  EXPECT_EQ(ahead->generate(r).ids, want.ids);
  EXPECT_EQ(spec->generate(r).ids, want.ids);
  EXPECT_GT(spec->metrics().draft_tokens_total, 0u) << "the drafter made no guess to judge";
  EXPECT_EQ(ahead->metrics().ahead_steps_total, 0u) << "a biased request decoded on the device";
}

TEST(LogitBias, IdsOutsideTheVocabularyAndNonFiniteBiasesAreRefused) {
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  const int32_t vocab = engine->model_config().vocab_size;
  for (auto bias : std::vector<std::pair<int32_t, float>>{{vocab, 1.0f}, {-1, 1.0f}, {5, std::numeric_limits<float>::quiet_NaN()}}) {
    auto r = std::make_shared<GenerationRequest>(greedy(prompt_of(1, 5), 2));
    r->sampling.logit_bias = {bias};
    EXPECT_FALSE(engine->submit(r).ok()) << bias.first;
  }
}

}  // namespace
}  // namespace sluice
