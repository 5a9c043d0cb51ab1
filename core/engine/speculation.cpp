#include "engine/speculation.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace sluice {
namespace {

float probability_of(const TokenDistribution& d, int32_t id) {
  for (const auto& [p, t] : d)
    if (t == id) return p;
  return 0.0f;
}

}  // namespace

DraftVerdict verify_draft(Sampler& sampler, std::span<const float> logits, std::span<const int32_t> history,
                          std::size_t generated_from, int32_t drafted, const TokenDistribution* q) {
  std::vector<float> work(logits.begin(), logits.end());  // the sampler changes its input (penalties)
  auto choice = [&](int32_t id) { return TokenChoice{id, Sampler::logprob_of(logits, id)}; };
  if (sampler.greedy()) {
    const int32_t id = sampler.sample(work, history, generated_from).id;
    return {choice(id), id == drafted};
  }
  const TokenDistribution p = sampler.distribution(work, history, generated_from);
  const bool point_mass = q == nullptr || q->empty();
  const double q_d = point_mass ? 1.0 : probability_of(*q, drafted);
  const double p_d = probability_of(p, drafted);
  if (q_d > 0 && sampler.uniform() < std::min(1.0, p_d / q_d)) return {choice(drafted), true};
  // Rejected: the residual max(0, p − q) over p's support (where p is 0 the residual is too).
  TokenDistribution residual;
  residual.reserve(p.size());
  if (point_mass) {
    for (const auto& [pv, id] : p)
      if (id != drafted) residual.emplace_back(pv, id);
  } else {
    std::unordered_map<int32_t, float> qmap(q->size());
    for (const auto& [qv, id] : *q) qmap[id] = qv;
    for (const auto& [pv, id] : p) {
      const auto it = qmap.find(id);
      const float r = pv - (it == qmap.end() ? 0.0f : it->second);
      if (r > 0) residual.emplace_back(r, id);
    }
  }
  // Empty only through rounding (p == q where a rejection had no chance): p itself is then exact.
  return {choice(sampler.draw(residual.empty() ? p : residual)), false};
}

int DraftLength::next() const {
  if (rate_ >= 1.0) return max_;
  if (rate_ <= 0.0) return 1;
  const double k = std::floor(std::log(kMinChance) / std::log(rate_));
  return static_cast<int>(std::clamp(k, 1.0, static_cast<double>(max_)));
}

void PassCosts::observe_pass(int tokens, double ms) {
  if (tokens < 1 || tokens > kMaxTokens || ms <= 0) return;
  double& m = ms_[tokens];
  m = m == 0 ? ms : m + kSmoothing * (ms - m);
}

void PassCosts::observe_draft(int guesses, double ms) {
  if (guesses < 1 || ms < 0) return;
  const double per_guess = ms / guesses;
  guess_ms_ = guess_ms_ == 0 ? per_guess : guess_ms_ + kSmoothing * (per_guess - guess_ms_);
}

double PassCosts::pass_ms(int tokens) const {
  double best = 0;  // costs only grow with tokens: the largest timed at or below
  for (int n = 1; n <= std::min(tokens, kMaxTokens); ++n) best = std::max(best, ms_[n]);
  return best;
}

int DraftLength::rest(std::size_t position) {
  rest_until_ = position + static_cast<std::size_t>(rest_tokens_);
  rest_tokens_ = std::min(2 * rest_tokens_, kLongestRest);
  probe_ = true;
  return 0;
}

int DraftLength::next(const PassCosts& costs, int other_tokens, std::size_t position) {
  if (resting(position)) return 0;
  ++passes_;
  if (costs.pass_ms(other_tokens + 2) <= 0) return next();  // no pass with a guess timed yet
  const double a = std::clamp(rate_, 0.0, 0.999);
  int best_k = 1;
  double best = -1;
  for (int k = 1; k <= max_; ++k) {
    const double tokens = (1 - std::pow(a, k + 1)) / (1 - a);
    const double ms = costs.pass_ms(other_tokens + 1 + k) + k * costs.guess_ms();
    if (ms <= 0) continue;
    if (tokens / ms > best * (1 + 1e-9)) best = tokens / ms, best_k = k;
  }
  if (passes_ % kExplore == 0 && best_k < max_) ++best_k;
  if (!may_rest_) return best_k;
  if (probe_) {  // the first pass after a rest: judge guesses again
    probe_ = false;
    return best_k;
  }
  // Plain decoding gives one token a pass; untimed, it is tried (a rest) and then known.
  if (!costs.timed(other_tokens + 1)) return rest(position);
  if (1.0 / costs.pass_ms(other_tokens + 1) >= best) return rest(position);
  rest_tokens_ = kFirstRest;
  return best_k;
}

void DraftLength::observe(int drafted, int accepted) {
  // The guesses checked: each accepted one, and the first rejected one (those after it were never judged).
  for (int i = 0; i < accepted; ++i) rate_ += kSmoothing * (1.0 - rate_);
  if (accepted < drafted) rate_ += kSmoothing * (0.0 - rate_);
}

}  // namespace sluice
