// Sampled requests under speculative decoding keep the target's distribution: rejection sampling
// (verify_draft) checked exactly on a small vocabulary for point-mass, unlike and filtered drafts, and
// the engine's sampled output with n-gram and draft-model guesses against plain sampling (a two-sample
// chi-square over fixed seeds).
#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/speculation.h"
#include "greedy_requests.h"
#include "reference.h"
#include "speculative_fixtures.h"

namespace sluice {
namespace {

using namespace spectest;

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
