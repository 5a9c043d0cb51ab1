// Speculative decoding (engine/speculation.h, engine/drafter.h): greedy output is plain greedy
// output token for token (n-gram guesses and the bundled model's 4-bit form as a draft model; f32,
// f16 and compressed KV codecs; one and several sequences; CPU and OpenCL/PoCL); sampled output keeps
// the target's distribution (rejection sampling checked exactly on a small vocabulary, and through
// the engine against plain sampling); rolling the KV cache back leaves it as if the guesses had
// never been computed (the same later logits, bit for bit, and the same pages held).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "engine/drafter.h"
#include "engine/engine.h"
#include "engine/runtime.h"
#include "engine/speculation.h"
#include "greedy_requests.h"
#include "opencl_probe.h"
#include "reference.h"
#include "util/json.h"

namespace sluice {
namespace {

constexpr const char* kDraft4bit = "models/tiny-code-qwen2-4bit";

EngineOptions options(const std::string& backend = "cpu", const std::string& codec = "f16", int parallel = 1) {
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
  return o;
}

// Held-out Python (the perplexity text): code whose continuation repeats its context, as the
// workload n-gram drafting is for.
std::vector<int32_t> code_prompt(std::size_t from, std::size_t length) {
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
Generated run_all(const EngineOptions& o, const std::vector<GenerationRequest>& requests) {
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

std::vector<GenerationRequest> code_requests(int n, int max_tokens) {
  std::vector<GenerationRequest> r;
  for (int i = 0; i < n; ++i) r.push_back(test::greedy(code_prompt(3000 + 997 * static_cast<std::size_t>(i), 150 + 37 * i), max_tokens));
  return r;
}

// Speculative greedy output is the plain greedy output, and the guesses were really used.
void expect_greedy_unchanged(EngineOptions spec, int n_requests = 2) {
  const auto requests = code_requests(n_requests, 96);
  EngineOptions plain = spec;
  plain.draft.clear();
  plain.draft_model.clear();
  const Generated want = run_all(plain, requests);
  const Generated got = run_all(spec, requests);
  ASSERT_EQ(got.ids.size(), want.ids.size());
  for (std::size_t i = 0; i < want.ids.size(); ++i) EXPECT_EQ(got.ids[i], want.ids[i]) << "request " << i;
  EXPECT_EQ(want.draft_tokens, 0);
  EXPECT_EQ(want.decode_pass_tokens, want.decode_passes);  // one token a pass
  EXPECT_GT(got.draft_accepted, 0) << "no guess was kept: nothing was tested";
  EXPECT_LT(got.decode_passes, want.decode_passes);
  EXPECT_EQ(got.decode_pass_tokens, want.decode_pass_tokens);
}

TEST(NgramLookup, ContinuesTheLatestEarlierOccurrenceOfTheLongestSuffix) {
  const std::vector<int32_t> t{5, 1, 2, 3, 9, 7, 2, 3, 4, 8, 1, 2, 3};
  // "1 2 3" occurred at 1..3, followed by 9 7 2; "2 3" later at 6..7 is shorter and loses.
  EXPECT_EQ(NgramLookup::find(t, 3), (std::vector<int32_t>{9, 7, 2}));
  EXPECT_EQ(NgramLookup::find(t, 10), (std::vector<int32_t>{9, 7, 2, 3, 4, 8, 1, 2, 3}));
  const std::vector<int32_t> two{4, 6, 2, 3, 8, 1, 6, 2, 3};  // "6 2 3" at 1: followed by 8
  EXPECT_EQ(NgramLookup::find(two, 2), (std::vector<int32_t>{8, 1}));
  EXPECT_TRUE(NgramLookup::find(std::vector<int32_t>{1, 2, 3, 4}, 4).empty());  // nothing recurs
  EXPECT_TRUE(NgramLookup::find(std::vector<int32_t>{7}, 4).empty());
  EXPECT_TRUE(NgramLookup::find(t, 0).empty());
}

TEST(DraftLength, GrowsWithAcceptanceAndShrinksWithRejection) {
  DraftLength length(8);
  EXPECT_EQ(length.next(), 3);  // the initial rate
  for (int i = 0; i < 10; ++i) length.observe(length.next(), length.next());
  EXPECT_EQ(length.next(), 8);  // every guess kept: up to the most
  for (int i = 0; i < 20; ++i) length.observe(length.next(), 0);
  EXPECT_EQ(length.next(), 1);  // never kept: one guess a pass
  DraftLength one(1);
  one.observe(1, 1);
  EXPECT_EQ(one.next(), 1);
}

// Once passes are timed the length follows what they cost: flat costs (a GPU reading the weights once
// for every row) draft to the most; a jump past 4 tokens (the CPU backend's streaming product ends
// there) stops at 3 guesses; a draft model's steps make guesses dearer.
TEST(DraftLength, FollowsWhatPassesCost) {
  auto kept = [](DraftLength& l, int passes) {
    for (int i = 0; i < passes; ++i) l.observe(3, 3);
  };
  PassCosts flat;
  for (int n = 1; n <= 9; ++n) flat.observe_pass(n, 10.0);
  DraftLength on_flat(8);
  kept(on_flat, 20);
  EXPECT_EQ(on_flat.next(flat, 0), 8);

  PassCosts jump;
  for (int n = 1; n <= 12; ++n) jump.observe_pass(n, n <= 4 ? 2.0 + 0.3 * n : 9.0 + 1.5 * (n - 4));
  DraftLength on_jump(8);
  kept(on_jump, 20);
  EXPECT_EQ(on_jump.next(jump, 0), 3);
  EXPECT_EQ(on_jump.next(jump, 2), 1);  // two tokens of other sequences already in the pass

  PassCosts dear = flat;
  dear.observe_draft(1, 10.0);  // a guess costs as much as a pass
  DraftLength with_model(8);
  for (int i = 0; i < 20; ++i) with_model.observe(3, 1);  // and half are kept
  EXPECT_LT(with_model.next(dear, 0), 3);

  PassCosts untimed_above;  // 5 tokens never timed: taken to cost what 4 did, so it gets tried
  for (int n = 1; n <= 4; ++n) untimed_above.observe_pass(n, 2.0);
  DraftLength explore(8);
  kept(explore, 20);
  EXPECT_EQ(explore.next(untimed_above, 0), 8);
  EXPECT_DOUBLE_EQ(untimed_above.pass_ms(9), 2.0);
  EXPECT_EQ(PassCosts().pass_ms(4), 0.0);
}

TEST(Speculative, NgramGreedyEqualsPlainGreedyF16) {
  SLUICE_REQUIRE_REFERENCE("golden/eval_code_ids.json");
  auto o = options("cpu", "f16");
  o.draft = "ngram";
  expect_greedy_unchanged(o);
}

TEST(Speculative, NgramGreedyEqualsPlainGreedyF32) {
  SLUICE_REQUIRE_REFERENCE("golden/eval_code_ids.json");
  auto o = options("cpu", "f32");
  o.draft = "ngram";
  expect_greedy_unchanged(o);
}

TEST(Speculative, NgramGreedyEqualsPlainGreedyWithACompressedCodec) {
  SLUICE_REQUIRE_REFERENCE("golden/eval_code_ids.json");
  for (const char* codec : {"q8", "turbo4"}) {
    SCOPED_TRACE(codec);
    auto o = options("cpu", codec);  // turbo4: with the recent window's exact pages (auto, 16)
    o.draft = "ngram";
    expect_greedy_unchanged(o);
  }
}

TEST(Speculative, DraftModelGreedyEqualsPlainGreedy) {
  SLUICE_REQUIRE_REFERENCE("golden/eval_code_ids.json");
  SLUICE_REQUIRE_REFERENCE(std::string(kDraft4bit) + "/config.json");
  auto o = options("cpu", "f16");
  o.draft_model = test::reference_path(kDraft4bit).string();
  o.num_draft_tokens = 6;
  expect_greedy_unchanged(o);
}

// A Mixture-of-Experts model with its experts streamed from the files (the uring store, a 1 MiB
// budget: most experts are read for every pass): a verifying pass routes every guess's row, and the
// output is unchanged — the model drafting for itself keeps nearly every guess.
TEST(Speculative, StreamedExpertsGreedyEqualsPlainGreedy) {
  SLUICE_REQUIRE_REFERENCE("models/zoo/qwen3_moe/config.json");
  auto o = options();
  o.model_dir = test::reference_path("models/zoo/qwen3_moe").string();
  o.expert_store = "uring";
  o.expert_cache_mb = 1;
  const std::vector<GenerationRequest> requests{test::greedy({5, 6, 7, 8, 9, 10, 5, 6, 7}, 80)};
  const Generated want = run_all(o, requests);
  for (const bool model_draft : {false, true}) {
    SCOPED_TRACE(model_draft ? "draft model" : "ngram");
    auto spec = o;
    if (model_draft) spec.draft_model = o.model_dir;
    else spec.draft = "ngram";
    const Generated got = run_all(spec, requests);
    ASSERT_EQ(got.ids.size(), 1u);
    EXPECT_EQ(got.ids[0], want.ids[0]);
    EXPECT_GT(got.draft_accepted, 0);
  }
}

// A request can end in the middle of a verifying pass — its max_tokens, or its on_token callback
// (the edge's stop strings) — and then ends exactly where plain decoding would; the guesses past the
// end are dropped and its pages go back.
TEST(Speculative, EndsMidPassWhereAPlainRequestWould) {
  SLUICE_REQUIRE_REFERENCE("golden/eval_code_ids.json");
  auto spec = options();
  spec.draft = "ngram";
  auto plain_engine = Engine::create(options());
  auto spec_engine = Engine::create(spec);
  ASSERT_TRUE(plain_engine.ok() && spec_engine.ok());
  const auto prompt = code_prompt(3000, 150);
  const auto full = (*plain_engine)->generate(test::greedy(prompt, 40)).ids;
  ASSERT_EQ(full.size(), 40u);
  int drafted = 0;
  for (int max_tokens : {1, 2, 3, 5, 8, 13, 21}) {
    const auto r = (*spec_engine)->generate(test::greedy(prompt, max_tokens));
    EXPECT_EQ(r.ids, std::vector<int32_t>(full.begin(), full.begin() + max_tokens)) << "max_tokens " << max_tokens;
    EXPECT_EQ(r.finish, FinishReason::kLength);
    drafted += r.stats.draft_tokens;
  }
  for (int stop_after : {4, 9, 17}) {
    auto req = test::greedy(prompt, 40);
    int seen = 0;
    req.on_token = [&](const TokenEvent&) { return ++seen < stop_after; };
    const auto r = (*spec_engine)->generate(req);
    EXPECT_EQ(r.ids, std::vector<int32_t>(full.begin(), full.begin() + stop_after)) << "stopped after " << stop_after;
    EXPECT_EQ(r.finish, FinishReason::kStop);
    EXPECT_EQ(seen, stop_after);  // no token reported past the stop
    drafted += r.stats.draft_tokens;
  }
  EXPECT_GT(drafted, 0);
  for (int i = 0; i < 200 && (*spec_engine)->metrics().active_sequences != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ((*spec_engine)->metrics().kv_pages_in_use, 0u);
}

// Several sequences at once: each speculates on its own while the batch is small enough, and the
// engine falls back to plain steps when it is not; either way the output is unchanged.
TEST(Speculative, BatchedSequencesEqualPlainGreedy) {
  SLUICE_REQUIRE_REFERENCE("golden/eval_code_ids.json");
  auto o = options("cpu", "f16", 3);
  o.draft = "ngram";
  o.spec_max_batch = 3;
  expect_greedy_unchanged(o, 3);
  o.spec_max_batch = 2;  // three sequences: plain steps until one finishes
  expect_greedy_unchanged(o, 3);
}

TEST(Speculative, DraftModelBatchedEqualsPlainGreedy) {
  SLUICE_REQUIRE_REFERENCE("golden/eval_code_ids.json");
  SLUICE_REQUIRE_REFERENCE(std::string(kDraft4bit) + "/config.json");
  auto o = options("cpu", "q8", 2);
  o.draft_model = test::reference_path(kDraft4bit).string();
  expect_greedy_unchanged(o, 2);
}

TEST(Speculative, OpenClNgramAndDraftModelGreedyEqualPlainGreedy) {
  if (auto why = test::opencl_unavailable(); !why.empty()) GTEST_SKIP() << "no usable OpenCL backend here: " << why;
  SLUICE_REQUIRE_REFERENCE("golden/eval_code_ids.json");
  auto o = options("opencl", "f16");
  o.draft = "ngram";
  expect_greedy_unchanged(o, 1);
  if (!std::filesystem::exists(test::reference_path(std::string(kDraft4bit) + "/config.json"))) return;
  o.draft.clear();
  o.draft_model = test::reference_path(kDraft4bit).string();
  expect_greedy_unchanged(o, 1);
}

// One verifying pass as the engine runs it: pages and recent pages for every token, logits at each,
// and nothing trimmed before the caller rolls back (KvCache::passed then runs at the kept end).
Status verify_pass(Runtime& rt, SequenceState& seq, std::span<const int32_t> tokens, std::vector<float>& logits) {
  const int32_t n_end = seq.n_past + static_cast<int32_t>(tokens.size());
  if (auto s = rt.kv().reserve(seq, n_end); !s) return s;
  if (auto s = rt.kv().update_recent(seq.recent, seq.first_own, seq.n_past, n_end); !s) return s;
  ForwardBatch batch;
  batch.tokens.assign(tokens.begin(), tokens.end());
  for (uint32_t i = 0; i < tokens.size(); ++i) {
    batch.positions.push_back(seq.n_past + static_cast<int32_t>(i));
    batch.seq_slots.push_back(0);
    batch.logit_rows.push_back(i);
  }
  const SequenceKv* one[] = {&seq};
  rt.kv().fill_batch(one, batch);
  if (auto s = rt.model().forward(batch, rt.kv().caches(), logits); !s) return s;
  seq.n_past = n_end;
  return {};
}

// Rolled back, a sequence's cache is as if the guesses had never been run: the logits of every later
// step are the same bits as a sequence that never drafted, and it holds the same pages (recent
// window's included). The guesses cross into a page the kept tokens do not reach (which must go back).
void expect_rollback_leaves_no_trace(const std::string& backend, const std::string& codec) {
  auto rt = Runtime::open(options(backend, codec));
  ASSERT_TRUE(rt.ok()) << rt.message();
  KvCache& kv = (*rt)->kv();
  const auto prompt = test::prompt_of(4, 29);  // positions 0..28; the next step is position 29
  std::vector<float> logits;
  SequenceState plain, spec;
  ASSERT_TRUE((*rt)->run(plain, prompt, false, logits).ok());
  const auto argmax = [](const std::vector<float>& l) {
    return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  };
  std::vector<int32_t> next{argmax(logits)};
  std::vector<std::vector<float>> want;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE((*rt)->run(plain, std::vector<int32_t>{next.back()}, false, logits).ok());
    want.push_back(logits);
    next.push_back(argmax(logits));
  }
  ASSERT_TRUE((*rt)->run(spec, prompt, false, logits).ok());
  // The first token and three wrong guesses: positions 29..32, the last in the third page.
  const std::vector<int32_t> verify{next[0], 11, 12, 13};
  ASSERT_TRUE(verify_pass(**rt, spec, verify, logits).ok());
  EXPECT_EQ(spec.pages.size(), 3u);
  const std::size_t vocab = want[0].size();
  ASSERT_EQ(logits.size(), 4 * vocab);
  EXPECT_EQ(std::vector<float>(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(vocab)), want[0])
      << "the verifying pass's first row is the plain step's logits";
  ASSERT_TRUE(kv.rollback(spec, 30).ok());  // keeps position 29 (next[0]): the first guess was rejected
  ASSERT_TRUE(kv.passed(spec, spec.n_past).ok());
  EXPECT_EQ(spec.n_past, 30);
  EXPECT_EQ(spec.pages.size(), 2u);
  for (std::size_t i = 1; i < want.size(); ++i) {
    ASSERT_TRUE((*rt)->run(spec, std::vector<int32_t>{next[i]}, false, logits).ok());
    ASSERT_EQ(logits, want[i]) << "step " << i;
  }
  EXPECT_EQ(spec.n_past, plain.n_past);
  EXPECT_EQ(spec.pages.size(), plain.pages.size());
  const auto held = [](const std::vector<int32_t>& pages) { return std::count_if(pages.begin(), pages.end(), [](int32_t p) { return p >= 0; }); };
  EXPECT_EQ(held(spec.recent), held(plain.recent));
  (*rt)->release(spec);
  (*rt)->release(plain);
  EXPECT_EQ(kv.pages().pages_in_use(), 0u);
  EXPECT_EQ(kv.recent_pages_in_use(), 0u);
}

TEST(SpeculativeRollback, LeavesTheCacheAsIfNeverDraftedF16) { expect_rollback_leaves_no_trace("cpu", "f16"); }
TEST(SpeculativeRollback, LeavesTheCacheAsIfNeverDraftedWithACompressedCodec) {
  expect_rollback_leaves_no_trace("cpu", "turbo4");  // and its recent window's pages
}
TEST(SpeculativeRollback, LeavesTheCacheAsIfNeverDraftedOnOpenCl) {
  if (auto why = test::opencl_unavailable(); !why.empty()) GTEST_SKIP() << "no usable OpenCL backend here: " << why;
  expect_rollback_leaves_no_trace("opencl", "f16");
}

// Recurrent layers, at the Runtime: the state kept before a verifying pass whose first two tokens
// are kept, put back, and the two positions run again — every later step's logits are the bits of a
// sequence that never drafted.
TEST(SpeculativeRollback, RecurrentStateIsRestoredAndTheKeptPositionsRunAgain) {
  SLUICE_REQUIRE_REFERENCE("models/zoo2/qwen3_5_text/config.json");
  auto o = options();
  o.model_dir = test::reference_path("models/zoo2/qwen3_5_text").string();
  auto rt = Runtime::open(o);
  ASSERT_TRUE(rt.ok()) << rt.message();
  KvCache& kv = (*rt)->kv();
  ASSERT_TRUE(kv.has_state());
  const auto prompt = test::prompt_of(2, 29);
  std::vector<float> logits;
  SequenceState plain, spec;
  ASSERT_TRUE((*rt)->run(plain, prompt, false, logits).ok());
  const auto argmax = [](const std::vector<float>& l) {
    return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  };
  std::vector<int32_t> next{argmax(logits)};
  std::vector<std::vector<float>> want;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE((*rt)->run(plain, std::vector<int32_t>{next.back()}, false, logits).ok());
    want.push_back(logits);
    next.push_back(argmax(logits));
  }
  ASSERT_TRUE((*rt)->run(spec, prompt, false, logits).ok());
  auto saved = kv.save_state(spec);
  ASSERT_TRUE(saved.ok()) << saved.message();
  ASSERT_GE(*saved, 0);
  const std::vector<int32_t> verify{next[0], next[1], 11, 12};  // the guess after next[1] is wrong
  ASSERT_TRUE(verify_pass(**rt, spec, verify, logits).ok());
  const std::size_t vocab = want[0].size();
  EXPECT_EQ(std::vector<float>(logits.begin() + static_cast<std::ptrdiff_t>(vocab), logits.begin() + static_cast<std::ptrdiff_t>(2 * vocab)),
            want[1]);
  ASSERT_TRUE(kv.rollback(spec, 29).ok());  // back to before the pass, then the two kept positions again
  ASSERT_TRUE(kv.restore_state(spec, *saved).ok());
  ASSERT_TRUE((*rt)->run(spec, std::vector<int32_t>{next[0], next[1]}, false, logits).ok());
  EXPECT_EQ(logits, want[1]);
  for (std::size_t i = 2; i < want.size(); ++i) {
    ASSERT_TRUE((*rt)->run(spec, std::vector<int32_t>{next[i]}, false, logits).ok());
    ASSERT_EQ(logits, want[i]) << "step " << i;
  }
  EXPECT_EQ(spec.n_past, plain.n_past);
  EXPECT_EQ(spec.pages.size(), plain.pages.size());
  (*rt)->release(spec);
  (*rt)->release(plain);
  EXPECT_EQ(kv.state_pool()->pages_in_use(), 0u) << "the kept state's slot was not given back";
}

TEST(SpeculativeRollback, RefusesToGoBelowWhatIsShared) {
  auto rt = Runtime::open(options());
  ASSERT_TRUE(rt.ok()) << rt.message();
  SequenceState s;
  std::vector<float> logits;
  ASSERT_TRUE((*rt)->run(s, test::prompt_of(1, 40), false, logits).ok());
  (*rt)->kv().publish(s, test::prompt_of(1, 40));  // blocks 0 and 1 go to the prefix cache
  EXPECT_FALSE((*rt)->kv().rollback(s, 20).ok());
  EXPECT_TRUE((*rt)->kv().rollback(s, 33).ok());
  (*rt)->release(s);
}

// Models with recurrent layers (Qwen3.5's Gated DeltaNet) keep a state, not a row per position: the
// engine keeps a copy from before each verifying pass and, when a guess is rejected, puts it back and
// runs the kept positions again. The random-weight models reject nearly every guess, so this runs the
// restore-and-recompute path at almost every step; the output is unchanged, with every KV codec kind.
TEST(Speculative, RecurrentModelsGreedyEqualsPlainGreedy) {
  for (const char* model : {"models/zoo2/qwen3_5_text", "models/zoo2/qwen3_5_moe_text"}) {
    SCOPED_TRACE(model);
    if (!std::filesystem::exists(test::reference_path(std::string(model) + "/config.json"))) GTEST_SKIP() << "reference data missing: " << model;
    for (const char* codec : {"f16", "turbo4"}) {
      SCOPED_TRACE(codec);
      auto o = options("cpu", codec);
      o.model_dir = test::reference_path(model).string();
      const std::vector<GenerationRequest> requests{test::greedy({100, 200, 300, 100, 200, 300, 100, 200}, 120),
                                                    test::greedy({1, 2, 3}, 120)};
      const Generated want = run_all(o, requests);
      o.draft = "ngram";
      const Generated got = run_all(o, requests);
      ASSERT_EQ(got.ids.size(), want.ids.size());
      for (std::size_t i = 0; i < want.ids.size(); ++i) EXPECT_EQ(got.ids[i], want.ids[i]) << "request " << i;
      EXPECT_GT(got.draft_tokens, 0);
    }
  }
}

TEST(Speculative, RefusesADraftModelWithRecurrentLayers) {
  SLUICE_REQUIRE_REFERENCE("models/zoo2/qwen3_5_text/config.json");
  auto o = options();
  o.draft_model = test::reference_path("models/zoo2/qwen3_5_text").string();
  auto e = Engine::create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("recurrent"), std::string::npos) << e.message();
}

// The 4-bit draft with two vocabulary ids swapped: same size, another tokenizer.
TEST(Speculative, RefusesADraftModelWithAnotherTokenizer) {
  SLUICE_REQUIRE_REFERENCE(std::string(kDraft4bit) + "/config.json");
  namespace fs = std::filesystem;
  const fs::path from = test::reference_path(kDraft4bit);
  const fs::path dir = fs::path(::testing::TempDir()) / "spec_other_tokenizer";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(from))
    if (entry.path().filename() != "tokenizer.json") fs::create_symlink(entry.path(), dir / entry.path().filename());
  auto doc = json::parse_file(from / "tokenizer.json");
  ASSERT_TRUE(doc.ok()) << doc.message();
  auto& vocab = (*doc)["model"]["vocab"];
  for (auto it = vocab.MemberBegin(); it != vocab.MemberEnd(); ++it) {  // ids 1000 and 1001 swapped
    if (it->value.GetInt() == 1000) it->value.SetInt(1001);
    else if (it->value.GetInt() == 1001) it->value.SetInt(1000);
  }
  rapidjson::StringBuffer text;
  rapidjson::Writer<rapidjson::StringBuffer> writer(text);
  doc->Accept(writer);
  std::ofstream(dir / "tokenizer.json") << text.GetString();
  auto o = options();
  o.draft_model = dir.string();
  auto e = Engine::create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("same tokenizer"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("token 1000"), std::string::npos) << e.message();
}

TEST(Speculative, RefusesBadOptions) {
  auto o = options();
  o.draft = "eagle";
  auto e = Engine::create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("--draft"), std::string::npos) << e.message();
  o.draft = "ngram";
  o.num_draft_tokens = 0;
  e = Engine::create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("--num-draft-tokens"), std::string::npos) << e.message();
}

