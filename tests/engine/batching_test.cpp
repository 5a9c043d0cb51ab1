// Continuous batching and prefix reuse: concurrent requests give exactly what each gives alone, a
// multi-turn conversation reuses its cached prefix, cancellation and bursts give every page back.
#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/page_pool.h"
#include "plugin/plugin_registry.h"
#include "greedy_requests.h"
#include "reference.h"
#include "util/json.h"

namespace sluice {
namespace {

std::unique_ptr<Engine> make_engine(int parallel, int ctx = 512, int prefill = 64, const std::string& backend = "cpu",
                                    const std::string& model_dir = test::source_path("models/tiny-code-qwen2").string()) {
  EngineOptions o;
  o.model_dir = model_dir;
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = backend;
  o.threads = 2;
  o.ctx_size = ctx;
  o.parallel = parallel;
  o.prefill_size = prefill;
  auto e = Engine::create(o);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(*e) : nullptr;
}

using test::greedy;
using test::prompt_of;

// Submits all requests at once and waits for every result.
std::vector<GenerationResult> run_together(Engine& engine, const std::vector<GenerationRequest>& requests) {
  std::vector<std::future<GenerationResult>> futures;
  for (const auto& r : requests) futures.push_back(std::async(std::launch::async, [&engine, r] { return engine.generate(r); }));
  std::vector<GenerationResult> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

TEST(ContinuousBatching, ConcurrentGreedyRequestsMatchTheGoldens) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/golden.json");
  auto golden = json::parse_file(test::reference_path("models/tiny-code-qwen2/golden.json"));
  ASSERT_TRUE(golden.ok());
  auto engine = make_engine(4);
  ASSERT_TRUE(engine);
  std::vector<GenerationRequest> requests;
  std::vector<std::vector<int32_t>> expected;
  for (const auto& p : (*golden)["prompts"].GetArray()) {
    std::vector<int32_t> ids, want;
    for (const auto& v : p["ids"].GetArray()) ids.push_back(v.GetInt());
    for (const auto& v : p["greedy_ids"].GetArray()) want.push_back(v.GetInt());
    requests.push_back(greedy(ids, static_cast<int>(want.size())));
    expected.push_back(want);
  }
  const auto results = run_together(*engine, requests);
  for (std::size_t i = 0; i < results.size(); ++i) EXPECT_EQ(results[i].ids, expected[i]) << "request " << i;
}

TEST(ContinuousBatching, SixteenConcurrentRequestsEqualEachAlone) {
  auto alone = make_engine(1);
  auto together = make_engine(16);
  ASSERT_TRUE(alone && together);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 16; ++i) requests.push_back(greedy(prompt_of(i, 5 + i * 9), 12 + i % 5));
  std::vector<std::vector<int32_t>> solo;
  for (const auto& r : requests) solo.push_back(alone->generate(r).ids);
  const auto results = run_together(*together, requests);
  for (std::size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].finish, FinishReason::kLength);
    EXPECT_EQ(results[i].ids, solo[i]) << "request " << i;
  }
}

// The same on the OpenCL backend (PoCL here, a GPU elsewhere): batched decode runs other kernels
// than a lone sequence's, and must still give each request exactly its own output.
TEST(ContinuousBatching, OpenClConcurrentRequestsEqualEachAlone) {
  {
    PluginRegistry probe;
    probe.scan(test::binary_path("lib"));
    if (!probe.find(SL_PLUGIN_BACKEND, "opencl"))
      GTEST_SKIP() << "no usable OpenCL backend here (see `sluice plugins`)";
  }
  auto alone = make_engine(1, 256, 64, "opencl");
  auto together = make_engine(4, 256, 64, "opencl");
  ASSERT_TRUE(alone && together);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(greedy(prompt_of(i, 6 + i * 11), 8));
  std::vector<std::vector<int32_t>> solo;
  for (const auto& r : requests) solo.push_back(alone->generate(r).ids);
  const auto results = run_together(*together, requests);
  for (std::size_t i = 0; i < results.size(); ++i) EXPECT_EQ(results[i].ids, solo[i]) << "request " << i;
}

// A 4-bit model on OpenCL: a decode step of several sequences multiplies their rows by each weight in
// one batched product (matvec_q4_batch, in chunks of 8 rows), which a lone sequence never runs. Ten
// requests: a full chunk and a partial one.
TEST(ContinuousBatching, OpenClConcurrentRequestsOfAFourBitModelEqualEachAlone) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2-4bit/model.safetensors");
  {
    PluginRegistry probe;
    probe.scan(test::binary_path("lib"));
    if (!probe.find(SL_PLUGIN_BACKEND, "opencl"))
      GTEST_SKIP() << "no usable OpenCL backend here (see `sluice plugins`)";
  }
  const std::string model = test::reference_path("models/tiny-code-qwen2-4bit").string();
  auto alone = make_engine(1, 256, 64, "opencl", model);
  auto together = make_engine(10, 256, 64, "opencl", model);
  ASSERT_TRUE(alone && together);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 10; ++i) requests.push_back(greedy(prompt_of(i, 4 + i * 3), 10));
  std::vector<std::vector<int32_t>> solo;
  for (const auto& r : requests) solo.push_back(alone->generate(r).ids);
  const auto results = run_together(*together, requests);
  for (std::size_t i = 0; i < results.size(); ++i) EXPECT_EQ(results[i].ids, solo[i]) << "request " << i;
}

