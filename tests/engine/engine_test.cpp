// Engine behaviour on the bundled model: sampling reproducibility, stopping, cancellation, limits,
// and bad input refused with a message.
#include <atomic>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "reference.h"

namespace sluice {
namespace {

std::unique_ptr<Engine> bundled_engine(int queue_size = 64) {
  EngineOptions o;
  o.model_dir = test::source_path("models/tiny-code-qwen2").string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = "cpu";
  o.threads = 2;
  o.ctx_size = 256;
  o.queue_size = queue_size;
  auto e = Engine::create(o);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(*e) : nullptr;
}

GenerationRequest request(int max_tokens, float temperature, std::optional<uint64_t> seed) {
  GenerationRequest r;
  r.prompt_ids = {826, 1368, 201, 826, 2308, 637, 620, 223};
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.ignore_eos = true;
  return r;
}

TEST(Engine, SameSeedSameOutputDifferentSeedDiffers) {
  auto engine = bundled_engine();
  ASSERT_TRUE(engine);
  auto a = engine->generate(request(24, 1.0f, 7));
  auto b = engine->generate(request(24, 1.0f, 7));
  auto c = engine->generate(request(24, 1.0f, 8));
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.ids.size(), 24u);
  EXPECT_NE(a.ids, c.ids);
}

TEST(Engine, TopKOneSamplingEqualsGreedy) {
  auto engine = bundled_engine();
  ASSERT_TRUE(engine);
  auto greedy = engine->generate(request(16, 0.0f, std::nullopt));
  auto r = request(16, 0.8f, 3);
  r.sampling.top_k = 1;
  EXPECT_EQ(engine->generate(r).ids, greedy.ids);
}

TEST(Engine, CallbackReturningFalseStopsWithStop) {
  auto engine = bundled_engine();
  ASSERT_TRUE(engine);
  auto r = request(50, 0.0f, std::nullopt);
  int seen = 0;
  r.on_token = [&](const TokenEvent&) { return ++seen < 3; };
  auto result = engine->generate(r);
  EXPECT_EQ(result.finish, FinishReason::kStop);
  EXPECT_EQ(result.ids.size(), 3u);
}

TEST(Engine, CancelledRequestFinishesCancelled) {
  auto engine = bundled_engine();
  ASSERT_TRUE(engine);
  auto r = request(200, 0.0f, std::nullopt);
  auto flag = r.cancelled;
  r.on_token = [&](const TokenEvent&) {
    flag->store(true);
    return true;
  };
  auto result = engine->generate(r);
  EXPECT_EQ(result.finish, FinishReason::kCancelled);
  EXPECT_LT(result.ids.size(), 3u);
}

TEST(Engine, MaxTokensLimitGivesLength) {
  auto engine = bundled_engine();
  ASSERT_TRUE(engine);
  auto result = engine->generate(request(5, 0.0f, std::nullopt));
  EXPECT_EQ(result.finish, FinishReason::kLength);
  EXPECT_EQ(result.ids.size(), 5u);
  EXPECT_EQ(result.stats.completion_tokens, 5);
  EXPECT_EQ(result.stats.prompt_tokens, 8);
}

TEST(Engine, BadPromptsAreRefusedWithAMessage) {
  auto engine = bundled_engine();
  ASSERT_TRUE(engine);
  GenerationRequest empty;
  auto r1 = engine->generate(empty);
  EXPECT_EQ(r1.finish, FinishReason::kError);
  EXPECT_NE(r1.error.find("empty"), std::string::npos);
  auto bad = request(4, 0.0f, std::nullopt);
  bad.prompt_ids.push_back(999999);
  auto r2 = engine->generate(bad);
  EXPECT_EQ(r2.finish, FinishReason::kError);
  EXPECT_NE(r2.error.find("vocabulary"), std::string::npos);
  auto too_long = request(4, 0.0f, std::nullopt);
  too_long.prompt_ids.assign(300, 5);
  auto r3 = engine->generate(too_long);
  EXPECT_EQ(r3.finish, FinishReason::kError);
  EXPECT_NE(r3.error.find("context"), std::string::npos);
  // And it keeps serving.
  EXPECT_EQ(engine->generate(request(3, 0.0f, std::nullopt)).ids.size(), 3u);
}

TEST(Engine, GenerationStopsAtTheContextEnd) {
  auto engine = bundled_engine();
  ASSERT_TRUE(engine);
  auto r = request(1000, 0.0f, std::nullopt);
  auto result = engine->generate(r);
  EXPECT_EQ(result.finish, FinishReason::kLength);
  EXPECT_EQ(result.ids.size(), 256u - 8u);
}

TEST(Engine, KvPagesReturnAfterRequests) {
  EngineOptions o;
  o.model_dir = test::source_path("models/tiny-code-qwen2").string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = "cpu";
  o.ctx_size = 64;
  auto e = Engine::create(o);
  ASSERT_TRUE(e.ok());
  // The cache holds exactly one 64-token sequence: repeated full-length requests only fit if every
  // request gives its pages back.
  for (int i = 0; i < 5; ++i) EXPECT_EQ((*e)->generate(request(1000, 0.0f, std::nullopt)).ids.size(), 56u);
}

TEST(Engine, QueueFullIsRefused) {
  auto engine = bundled_engine(1);
  ASSERT_TRUE(engine);
  std::atomic<bool> release{false};
  auto blocker = std::make_shared<GenerationRequest>(request(100, 0.0f, std::nullopt));
  blocker->on_token = [&](const TokenEvent&) {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return false;
  };
  ASSERT_TRUE(engine->submit(blocker).ok());
  // Wait until the engine picked it up, then fill the one queue slot.
  while (engine->metrics().active_sequences == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(engine->submit(std::make_shared<GenerationRequest>(request(2, 0.0f, std::nullopt))).ok());
  auto refused = engine->submit(std::make_shared<GenerationRequest>(request(2, 0.0f, std::nullopt)));
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("queue full"), std::string::npos);
  release.store(true);
}

TEST(KvCodecChoice, ParsesSingleAndPairedSpecs) {
  auto a = KvCodecChoice::parse("f16");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->k_name, "f16");
  EXPECT_EQ(a->v_name, "f16");
  auto b = KvCodecChoice::parse("k=turbo4,v=turbo3:seed=5");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->k_name, "turbo4");
  EXPECT_EQ(b->v_name, "turbo3");
  EXPECT_EQ(b->v_options, "seed=5");
  EXPECT_EQ(b->describe(), "k=turbo4,v=turbo3");
  auto c = KvCodecChoice::parse("turbo4:rot=4");  // options with '=' on a single codec
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->k_name, "turbo4");
  EXPECT_EQ(c->k_options, "rot=4");
  EXPECT_EQ(c->v_options, "rot=4");
  EXPECT_FALSE(KvCodecChoice::parse("k=f16").ok());
  EXPECT_FALSE(KvCodecChoice::parse("x=f16,v=f16").ok());
  EXPECT_FALSE(KvCodecChoice::parse("").ok());
}