// Rejection sampling, exactly: over a small vocabulary, the tokens verify_draft emits for guesses
// drawn from q are distributed as the target's p — for a point mass (n-gram), for a q unlike p, and
// where the sampler's filters (top-k) give p no mass on tokens q likes. A Pearson chi-square over
// 200 000 draws against p: the 0.1% critical value for 5 degrees of freedom is 20.5.
double chi_square(const std::vector<int>& counts, const TokenDistribution& p, int n) {
  double x2 = 0;
  for (const auto& [prob, id] : p) {
    const double e = prob * n;
    x2 += (counts[static_cast<std::size_t>(id)] - e) * (counts[static_cast<std::size_t>(id)] - e) / e;
  }
  for (std::size_t id = 0; id < counts.size(); ++id) {
    const bool in_p = std::any_of(p.begin(), p.end(), [&](const auto& c) { return c.second == static_cast<int32_t>(id); });
    if (!in_p) {
      EXPECT_EQ(counts[id], 0) << "token " << id << " has no mass under p";
    }
  }
  return x2;
}

void expect_verify_keeps_p(SamplingParams params, const TokenDistribution& q, const char* what) {
  SCOPED_TRACE(what);
  const std::vector<float> logits{1.2f, 0.3f, -0.5f, 2.0f, 0.9f, -1.0f};
  const std::vector<int32_t> history{1};
  params.seed = 1234;
  Sampler sampler(params);
  std::vector<float> work = logits;
  const TokenDistribution p = Sampler(params).distribution(work, history, 1);
  std::mt19937_64 rng(99);
  std::vector<int> counts(logits.size(), 0);
  constexpr int kDraws = 200000;
  int accepted = 0;
  for (int i = 0; i < kDraws; ++i) {
    int32_t guess = q.front().second;
    if (q.size() > 1) {
      double r = std::uniform_real_distribution<double>(0, 1)(rng);
      for (const auto& [qp, id] : q)
        if ((r -= qp) <= 0 || id == q.back().second) {
          guess = id;
          break;
        }
    }
    const DraftVerdict v = verify_draft(sampler, logits, history, 1, guess, q.size() > 1 ? &q : nullptr);
    accepted += v.accepted;
    EXPECT_EQ(v.accepted, v.choice.id == guess);
    ++counts[static_cast<std::size_t>(v.choice.id)];
  }
  EXPECT_LT(chi_square(counts, p, kDraws), 20.5);
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, kDraws);
}

