// KvCache::rollback (speculative decoding's rejected guesses): the cache is left as if the guesses
// had never been computed — every later step's logits the same bits as a sequence that never drafted,
// the same pages held (recent window's included) — on the CPU with f16 and a compressed codec, on
// OpenCL (PoCL), and for recurrent layers with their state kept before the pass and put back.
#include <algorithm>
#include <span>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/runtime.h"
#include "greedy_requests.h"
#include "opencl_probe.h"
#include "reference.h"
#include "speculative_fixtures.h"

namespace sluice {
namespace {

using namespace spectest;

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

}  // namespace
}  // namespace sluice