TEST(PrefixReuse, SecondTurnOfAConversationReusesTheFirst) {
  auto engine = make_engine(2);
  ASSERT_TRUE(engine);
  const auto system_and_turn1 = prompt_of(3, 300);
  auto first = engine->generate(greedy(system_and_turn1, 20));
  ASSERT_EQ(first.ids.size(), 20u);
  EXPECT_EQ(first.stats.cached_tokens, 0);
  // Turn 2: the whole first exchange, then the new user message.
  auto turn2 = system_and_turn1;
  turn2.insert(turn2.end(), first.ids.begin(), first.ids.end());
  const auto user2 = prompt_of(4, 30);
  turn2.insert(turn2.end(), user2.begin(), user2.end());
  auto second = engine->generate(greedy(turn2, 10));
  // Every full 16-token block of the first request (prompt and answer) is reused.
  EXPECT_EQ(second.stats.cached_tokens, static_cast<int>((300 + 20 - 1) / 16 * 16));
  // And the result equals a fresh engine's, which computes everything.
  auto fresh = make_engine(1);
  auto reference = fresh->generate(greedy(turn2, 10));
  EXPECT_EQ(reference.stats.cached_tokens, 0);
  EXPECT_EQ(second.ids, reference.ids);
  EXPECT_GT(engine->metrics().cached_tokens_total, 0u);
}

TEST(PrefixReuse, CachedPrefixCutsPrefillTime) {
  auto engine = make_engine(1, 2048, 512);
  ASSERT_TRUE(engine);
  auto shared = prompt_of(9, 1900);
  auto a = shared, b = shared;
  auto tail_a = prompt_of(10, 100), tail_b = prompt_of(11, 100);
  a.insert(a.end(), tail_a.begin(), tail_a.end());
  b.insert(b.end(), tail_b.begin(), tail_b.end());
  auto cold = engine->generate(greedy(a, 1));
  auto warm = engine->generate(greedy(b, 1));
  EXPECT_EQ(cold.stats.cached_tokens, 0);
  EXPECT_EQ(warm.stats.cached_tokens, 1900 / 16 * 16);
  // 112 tokens to compute instead of 2000: far less work, whatever the machine's load.
  EXPECT_LT(warm.stats.prefill_ms, cold.stats.prefill_ms * 0.5);
}

TEST(PrefixReuse, RequestsArrivingTogetherComputeTheirCommonPrefixOnce) {
  // Four prompts of one 300-token prefix (18 whole blocks of 16, then 12 tokens) and tails of their
  // own, submitted at once. However they interleave, one computes the prefix's blocks and the other
  // three take them from the cache — before, each computed all of them.
  const auto shared = prompt_of(9, 300);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 4; ++i) {
    auto ids = shared;
    const auto tail = prompt_of(20 + i, 40);
    ids.insert(ids.end(), tail.begin(), tail.end());
    requests.push_back(greedy(ids, 12));
  }
  auto engine = make_engine(4);
  ASSERT_TRUE(engine);
  const auto results = run_together(*engine, requests);
  int computed_the_prefix = 0;
  for (const auto& r : results) {
    if (r.stats.cached_tokens == 0) ++computed_the_prefix;
    else EXPECT_EQ(r.stats.cached_tokens, 300 / 16 * 16);
  }
  EXPECT_EQ(computed_the_prefix, 1);
  EXPECT_EQ(engine->metrics().prefilled_tokens_total, 4u * 340u - 3u * (300u / 16u * 16u));
  // Each gives what it gives alone on a fresh engine (which computes everything).
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto alone = make_engine(1)->generate(requests[i]);
    EXPECT_EQ(alone.stats.cached_tokens, 0);
    EXPECT_EQ(results[i].ids, alone.ids) << "request " << i;
  }
}