TEST(RejectionSampling, EmitsTheTargetDistribution) {
  SamplingParams t1;
  t1.temperature = 1.0f;
  expect_verify_keeps_p(t1, {{1.0f, 3}}, "point mass on the target's favourite");
  expect_verify_keeps_p(t1, {{1.0f, 5}}, "point mass on an unlikely token");
  expect_verify_keeps_p(t1, {{0.1f, 0}, {0.1f, 1}, {0.5f, 2}, {0.1f, 3}, {0.1f, 4}, {0.1f, 5}}, "a draft unlike the target");
  SamplingParams filtered = t1;
  filtered.temperature = 0.7f;
  filtered.top_k = 3;  // tokens 0, 3, 4 only
  expect_verify_keeps_p(filtered, {{0.3f, 1}, {0.3f, 5}, {0.2f, 3}, {0.2f, 0}}, "top-k: q's mass where p has none");
  SamplingParams penalised = t1;
  penalised.repeat_penalty = 1.5f;  // history {1}: token 1 penalised
  expect_verify_keeps_p(penalised, {{1.0f, 1}}, "repeat penalty");
}

TEST(RejectionSampling, GreedyKeepsExactlyTheArgmax) {
  SamplingParams greedy;
  greedy.temperature = 0;
  Sampler s(greedy);
  const std::vector<float> logits{0.1f, 3.0f, 2.9f};
  const std::vector<int32_t> history{0};
  EXPECT_TRUE(verify_draft(s, logits, history, 1, 1, nullptr).accepted);
  const DraftVerdict v = verify_draft(s, logits, history, 1, 2, nullptr);
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.choice.id, 1);
  EXPECT_FLOAT_EQ(v.choice.logprob, Sampler::logprob_of(logits, 1));
}