TEST(Engine, UnknownCodecAndBackendAreClearErrors) {
  EngineOptions o;
  o.model_dir = test::source_path("models/tiny-code-qwen2").string();
  o.plugin_dir = test::binary_path("lib").string();
  o.kv_codec = "nope";
  auto e = Engine::create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("unknown KV codec 'nope'"), std::string::npos);
  o.kv_codec = "f16";
  o.backend = "warp-drive";
  auto e2 = Engine::create(o);
  ASSERT_FALSE(e2.ok());
  EXPECT_NE(e2.message().find("unknown backend 'warp-drive'"), std::string::npos);
}

// --mem-limit: an engine whose KV pool holds less than its contexts. The limit is set from an
// unlimited engine's own plan (the process, weights, activations) plus about 2 MiB for KV pages
// (what the process measures at the second start varies by a little: the pool is what is left).
std::unique_ptr<Engine> engine_under_limit(int mem_wait_ms) {
  EngineOptions o;
  o.model_dir = test::source_path("models/tiny-code-qwen2").string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = "cpu";
  o.threads = 2;
  o.ctx_size = 2048;
  o.parallel = 2;
  o.kv_codec = "f32";  // 4 KiB a token: a small pool in tokens, short requests that fill it
  uint64_t fixed = 0;
  {
    EngineOptions generous = o;
    generous.mem_limit_bytes = 1ull << 40;  // planned (and the process measured) the same way, no pool cut
    auto probe = Engine::create(generous);
    if (!probe.ok()) return nullptr;
    const MemoryBudget b = (*probe)->metrics().memory;
    fixed = b.process + b.weights + b.activations + b.kv_fixed;
  }
  // headroom = 16 MiB + limit / 50 (memory_budget.cpp), solved for the limit.
  o.mem_limit_bytes = static_cast<uint64_t>(static_cast<double>(fixed + (16u << 20) + (2u << 20)) / 0.98);
  o.mem_wait_ms = mem_wait_ms;
  auto e = Engine::create(o);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST(EngineMemLimit, PoolIsPlannedUnderTheLimit) {
  auto engine = engine_under_limit(0);
  ASSERT_TRUE(engine);
  const EngineMetrics m = engine->metrics();
  const uint32_t pool_tokens = m.kv_pages_total * m.kv_page_tokens;
  EXPECT_GT(pool_tokens, 0u);
  EXPECT_LT(pool_tokens, 2u * 2048u);  // less than --parallel contexts
  EXPECT_LE(m.memory.planned(), m.memory.limit);
  EXPECT_EQ(m.memory.kv_tokens, pool_tokens);
}

TEST(EngineMemLimit, RequestThatCouldNeverFitIsRefusedAtSubmit) {
  auto engine = engine_under_limit(0);
  ASSERT_TRUE(engine);
  const EngineMetrics m = engine->metrics();
  const int pool_tokens = static_cast<int>(m.kv_pages_total * m.kv_page_tokens);
  auto r = engine->generate(request(pool_tokens, 0.0f, std::nullopt));
  EXPECT_EQ(r.finish, FinishReason::kError);
  EXPECT_FALSE(r.retry_later);
  EXPECT_NE(r.error.find("the KV pool holds " + std::to_string(pool_tokens) + " tokens"), std::string::npos) << r.error;
}

TEST(EngineMemLimit, RequestWaitingForPagesPastTheWaitEndsRetryLaterAndTheFirstCompletes) {
  auto engine = engine_under_limit(0);
  ASSERT_TRUE(engine);
  const EngineMetrics m = engine->metrics();
  const int pool_tokens = static_cast<int>(m.kv_pages_total * m.kv_page_tokens);
  // Each claims more than half of the pool: the second cannot start while the first runs.
  const int max_tokens = pool_tokens * 6 / 10;
  auto first = std::async(std::launch::async, [&] { return engine->generate(request(max_tokens, 0.0f, std::nullopt)); });
  while (engine->metrics().active_sequences == 0) std::this_thread::yield();
  auto second = engine->generate(request(max_tokens, 0.0f, std::nullopt));
  EXPECT_EQ(second.finish, FinishReason::kError);
  EXPECT_TRUE(second.retry_later);
  EXPECT_NE(second.error.find("KV cache"), std::string::npos) << second.error;
  auto done = first.get();
  EXPECT_EQ(done.finish, FinishReason::kLength) << done.error;
  EXPECT_EQ(static_cast<int>(done.ids.size()), max_tokens);
  EXPECT_EQ(engine->metrics().requests_memory_timeout, 1u);
  EXPECT_EQ(engine->metrics().kv_pages_claimed, 0u);
  // The pages came back: the same request runs now.
  EXPECT_EQ(engine->generate(request(max_tokens, 0.0f, std::nullopt)).finish, FinishReason::kLength);
}

TEST(EngineMemLimit, WaitingRequestStartsWhenPagesFreeWithinTheWait) {
  auto engine = engine_under_limit(60000);
  ASSERT_TRUE(engine);
  const EngineMetrics m = engine->metrics();
  const int max_tokens = static_cast<int>(m.kv_pages_total * m.kv_page_tokens) * 6 / 10;
  auto first = std::async(std::launch::async, [&] { return engine->generate(request(max_tokens, 0.0f, std::nullopt)); });
  auto second = std::async(std::launch::async, [&] { return engine->generate(request(max_tokens, 0.0f, std::nullopt)); });
  EXPECT_EQ(first.get().finish, FinishReason::kLength);
  auto r = second.get();
  EXPECT_EQ(r.finish, FinishReason::kLength) << r.error;
  EXPECT_GT(r.stats.queue_ms, 0.0);
}

TEST(EngineMemLimit, ChoicesClaimForEachAndGiveTheClaimsBack) {
  auto engine = engine_under_limit(0);
  ASSERT_TRUE(engine);
  const EngineMetrics m = engine->metrics();
  const int pool_tokens = static_cast<int>(m.kv_pages_total * m.kv_page_tokens);
  // Two choices of 60% of the pool each cannot both be claimed: refused at once.
  auto too_many = std::make_shared<GenerationRequest>(request(pool_tokens * 6 / 10, 0.0f, std::nullopt));
  too_many->n = 2;
  EXPECT_FALSE(engine->submit(too_many).ok());
  // Two of 30% each run, and give their claims back.
  auto req = std::make_shared<GenerationRequest>(request(pool_tokens * 3 / 10, 0.7f, 5));
  req->n = 2;
  std::atomic<int> done{0};
  std::promise<void> all;
  req->on_done = [&](const GenerationResult& r) {
    EXPECT_EQ(r.finish, FinishReason::kLength) << r.error;
    if (++done == 2) all.set_value();
  };
  ASSERT_TRUE(engine->submit(req).ok());
  all.get_future().wait();
  EXPECT_EQ(engine->metrics().kv_pages_claimed, 0u);
}

}  // namespace
}  // namespace sluice
