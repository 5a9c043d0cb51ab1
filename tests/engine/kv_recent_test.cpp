// The KV cache's recent window on the host (KvCache::update_recent / trim_recent / release_recent):
// which codecs get one automatically, recent pages given to exactly the pages a pass writes, kept
// while inside the window and returned after, never to a reused prefix; a backend without the
// window refuses an explicit --kv-recent; and the engine serves concurrent requests with it exactly
// as it serves each alone.
#include <chrono>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/runtime.h"
#include "reference.h"

namespace sluice {
namespace {

EngineOptions options(const std::string& codec, int recent, int parallel = 1, int prefill = 64) {
  EngineOptions o;
  o.model_dir = test::source_path("models/tiny-code-qwen2").string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = "cpu";
  o.threads = 2;
  o.ctx_size = 512;
  o.kv_codec = codec;
  o.kv_recent = recent;
  o.parallel = parallel;
  o.prefill_size = prefill;
  return o;
}

int held(const std::vector<int32_t>& recent) {
  int n = 0;
  for (int32_t p : recent) n += p >= 0;
  return n;
}

TEST(KvRecentWindow, AutomaticOnlyForCompressingCodecs) {
  for (auto [codec, recent, want] : {std::tuple{"f16", -1, 0u}, {"f32", -1, 0u}, {"turbo3", -1, 16u}, {"q8", -1, 16u},
                                     {"k=f16,v=turbo3", -1, 16u}, {"turbo3", 0, 0u}, {"turbo3", 40, 40u}, {"f16", 8, 8u}}) {
    auto rt = Runtime::open(options(codec, recent));
    ASSERT_TRUE(rt.ok()) << codec << ": " << rt.message();
    EXPECT_EQ((*rt)->kv().recent_window(), want) << codec << " --kv-recent " << recent;
    EXPECT_EQ((*rt)->kv().recent_bytes() > 0, want > 0) << codec;
  }
  auto bad = Runtime::open(options("turbo3", -2));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--kv-recent"), std::string::npos) << bad.message();
}

TEST(KvRecentWindow, PagesFollowTheWindowAndComeBack) {
  auto rt = Runtime::open(options("turbo3", 20, /*parallel=*/2, /*prefill=*/64));
  ASSERT_TRUE(rt.ok()) << rt.message();
  KvCache& kv = (*rt)->kv();
  std::vector<int32_t> recent;
  // A 64-token pass from 0: every page it writes gets a recent page.
  ASSERT_TRUE(kv.update_recent(recent, 0, 0, 64));
  EXPECT_EQ(held(recent), 4);
  EXPECT_EQ(kv.recent_pages_in_use(), 4u);
  // After it, only the pages a later query's window reaches stay (positions 44..63: pages 2 and 3).
  kv.trim_recent(recent, 64);
  EXPECT_EQ(recent[0], -1);
  EXPECT_EQ(recent[1], -1);
  EXPECT_GE(recent[2], 0);
  EXPECT_GE(recent[3], 0);
  // Decode steps: the window slides page by page.
  for (int32_t pos = 64; pos < 100; ++pos) {
    ASSERT_TRUE(kv.update_recent(recent, 0, pos, pos + 1));
    kv.trim_recent(recent, pos + 1);
    const int32_t oldest = pos + 1 - 20 + 1;  // the next query's window starts here
    for (std::size_t p = 0; p < recent.size(); ++p) {
      const bool reached = static_cast<int32_t>(p + 1) * 16 - 1 >= oldest && static_cast<int32_t>(p) * 16 <= pos;
      EXPECT_EQ(recent[p] >= 0, reached) << "page " << p << " after position " << pos;
    }
  }
  // Distinct recent pages; all of them back on release.
  std::vector<int32_t> other;
  ASSERT_TRUE(kv.update_recent(other, 0, 0, 64));
  for (int32_t a : recent)
    for (int32_t b : other)
      if (a >= 0) {
        EXPECT_NE(a, b);
      }
  EXPECT_EQ(kv.recent_pages_in_use(), static_cast<uint32_t>(held(recent) + held(other)));
  kv.release_recent(recent);
  kv.release_recent(other);
  EXPECT_TRUE(recent.empty());
  EXPECT_EQ(kv.recent_pages_in_use(), 0u);
  // The pool holds both sequences' windows plus one full batch, again and again.
  for (int round = 0; round < 3; ++round) {
    std::vector<int32_t> a, b;
    ASSERT_TRUE(kv.update_recent(a, 0, 0, 64));
    kv.trim_recent(a, 64);
    ASSERT_TRUE(kv.update_recent(b, 0, 0, 64));
    ASSERT_TRUE(kv.update_recent(a, 0, 64, 65));
    kv.release_recent(a);
    kv.release_recent(b);
  }
}

TEST(KvRecentWindow, AReusedPrefixGetsNoRecentPages) {
  auto rt = Runtime::open(options("turbo3", 16));
  ASSERT_TRUE(rt.ok()) << rt.message();
  std::vector<int32_t> recent;
  // Positions 0..31 came from the prefix cache: their exact rows were never kept.
  ASSERT_TRUE((*rt)->kv().update_recent(recent, /*first_own=*/32, 32, 40));
  EXPECT_EQ(recent[0], -1);
  EXPECT_EQ(recent[1], -1);
  EXPECT_GE(recent[2], 0);
  (*rt)->kv().release_recent(recent);
}

TEST(KvRecentWindow, ABackendWithoutItRefusesAnExplicitWindow) {
  auto o = options("turbo3", 16);
  o.backend = test::binary_path("lib/examples/sluice-example-backend.so").string();
  if (!std::filesystem::exists(o.backend)) GTEST_SKIP() << "example backend not built: " << o.backend;
  auto rt = Runtime::open(o);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.message().find("recent window"), std::string::npos) << rt.message();
  o.kv_recent = -1;  // automatic: simply none there
  auto auto_rt = Runtime::open(o);
  ASSERT_TRUE(auto_rt.ok()) << auto_rt.message();
  EXPECT_EQ((*auto_rt)->kv().recent_window(), 0u);
}

// Prompts longer than a prefill chunk, run together and alone: with the window the output of each
// request still depends only on its own tokens.
TEST(KvRecentWindow, ConcurrentRequestsEqualEachAlone) {
  auto alone = Engine::create(options("turbo3", -1, 1, 48));
  auto together = Engine::create(options("turbo3", -1, 4, 48));
  ASSERT_TRUE(alone.ok() && together.ok());
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r;
    for (int j = 0; j < 20 + 37 * i; ++j) r.prompt_ids.push_back(300 + (i * 613 + j * 97) % 6000);
    r.max_tokens = 24;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    requests.push_back(r);
  }
  std::vector<std::vector<int32_t>> solo;
  for (const auto& r : requests) solo.push_back((*alone)->generate(r).ids);
  std::vector<std::future<GenerationResult>> futures;
  for (const auto& r : requests) futures.push_back(std::async(std::launch::async, [&, r] { return (*together)->generate(r); }));
  for (std::size_t i = 0; i < futures.size(); ++i) {
    const auto got = futures[i].get();
    EXPECT_EQ(got.finish, FinishReason::kLength) << got.error;
    EXPECT_EQ(got.ids, solo[i]) << "request " << i;
  }
  // Every recent page and KV page comes back once the requests are done.
  for (int i = 0; i < 100 && (*together)->metrics().active_sequences != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const EngineMetrics idle = (*together)->metrics();
  EXPECT_EQ(idle.kv_recent_pages_in_use, 0u);
  EXPECT_EQ(idle.kv_pages_in_use, 0u);
}

}  // namespace
}  // namespace sluice
