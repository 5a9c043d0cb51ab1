#pragma once
// Speculative decoding: a drafter guesses the next few tokens cheaply, the target model computes
// logits for every guessed position in one forward pass (as it prefills a prompt), and the tokens
// are taken while the target agrees. Decode of one stream is bound by reading the weights once per
// pass; a pass that verifies k guesses reads them once for up to k + 1 tokens.
//
// Acceptance keeps the target's output exactly: a greedy request takes a guess when it is the
// target's own choice (its sampler's argmax, penalties included), so the output is plain greedy
// decoding's token for token; a sampled request uses speculative rejection sampling (Leviathan et
// al. 2023; Chen et al. 2023) — a guess d drawn from the draft's distribution q is kept with
// probability min(1, p(d) / q(d)), else the token is drawn from max(0, p − q) normalised — so each
// token is distributed exactly as sampling from the target's p. An n-gram guess is a point mass:
// q(d) = 1.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampling.h"

namespace sluice {

// A drafter's guesses for the positions after a sequence's last token.
struct DraftTokens {
  std::vector<int32_t> ids;
  // Per guess, the distribution it was drawn from; empty: every guess is a point mass (n-gram
  // lookups, a draft model's greedy choices).
  std::vector<TokenDistribution> q;
};

// The target's verdict on one guessed position: the token to emit there and whether it is the guess.
struct DraftVerdict {
  TokenChoice choice;  // logprob under the raw logits, as Sampler::sample reports it
  bool accepted = false;
};

// `logits`: the target's logits at the position before the guess; history/generated_from as for
// Sampler::sample; q: the guess's distribution (null or empty: a point mass on `drafted`).
DraftVerdict verify_draft(Sampler& sampler, std::span<const float> logits, std::span<const int32_t> history,
                          std::size_t generated_from, int32_t drafted, const TokenDistribution* q);

// What verifying costs, as the engine measures it: a forward pass's milliseconds by its number of
// tokens (decode steps only — a prompt's chunk would say nothing about them), and a guess's
// milliseconds in the drafter (nothing for n-gram lookups, a draft model's step for a draft model).
// Shared by the engine's sequences. Where a pass of n tokens was never timed it is taken to cost as
// much as the largest shorter one timed: optimistic, so such a pass is tried and then known.
class PassCosts {
 public:
  static constexpr int kMaxTokens = 64;
  static constexpr double kSmoothing = 0.2;  // weight of each new timing

  void observe_pass(int tokens, double ms);
  void observe_draft(int guesses, double ms);
  double pass_ms(int tokens) const;  // 0: nothing at or below `tokens` timed yet
  bool timed(int tokens) const { return tokens >= 1 && tokens <= kMaxTokens && ms_[tokens] > 0; }
  double guess_ms() const { return guess_ms_; }

 private:
  double ms_[kMaxTokens + 1] = {};  // 0: not timed
  double guess_ms_ = 0;
};

// How many tokens to draft next. With running acceptance rate a, the k-th guess is kept only if the
// k − 1 before it were, with chance a^k, so k guesses give (1 − a^(k+1)) / (1 − a) tokens a pass. Once
// passes are timed, k maximises those tokens per millisecond of the pass (with the batch's other
// tokens) and the drafter's k guesses — a backend whose pass costs the same for 1 and 8 tokens (a GPU
// reading the weights once) drafts long, one whose cost jumps at 5 rows (the CPU backend's matrix
// product leaves its streaming path there) stops below; every kExplore passes one more guess is tried,
// so a timing spoilt by a busy machine is measured again. Before any timing, guesses are added while
// a^k stays at least kMinChance.
//
// k = 0 is a choice too: where a plain one-token pass gives more tokens a millisecond than any k (a
// draft that is seldom right, or dear), the sequence *rests* — decodes without guessing, and so may
// decode ahead — for kFirstRest tokens, twice as long after each rest that ended the same way (at most
// kLongestRest), and the first pass after a rest checks guesses again, since only judged guesses move
// the rate. Where the plain pass was never timed (a draft model guesses at every pass) the sequence
// rests once to time it. `may_rest` false: never k = 0 (tests that must verify guesses at every pass).
class DraftLength {
 public:
  static constexpr double kMinChance = 0.2;
  static constexpr double kInitialRate = 0.6;  // before any guess was checked: 3 tokens
  static constexpr double kSmoothing = 0.1;    // weight of each checked guess in the running rate
  static constexpr int kExplore = 32;
  static constexpr int kFirstRest = 16;
  static constexpr int kLongestRest = 512;

  explicit DraftLength(int max_tokens, bool may_rest = true) : max_(max_tokens < 1 ? 1 : max_tokens), may_rest_(may_rest) {}
  int next() const;  // from the acceptance rate alone
  // other_tokens: the tokens already in this step's batch; position: the sequence's length now.
  // 0: no guesses this step (resting).
  int next(const PassCosts& costs, int other_tokens, std::size_t position);
  // Whether the sequence decodes without guesses at `position`.
  bool resting(std::size_t position) const { return position < rest_until_; }
  // A pass checked `drafted` guesses and kept the first `accepted` of them.
  void observe(int drafted, int accepted);
  double rate() const { return rate_; }

 private:
  int rest(std::size_t position);

  int max_;
  bool may_rest_;
  double rate_ = kInitialRate;
  int passes_ = 0;
  std::size_t rest_until_ = 0;
  int rest_tokens_ = kFirstRest;  // the next rest's length
  bool probe_ = false;            // a rest just ended: guess once before judging again
};

}  // namespace sluice