TEST(Scheduling, AShortPromptIsNotHeldBehindALongPromptsChunks) {
  // Chunks of 64 and a step budget of 64 + 2: a 640-token prompt takes ten steps of prefill. A short
  // prompt submitted after it gets its first token while the long one is still prefilling — before,
  // steps took prompts in arrival order and the short one waited for all ten chunks.
  auto engine = make_engine(2, 1024, 64);
  ASSERT_TRUE(engine);
  std::atomic<int> firsts{0};
  std::atomic<int> long_first{0}, short_first{0};
  auto start = [&](std::vector<int32_t> ids, std::atomic<int>& first, std::promise<GenerationResult>& done) {
    auto req = std::make_shared<GenerationRequest>(greedy(std::move(ids), 4));
    req->on_token = [&first, &firsts](const TokenEvent&) {
      if (first.load() == 0) first = ++firsts;
      return true;
    };
    req->on_done = [&done](const GenerationResult& r) { done.set_value(r); };
    ASSERT_TRUE(engine->submit(req).ok());
  };
  std::promise<GenerationResult> long_done, short_done;
  start(prompt_of(5, 640), long_first, long_done);
  start(prompt_of(6, 20), short_first, short_done);
  const auto long_result = long_done.get_future().get();
  const auto short_result = short_done.get_future().get();
  ASSERT_EQ(long_result.ids.size(), 4u);
  ASSERT_EQ(short_result.ids.size(), 4u);
  EXPECT_EQ(short_first.load(), 1);
  EXPECT_EQ(long_first.load(), 2);
  // And each gives what it gives alone.
  EXPECT_EQ(short_result.ids, make_engine(1, 1024, 64)->generate(greedy(prompt_of(6, 20), 4)).ids);
  EXPECT_EQ(long_result.ids, make_engine(1, 1024, 64)->generate(greedy(prompt_of(5, 640), 4)).ids);
}

TEST(PagePoolAccounting, CancellingFreesPagesAtOnceAndBurstsReturnToBaseline) {
  auto engine = make_engine(8, 256);
  ASSERT_TRUE(engine);
  const uint64_t baseline = engine->metrics().kv_bytes_used;
  EXPECT_EQ(baseline, 0u);
  // A long request, cancelled after a few tokens.
  auto req = std::make_shared<GenerationRequest>(greedy(prompt_of(1, 100), 200));
  std::promise<GenerationResult> done;
  std::atomic<int> seen{0};
  req->on_token = [&](const TokenEvent&) { return ++seen < 1000; };
  req->on_done = [&](const GenerationResult& r) { done.set_value(r); };
  ASSERT_TRUE(engine->submit(req).ok());
  while (seen.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GE(engine->metrics().kv_pages_in_use, 100u / 16);  // the running request's pages
  EXPECT_EQ(engine->metrics().kv_pages_total, 8u * 256 / 16);
  req->cancelled->store(true);
  auto result = done.get_future().get();
  EXPECT_EQ(result.finish, FinishReason::kCancelled);
  // Pages of published full blocks stay cached (evictable); nothing else is held.
  for (int burst = 0; burst < 3; ++burst) {
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < 12; ++i) requests.push_back(greedy(prompt_of(100 + burst * 12 + i, 40), 8));
    for (const auto& r : run_together(*engine, requests)) EXPECT_EQ(r.ids.size(), 8u);
  }
  // Give the engine thread a moment to publish its last metrics.
  for (int i = 0; i < 100 && engine->metrics().active_sequences != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const EngineMetrics idle = engine->metrics();
  EXPECT_EQ(idle.active_sequences, 0);
  EXPECT_EQ(idle.kv_bytes_used, baseline);
  EXPECT_EQ(idle.kv_pages_in_use, 0u);
  EXPECT_GT(idle.kv_pages_cached, 0u);  // the published prompt blocks stay for reuse
}

TEST(PagePoolUnit, SharedBlocksAreRefcountedAndEvictedLeastRecentlyUsedFirst) {
  PagePool pool(4, 16);
  EXPECT_EQ(pool.available_pages(), 4u);
  auto a = pool.allocate(2);
  ASSERT_TRUE(a.ok());
  std::vector<int32_t> tokens(16, 7);
  const auto h1 = PagePool::chain(PagePool::kRootHash, tokens);
  const auto h2 = PagePool::chain(h1, tokens);
  EXPECT_NE(h1, h2);  // the same block after a different prefix is a different block
  pool.publish(h1, (*a)[0]);
  pool.publish(h2, (*a)[1]);
  auto again = pool.acquire_cached(h1);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, (*a)[0]);
  pool.release(*a);                 // the first owner leaves
  EXPECT_EQ(pool.evictable_pages(), 1u);  // block 2 is only cached; block 1 is still held
  pool.release(std::vector<int32_t>{*again});
  EXPECT_EQ(pool.evictable_pages(), 2u);
  EXPECT_EQ(pool.pages_in_use(), 0u);
  // Fresh pages come from the free list first, then from the oldest cached block.
  auto b = pool.allocate(3);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(pool.cached_pages(), 1u);
  // Block 2's page became evictable first (its only user left before block 1's second user did).
  EXPECT_FALSE(pool.acquire_cached(h2).has_value());
  EXPECT_TRUE(pool.acquire_cached(h1).has_value());
  EXPECT_FALSE(pool.allocate(1).ok());  // everything is held now
}

}  // namespace
}  // namespace sluice