// Through the engine: the first generated tokens of many seeded sampled requests, with and without
// speculation, are drawn from the same distribution — a two-sample chi-square per position over the
// tokens either side saw at least 10 times (rare ones pooled). Seeds are fixed, so the test is
// deterministic; the threshold is the 0.1% critical value for the degrees of freedom found.
double chi_square_critical_001(int dof) {
  // Wilson–Hilferty approximation of the 99.9% quantile.
  const double z = 3.0902, k = dof;
  return k * std::pow(1 - 2.0 / (9 * k) + z * std::sqrt(2.0 / (9 * k)), 3);
}

void expect_same_distribution(const EngineOptions& spec_options) {
  // A stretch of code twice and its start again: sampled continuations often copy it, so n-gram
  // lookups find guesses (checked below).
  auto prompt = code_prompt(12000, 90);
  const auto once = prompt;
  prompt.insert(prompt.end(), once.begin(), once.end());
  prompt.insert(prompt.end(), once.begin(), once.begin() + 20);
  constexpr int kRuns = 400, kPositions = 5;
  auto sample_runs = [&](const EngineOptions& o, int& drafted) {
    std::vector<std::vector<int32_t>> out;
    auto engine = Engine::create(o);
    EXPECT_TRUE(engine.ok()) << engine.message();
    if (!engine.ok()) return out;
    for (int seed = 0; seed < kRuns; ++seed) {
      GenerationRequest r;
      r.prompt_ids = prompt;
      r.max_tokens = kPositions;
      r.ignore_eos = true;
      r.sampling.temperature = 1.0f;
      r.sampling.seed = static_cast<uint64_t>(seed) * 7919 + 1;
      const GenerationResult g = (*engine)->generate(r);
      EXPECT_EQ(g.ids.size(), static_cast<std::size_t>(kPositions));
      drafted += g.stats.draft_tokens;
      out.push_back(g.ids);
    }
    return out;
  };
  EngineOptions plain_options = spec_options;
  plain_options.draft.clear();
  plain_options.draft_model.clear();
  int plain_drafted = 0, spec_drafted = 0;
  const auto plain = sample_runs(plain_options, plain_drafted);
  const auto spec = sample_runs(spec_options, spec_drafted);
  ASSERT_EQ(plain.size(), spec.size());
  EXPECT_GT(spec_drafted, kRuns) << "guesses were too few to test anything";
  for (int pos = 1; pos < kPositions; ++pos) {  // the first token comes from the prompt's pass alone
    std::map<int32_t, std::pair<int, int>> counts;
    for (const auto& r : plain) ++counts[r[static_cast<std::size_t>(pos)]].first;
    for (const auto& r : spec) ++counts[r[static_cast<std::size_t>(pos)]].second;
    std::vector<std::pair<int, int>> cells;
    std::pair<int, int> rare{0, 0};
    for (const auto& [id, c] : counts) {
      if (c.first + c.second >= 10) cells.push_back(c);
      else rare.first += c.first, rare.second += c.second;
    }
    if (rare.first + rare.second > 0) cells.push_back(rare);
    double x2 = 0;
    for (const auto& [a, b] : cells) x2 += static_cast<double>(a - b) * (a - b) / (a + b);  // equal sample sizes
    const int dof = static_cast<int>(cells.size()) - 1;
    if (dof < 1) continue;
    EXPECT_LT(x2, chi_square_critical_001(dof)) << "position " << pos << ", " << cells.size() << " cells";
  }
}

TEST(Speculative, NgramSampledOutputKeepsThePlainDistribution) {
  SLUICE_REQUIRE_REFERENCE("golden/eval_code_ids.json");
  auto o = options();
  o.draft = "ngram";
  expect_same_distribution(o);
}

TEST(Speculative, DraftModelSampledOutputKeepsThePlainDistribution) {
  SLUICE_REQUIRE_REFERENCE("golden/eval_code_ids.json");
  SLUICE_REQUIRE_REFERENCE(std::string(kDraft4bit) + "/config.json");
  auto o = options();
  o.draft_model = test::reference_path(kDraft4bit).string();
  expect_same_distribution(o);
}

}  // namespace
}  // namespace sluice
