#pragma once
// What the speculative decoding tests share: engine options for the bundled model, prompts of
// held-out code, and running requests at once with the speculation counters summed.
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "greedy_requests.h"
#include "reference.h"
#include "util/json.h"

namespace sluice::spectest {

inline constexpr const char* kDraft4bit = "models/tiny-code-qwen2-4bit";

inline EngineOptions options(const std::string& backend = "cpu", const std::string& codec = "f16", int parallel = 1) {
  EngineOptions o;
  o.model_dir = test::source_path("models/tiny-code-qwen2").string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = backend;
  o.kv_codec = codec;
  o.threads = 2;
  o.ctx_size = 512;
  o.parallel = parallel;
  o.prefill_size = 64;
  o.decode_ahead = "off";
  o.draft_rests = false;  // guesses verified at every pass, whatever they cost here
  return o;
}

// Held-out Python (the perplexity text): code whose continuation repeats its context, as the
// workload n-gram drafting is for.
inline std::vector<int32_t> code_prompt(std::size_t from, std::size_t length) {
  static const std::vector<int32_t> all = [] {
    std::vector<int32_t> ids;
    auto doc = json::parse_file(test::reference_path("golden/eval_code_ids.json"));
    if (doc.ok())
      for (const auto& v : doc->GetArray()) ids.push_back(v.GetInt());
    return ids;
  }();
  std::vector<int32_t> ids;
  for (std::size_t i = from; i < from + length && i < all.size(); ++i) ids.push_back(all[i]);
  return ids;
}

struct Generated {
  std::vector<std::vector<int32_t>> ids;
  int draft_tokens = 0, draft_accepted = 0, decode_passes = 0, decode_pass_tokens = 0;
};

// Runs the requests at once (the engine batches them as --parallel allows).
inline Generated run_all(const EngineOptions& o, const std::vector<GenerationRequest>& requests) {
  Generated out;
  auto engine = Engine::create(o);
  EXPECT_TRUE(engine.ok()) << engine.message();
  if (!engine.ok()) return out;
  std::vector<std::future<GenerationResult>> futures;
  for (const auto& r : requests) futures.push_back(std::async(std::launch::async, [&, r] { return (*engine)->generate(r); }));
  for (auto& f : futures) {
    const GenerationResult r = f.get();
    EXPECT_NE(r.finish, FinishReason::kError) << r.error;
    out.ids.push_back(r.ids);
    out.draft_tokens += r.stats.draft_tokens;
    out.draft_accepted += r.stats.draft_accepted;
    out.decode_passes += r.stats.decode_passes;
    out.decode_pass_tokens += r.stats.decode_pass_tokens;
  }
  // The engine publishes its metrics after on_done: wait for the slots to empty.
  for (int i = 0; i < 200 && (*engine)->metrics().active_sequences != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const EngineMetrics m = (*engine)->metrics();
  EXPECT_EQ(m.kv_pages_in_use, 0u) << "pages leaked";
  EXPECT_EQ(m.draft_tokens_total, static_cast<uint64_t>(out.draft_tokens));
  EXPECT_EQ(m.draft_accepted_total, static_cast<uint64_t>(out.draft_accepted));
  return out;
}

inline std::vector<GenerationRequest> code_requests(int n, int max_tokens) {
  std::vector<GenerationRequest> r;
  for (int i = 0; i < n; ++i) r.push_back(test::greedy(code_prompt(3000 + 997 * static_cast<std::size_t>(i), 150 + 37 * i), max_tokens));
  return r;
}

}  // namespace sluice::spectest
