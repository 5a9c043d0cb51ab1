// Greedy decoding a token ahead (engine/greedy_ahead.h): the choice left on the device and the next
// step issued before it is read must give exactly the tokens of reading every step's logits — at the
// Runtime (step by step against the logits' argmax, the model's goldens) and through the engine
// (limits, stops, cancellation, a request arriving mid-generation, pages given back), on the CPU
// backend (--decode-ahead on) and on OpenCL (PoCL here; auto turns it on where ops are queued).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/greedy_ahead.h"
#include "engine/runtime.h"
#include "greedy_requests.h"
#include "opencl_probe.h"
#include "reference.h"
#include "util/json.h"

namespace sluice {
namespace {

bool opencl_built() { return test::opencl_unavailable().empty(); }

EngineOptions options(const std::string& backend, const std::string& ahead, int parallel = 1) {
  EngineOptions o;
  o.model_dir = test::source_path("models/tiny-code-qwen2").string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = backend;
  o.threads = 2;
  o.ctx_size = 256;
  o.parallel = parallel;
  o.prefill_size = 64;
  o.decode_ahead = ahead;
  return o;
}

std::unique_ptr<Engine> make_engine(const std::string& backend, const std::string& ahead, int parallel = 1) {
  auto e = Engine::create(options(backend, ahead, parallel));
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(*e) : nullptr;
}

using test::greedy;
using test::prompt_of;

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// At the Runtime: each token GreedyAhead takes is the argmax of the logits the plain pass gives for
// the same history, with two steps in flight; dropping the last step leaves the position where the
// taken tokens end.
void expect_steps_equal_the_logits_argmax(const std::string& backend) {
  auto rt = Runtime::open(options(backend, "on"));
  ASSERT_TRUE(rt.ok()) << rt.message();
  ASSERT_TRUE(GreedyAhead::available(**rt));
  const auto prompt = prompt_of(3, 21);
  std::vector<float> logits;
  SequenceState plain, ahead;
  ASSERT_TRUE((*rt)->run(plain, prompt, false, logits).ok());
  std::vector<int32_t> want{argmax(logits)};
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE((*rt)->run(plain, std::vector<int32_t>{want.back()}, false, logits).ok());
    want.push_back(argmax(logits));
  }
  ASSERT_TRUE((*rt)->run(ahead, std::vector<int32_t>(prompt.begin(), prompt.end() - 1), false, logits).ok());
  std::vector<int32_t> got;
  {
    GreedyAhead steps(**rt, ahead, ahead.n_past);
    ASSERT_TRUE(steps.issue(prompt.back()).ok());
    for (int i = 0; i < 13; ++i) {
      ASSERT_TRUE(steps.issue_next().ok());
      EXPECT_EQ(steps.in_flight(), 2);
      auto t = steps.take();
      ASSERT_TRUE(t.ok()) << t.message();
      got.push_back(*t);
    }
    steps.drop();  // the step after the last taken token
    EXPECT_EQ(steps.in_flight(), 0);
    EXPECT_EQ(steps.next_position(), static_cast<int32_t>(prompt.size()) + 12);
  }
  EXPECT_EQ(got, want);
  (*rt)->release(plain);
  (*rt)->release(ahead);
}

TEST(GreedyAhead, CpuStepsEqualTheLogitsArgmax) { expect_steps_equal_the_logits_argmax("cpu"); }

TEST(GreedyAhead, OpenClStepsEqualTheLogitsArgmax) {
  if (!opencl_built()) GTEST_SKIP() << "no usable OpenCL backend here (see `sluice plugins`)";
  expect_steps_equal_the_logits_argmax("opencl");
}

TEST(GreedyAhead, AutoIsOnWhereOpsAreQueuedAndOffOnTheCpu) {
  auto cpu = Runtime::open(options("cpu", "auto"));
  ASSERT_TRUE(cpu.ok()) << cpu.message();
  EXPECT_FALSE(GreedyAhead::available(**cpu));  // its ops run as they are called: nothing to overlap
  auto off = Runtime::open(options("cpu", "off"));
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(GreedyAhead::available(**off));
  auto bad = Runtime::open(options("cpu", "sometimes"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--decode-ahead"), std::string::npos) << bad.message();
  if (!opencl_built()) return;
  auto cl = Runtime::open(options("opencl", "auto"));
  ASSERT_TRUE(cl.ok()) << cl.message();
  EXPECT_TRUE(GreedyAhead::available(**cl));
}

// A model split across backends cannot keep the choice on one device: "on" is refused at start.
TEST(GreedyAhead, OnIsRefusedForAModelSplitAcrossBackends) {
  if (!opencl_built()) GTEST_SKIP() << "no usable OpenCL backend here (see `sluice plugins`)";
  auto o = options("opencl", "on");
  o.gpu_layers = "1";  // the first layer on OpenCL, the rest and the head on the CPU
  auto rt = Runtime::open(o);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.message().find("--decode-ahead on"), std::string::npos) << rt.message();
}

// The engine's greedy requests give the model's goldens (HF transformers) with the steps a token ahead.
void expect_goldens(const std::string& backend, const std::string& ahead) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/golden.json");
  auto golden = json::parse_file(test::reference_path("models/tiny-code-qwen2/golden.json"));
  ASSERT_TRUE(golden.ok());
  auto engine = make_engine(backend, ahead);
  ASSERT_TRUE(engine);
  for (const auto& p : (*golden)["prompts"].GetArray()) {
    std::vector<int32_t> ids, want;
    for (const auto& v : p["ids"].GetArray()) ids.push_back(v.GetInt());
    for (const auto& v : p["greedy_ids"].GetArray()) want.push_back(v.GetInt());
    EXPECT_EQ(engine->generate(greedy(ids, static_cast<int>(want.size()))).ids, want);
  }
}

TEST(GreedyAhead, CpuEngineMatchesTheGoldens) { expect_goldens("cpu", "on"); }

TEST(GreedyAhead, OpenClEngineMatchesTheGoldens) {
  if (!opencl_built()) GTEST_SKIP() << "no usable OpenCL backend here (see `sluice plugins`)";
  expect_goldens("opencl", "auto");
}

// max_tokens is met exactly however many steps were in flight, and equals decoding without ahead.
TEST(GreedyAhead, LengthLimitsAreExactAndEqualDecodingWithout) {
  auto ahead = make_engine("cpu", "on");
  auto plain = make_engine("cpu", "off");
  ASSERT_TRUE(ahead && plain);
  for (int max_tokens : {1, 2, 3, 17}) {
    const auto request = greedy(prompt_of(max_tokens, 9), max_tokens);
    const auto a = ahead->generate(request), p = plain->generate(request);
    EXPECT_EQ(a.finish, FinishReason::kLength);
    EXPECT_EQ(a.ids.size(), static_cast<std::size_t>(max_tokens));
    EXPECT_EQ(a.ids, p.ids) << max_tokens << " tokens";
  }
}

// A stop (the edge's stop strings) or a cancellation with a step in flight ends the request at that
// token; the step issued past it is dropped, its pages are given back, and the next request is right.
TEST(GreedyAhead, StopsAndCancellationDropTheStepInFlight) {
  auto engine = make_engine("cpu", "on");
  auto plain = make_engine("cpu", "off");
  ASSERT_TRUE(engine && plain);
  const auto full = plain->generate(greedy(prompt_of(5, 12), 20)).ids;
  ASSERT_EQ(full.size(), 20u);

  auto stopped = greedy(prompt_of(5, 12), 20);
  int seen = 0;
  stopped.on_token = [&](const TokenEvent&) { return ++seen < 6; };
  const auto s = engine->generate(stopped);
  EXPECT_EQ(s.finish, FinishReason::kStop);
  EXPECT_EQ(s.ids, std::vector<int32_t>(full.begin(), full.begin() + 6));

  auto cancelled = greedy(prompt_of(5, 12), 20);
  std::shared_ptr<std::atomic<bool>> flag = cancelled.cancelled;
  int count = 0;
  cancelled.on_token = [&](const TokenEvent&) {
    if (++count == 4) flag->store(true);
    return true;
  };
  const auto c = engine->generate(cancelled);
  EXPECT_EQ(c.finish, FinishReason::kCancelled);
  EXPECT_EQ(c.ids, std::vector<int32_t>(full.begin(), full.begin() + 4));

  EXPECT_EQ(engine->generate(greedy(prompt_of(5, 12), 20)).ids, full);
  for (int i = 0; i < 100 && engine->metrics().active_sequences != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine->metrics().kv_bytes_used, 0u);
}

// A request that arrives while another decodes a token ahead: the first leaves the ahead loop with
// its steps in flight taken in, the two are batched, and each still gets exactly its own output.
TEST(GreedyAhead, ARequestArrivingMidGenerationGetsItsOwnOutput) {
  auto plain = make_engine("cpu", "off");
  auto engine = make_engine("cpu", "on", 2);
  ASSERT_TRUE(plain && engine);
  const auto first = greedy(prompt_of(7, 15), 40), second = greedy(prompt_of(8, 23), 12);
  const auto want_first = plain->generate(first).ids, want_second = plain->generate(second).ids;

  auto a = std::make_shared<GenerationRequest>(first);
  std::promise<GenerationResult> a_done, b_done;
  std::promise<void> fifth;
  int a_tokens = 0;
  a->on_token = [&](const TokenEvent&) {
    if (++a_tokens == 5) fifth.set_value();
    return true;
  };
  a->on_done = [&](const GenerationResult& r) { a_done.set_value(r); };
  auto b = std::make_shared<GenerationRequest>(second);
  b->on_done = [&](const GenerationResult& r) { b_done.set_value(r); };
  ASSERT_TRUE(engine->submit(a).ok());
  fifth.get_future().wait();
  ASSERT_TRUE(engine->submit(b).ok());
  const auto ra = a_done.get_future().get(), rb = b_done.get_future().get();
  EXPECT_EQ(ra.ids, want_first);
  EXPECT_EQ(rb.ids, want_second);
}

// Several greedy requests at once decode a token ahead together (one step a row each): each gets
// exactly its output alone — with different lengths, one stopped by its caller and one cancelled
// while steps are in flight — the ahead steps held several rows, and every page goes back.
void expect_greedy_group_equals_each_alone(const std::string& backend, const std::string& ahead) {
  auto plain = make_engine(backend, "off");
  auto engine = make_engine(backend, ahead, 4);
  ASSERT_TRUE(plain && engine);
  std::vector<GenerationRequest> requests = {greedy(prompt_of(7, 15), 30), greedy(prompt_of(8, 23), 12), greedy(prompt_of(5, 12), 20),
                                             greedy(prompt_of(9, 10), 25)};
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : requests) want.push_back(plain->generate(r).ids);
  want[2].resize(6);  // request 2 is stopped by its caller after 6 tokens
  want[3].resize(9);  // request 3 is cancelled at its 9th token
  // All four queued before the engine takes any, so they prefill together and then decode as a group.
  std::vector<std::shared_ptr<GenerationRequest>> live;
  std::vector<std::promise<GenerationResult>> done(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto r = std::make_shared<GenerationRequest>(requests[i]);
    if (i == 2) {
      auto seen = std::make_shared<int>(0);
      r->on_token = [seen](const TokenEvent&) { return ++*seen < 6; };
    }
    if (i == 3) {
      auto seen = std::make_shared<int>(0);
      auto flag = r->cancelled;
      r->on_token = [seen, flag](const TokenEvent&) {
        if (++*seen == 9) flag->store(true);
        return true;
      };
    }
    r->on_done = [&done, i](const GenerationResult& g) { done[i].set_value(g); };
    live.push_back(r);
  }
  for (auto& r : live) ASSERT_TRUE(engine->submit(r).ok());
  for (std::size_t i = 0; i < live.size(); ++i) {
    const auto got = done[i].get_future().get();
    EXPECT_EQ(got.ids, want[i]) << "request " << i;
  }
  const EngineMetrics m = engine->metrics();
  EXPECT_GT(m.ahead_steps_total, 0u);
  EXPECT_GT(m.ahead_rows_total, m.ahead_steps_total) << "no ahead step held more than one sequence";
  for (int i = 0; i < 100 && engine->metrics().active_sequences != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine->metrics().kv_bytes_used, 0u);
}

