// Speculative decoding (engine/speculation.h, engine/drafter.h) through the engine: greedy output is
// plain greedy output token for token — n-gram guesses and the bundled model's 4-bit form as a draft
// model; f32, f16 and compressed KV codecs; streamed experts; recurrent layers; one and several
// sequences; requests ending mid-pass; CPU and OpenCL/PoCL — and the guesses were really used. Also
// the n-gram lookup, the adaptive draft length, and the options refused.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include <atomic>
#include <chrono>
#include <future>
#include <gtest/gtest.h>

#include "engine/drafter.h"
#include "engine/engine.h"
#include "engine/runtime.h"
#include "engine/speculation.h"
#include "greedy_requests.h"
#include "opencl_probe.h"
#include "reference.h"
#include "speculative_fixtures.h"
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace sluice {
namespace {

using namespace spectest;

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
  EXPECT_EQ(on_flat.next(flat, 0, 100), 8);

  PassCosts jump;
  for (int n = 1; n <= 12; ++n) jump.observe_pass(n, n <= 4 ? 2.0 + 0.3 * n : 9.0 + 1.5 * (n - 4));
  DraftLength on_jump(8);
  kept(on_jump, 20);
  EXPECT_EQ(on_jump.next(jump, 0, 100), 3);
  EXPECT_EQ(on_jump.next(jump, 2, 101), 1);  // two tokens of other sequences already in the pass

  PassCosts dear = flat;
  dear.observe_draft(1, 10.0);  // a guess costs as much as a pass
  DraftLength with_model(8, /*may_rest=*/false);
  for (int i = 0; i < 20; ++i) with_model.observe(3, 1);  // and half are kept
  const int dear_k = with_model.next(dear, 0, 100);
  EXPECT_GE(dear_k, 1);
  EXPECT_LT(dear_k, 3);

  PassCosts untimed_above;  // 5 tokens never timed: taken to cost what 4 did, so it gets tried
  for (int n = 1; n <= 4; ++n) untimed_above.observe_pass(n, 2.0);
  DraftLength explore(8);
  kept(explore, 20);
  EXPECT_EQ(explore.next(untimed_above, 0, 100), 8);
  EXPECT_DOUBLE_EQ(untimed_above.pass_ms(9), 2.0);
  EXPECT_EQ(PassCosts().pass_ms(4), 0.0);
}

// Where a plain pass gives more tokens a millisecond than any number of guesses, the sequence rests:
// no guesses for 16 tokens, then one pass with guesses (the rate moves only when guesses are judged),
// and while they still do not pay, rests twice as long each time (at most 512 tokens).
TEST(DraftLength, RestsWhereGuessesDoNotPayAndProbesAfterEachRest) {
  PassCosts costs;
  for (int n = 1; n <= 9; ++n) costs.observe_pass(n, n == 1 ? 2.0 : 2.5);  // verifying costs a quarter more
  DraftLength never_kept(8);
  for (int i = 0; i < 30; ++i) never_kept.observe(1, 0);
  std::size_t position = 100;
  EXPECT_EQ(never_kept.next(costs, 0, position), 0);
  for (std::size_t p = position; p < position + DraftLength::kFirstRest; ++p) {
    EXPECT_TRUE(never_kept.resting(p)) << p;
    EXPECT_EQ(never_kept.next(costs, 0, p), 0);
  }
  position += DraftLength::kFirstRest;
  EXPECT_FALSE(never_kept.resting(position));
  EXPECT_GE(never_kept.next(costs, 0, position), 1) << "after a rest, guesses are checked again";
  never_kept.observe(1, 0);
  ++position;
  EXPECT_EQ(never_kept.next(costs, 0, position), 0);  // still not paying: a rest twice as long
  EXPECT_TRUE(never_kept.resting(position + 2 * DraftLength::kFirstRest - 1));
  EXPECT_FALSE(never_kept.resting(position + 2 * DraftLength::kFirstRest));
  int longest = 0;
  for (int round = 0; round < 20; ++round) {  // rests double up to the longest
    std::size_t p = position;
    while (never_kept.resting(p)) ++p;
    longest = static_cast<int>(p - position);
    position = p;
    never_kept.next(costs, 0, position);  // the probe
    never_kept.observe(1, 0);
    ++position;
    ASSERT_EQ(never_kept.next(costs, 0, position), 0);
  }
  EXPECT_EQ(longest, DraftLength::kLongestRest);

  // Guesses that are kept pay at the same costs: no rest.
  DraftLength kept(8);
  for (int i = 0; i < 30; ++i) kept.observe(3, 3);
  for (std::size_t p = 100; p < 200; ++p) ASSERT_GE(kept.next(costs, 0, p), 1) << p;

  // A plain pass never timed (a draft model guesses at every pass): rest once to time it.
  PassCosts verifying_only;
  for (int n = 2; n <= 9; ++n) verifying_only.observe_pass(n, 2.5);
  DraftLength untimed(8);
  for (int i = 0; i < 30; ++i) untimed.observe(3, 3);
  EXPECT_EQ(untimed.next(verifying_only, 0, 100), 0);
  EXPECT_TRUE(untimed.resting(100 + DraftLength::kFirstRest - 1));

  // may_rest false: guesses at every pass, however little they pay.
  DraftLength always(8, /*may_rest=*/false);
  for (int i = 0; i < 30; ++i) always.observe(1, 0);
  for (std::size_t p = 100; p < 200; ++p) ASSERT_GE(always.next(costs, 0, p), 1) << p;
  EXPECT_FALSE(always.resting(150));
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

// While no suffix of a sequence recurs (n-gram has nothing to guess) it decodes ahead like a plain
// greedy sequence, and verifies guesses once it has some: the output stays plain greedy's.
TEST(Speculative, NgramDecodesAheadUntilItHasAGuess) {
  auto o = options("cpu", "f16");
  o.decode_ahead = "on";
  std::vector<int32_t> distinct;
  for (int32_t id = 1000; id < 1032; ++id) distinct.push_back(id);
  const GenerationRequest request = test::greedy(distinct, 96);
  const Generated want = run_all(o, {request});
  o.draft = "ngram";
  auto engine = Engine::create(o);
  ASSERT_TRUE(engine.ok()) << engine.message();
  const GenerationResult got = (*engine)->generate(request);
  ASSERT_EQ(got.finish, FinishReason::kLength) << got.error;
  ASSERT_EQ(want.ids.size(), 1u);
  EXPECT_EQ(got.ids, want.ids[0]);
  const EngineMetrics m = (*engine)->metrics();
  EXPECT_GT(m.ahead_steps_total, 0u) << "never decoded ahead";
  EXPECT_GT(got.stats.draft_tokens, 0) << "never verified a guess";
  EXPECT_LT(static_cast<uint64_t>(m.ahead_steps_total), 96u);
}

// A step holds --prefill-size tokens and one a slot (16 + 2 here). A sequence that guesses well (the
// model drafting for itself) fills that room with guesses; a prompt that arrives while it decodes still
// gets its chunks in (once passed over four steps it goes first), so it is answered long before the other
// generation ends — before, it waited for that generation's end.
TEST(Speculative, AGuessingSequenceDoesNotStarveAPrompt) {
  SLUICE_REQUIRE_REFERENCE("golden/eval_code_ids.json");
  auto o = options("cpu", "f16", 2);
  o.prefill_size = 16;
  o.num_draft_tokens = 16;
  o.draft_model = o.model_dir;
  auto engine = Engine::create(o);
  ASSERT_TRUE(engine.ok()) << engine.message();
  constexpr int kLong = 450;  // with its 32-token prompt, inside the 512-token context
  auto long_request = std::make_shared<GenerationRequest>(test::greedy(code_prompt(0, 32), kLong));
  std::atomic<int> long_tokens{0};
  std::promise<GenerationResult> long_done;
  long_request->on_token = [&long_tokens](const TokenEvent&) {
    ++long_tokens;
    return true;
  };
  long_request->on_done = [&long_done](const GenerationResult& r) { long_done.set_value(r); };
  ASSERT_TRUE((*engine)->submit(long_request).ok());
  while (long_tokens.load() < 8) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const GenerationResult short_result = (*engine)->generate(test::greedy(code_prompt(500, 64), 4));
  const int long_when_answered = long_tokens.load();
  const GenerationResult long_result = long_done.get_future().get();
  ASSERT_EQ(short_result.finish, FinishReason::kLength) << short_result.error;
  EXPECT_EQ(short_result.ids.size(), 4u);
  ASSERT_EQ(long_result.finish, FinishReason::kLength) << long_result.error;
  EXPECT_GT(long_result.stats.draft_tokens, 0) << "no guesses: nothing filled the budget";
  EXPECT_LT(long_when_answered, kLong - 100) << "the prompt waited for the guessing sequence";
}

TEST(Speculative, DraftModelGreedyEqualsPlainGreedy) {
  SLUICE_REQUIRE_REFERENCE("golden/eval_code_ids.json");
  SLUICE_REQUIRE_REFERENCE(std::string(kDraft4bit) + "/config.json");
  auto o = options("cpu", "f16");
  o.draft_model = test::reference_path(kDraft4bit).string();
  o.num_draft_tokens = 6;
  expect_greedy_unchanged(o);
}

// With rests allowed and decoding ahead between them (what a server runs): whatever the timings
// decide, the output is plain greedy's.
TEST(Speculative, DraftModelThatRestsEqualsPlainGreedy) {
  SLUICE_REQUIRE_REFERENCE(std::string(kDraft4bit) + "/config.json");
  auto o = options("cpu", "f16");
  o.decode_ahead = "on";
  const GenerationRequest request = test::greedy(code_prompt(0, 64), 160);
  const Generated want = run_all(o, {request});
  o.draft_model = test::reference_path(kDraft4bit).string();
  o.draft_rests = true;
  const Generated got = run_all(o, {request});
  ASSERT_EQ(want.ids.size(), 1u);
  ASSERT_EQ(got.ids.size(), 1u);
  EXPECT_EQ(got.ids[0], want.ids[0]);
  EXPECT_GT(got.draft_tokens, 0) << "never verified a guess";
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

}  // namespace
}  // namespace sluice