TEST(GreedyAhead, CpuGreedyRequestsDecodeAheadTogetherAndEachGetsItsOwnOutput) { expect_greedy_group_equals_each_alone("cpu", "on"); }

TEST(GreedyAhead, OpenClGreedyRequestsDecodeAheadTogetherAndEachGetsItsOwnOutput) {
  if (!opencl_built()) GTEST_SKIP() << "no usable OpenCL backend here (see `sluice plugins`)";
  expect_greedy_group_equals_each_alone("opencl", "auto");
}

// Sampling that needs the logits on the host keeps to the plain steps and still works beside it.
TEST(GreedyAhead, SamplingAndLogprobsKeepToThePlainSteps) {
  auto engine = make_engine("cpu", "on");
  auto plain = make_engine("cpu", "off");
  ASSERT_TRUE(engine && plain);
  auto with_logprobs = greedy(prompt_of(9, 10), 8);
  with_logprobs.top_logprobs = 2;
  std::vector<float> logprobs;
  with_logprobs.on_token = [&](const TokenEvent& e) {
    logprobs.push_back(e.logprob);
    return true;
  };
  const auto r = engine->generate(with_logprobs);
  EXPECT_EQ(r.ids, plain->generate(greedy(prompt_of(9, 10), 8)).ids);
  ASSERT_EQ(logprobs.size(), 8u);
  for (float lp : logprobs) EXPECT_LT(lp, 0.0f);  // real log-probabilities, not the ahead path's zeros
  auto sampled = greedy(prompt_of(9, 10), 8);
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 11;
  EXPECT_EQ(engine->generate(sampled).ids, plain->generate(sampled).ids);
}

}  // namespace
}  // namespace sluice
