// Turning logits into the next token: penalties, then greedy or temperature sampling with top-k,
// top-p and min-p filters, from a seeded generator so that a seed reproduces its output.
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "engine/sampling.h"

namespace sluice {
namespace {

float log_sum_exp(std::span<const float> logits) {
  const float m = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - m));
  return m + static_cast<float>(std::log(sum));
}

}  // namespace

void apply_logit_bias(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias) {
  for (const auto& [id, b] : bias)
    if (id >= 0 && static_cast<std::size_t>(id) < logits.size()) logits[static_cast<std::size_t>(id)] += b;
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed ? *params.seed : std::random_device{}()) {}

float Sampler::logprob_of(std::span<const float> logits, int32_t id) { return logits[id] - log_sum_exp(logits); }

std::vector<TokenChoice> Sampler::top_logprobs(std::span<const float> logits, int n) {
  n = std::clamp(n, 0, static_cast<int>(logits.size()));
  std::vector<int32_t> ids(logits.size());
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const float lse = log_sum_exp(logits);
  std::vector<TokenChoice> out;
  for (int i = 0; i < n; ++i)
    if (std::isfinite(logits[ids[i]])) out.push_back({ids[i], logits[ids[i]] - lse});  // masked-out tokens are no alternative
  return out;
}

bool Sampler::penalised() const {
  return params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
}

void Sampler::penalise(std::span<float> logits, std::span<const int32_t> history, std::size_t generated_from) const {
  const std::size_t vocab = logits.size();
  if (params_.repeat_penalty != 1.0f) {
    std::vector<bool> seen(vocab, false);
    for (int32_t id : history) {
      if (id < 0 || static_cast<std::size_t>(id) >= vocab || seen[id]) continue;
      seen[id] = true;
      float& l = logits[id];
      l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
    }
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (std::size_t i = std::min(generated_from, history.size()); i < history.size(); ++i) ++counts[history[i]];
    for (auto [id, count] : counts) {
      if (id < 0 || static_cast<std::size_t>(id) >= vocab) continue;
      logits[id] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
    }
  }
}

void Sampler::filter(std::span<const float> logits) {
  const std::size_t vocab = logits.size();
  candidates_.clear();
  candidates_.reserve(vocab);
  const float inv_t = 1.0f / params_.temperature;
  for (std::size_t i = 0; i < vocab; ++i)
    if (std::isfinite(logits[i])) candidates_.emplace_back(logits[i] * inv_t, static_cast<int32_t>(i));
  if (candidates_.empty()) return;
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::size_t keep = candidates_.size();
  if (params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < keep) {
    keep = static_cast<std::size_t>(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
    candidates_.resize(keep);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  // Softmax over the survivors.
  const float m = candidates_.front().first;
  double sum = 0;
  for (auto& [v, id] : candidates_) sum += (v = std::exp(v - m));
  for (auto& [v, id] : candidates_) v = static_cast<float>(v / sum);
  if (params_.min_p > 0.0f) {
    const float floor = params_.min_p * candidates_.front().first;
    std::size_t n = 1;
    while (n < candidates_.size() && candidates_[n].first >= floor) ++n;
    candidates_.resize(n);
  }
  if (params_.top_p < 1.0f) {
    double cumulative = 0;
    std::size_t n = 0;
    while (n < candidates_.size()) {
      cumulative += candidates_[n].first;
      ++n;
      if (cumulative >= params_.top_p) break;
    }
    candidates_.resize(std::max<std::size_t>(1, n));
  }
}

int32_t Sampler::draw(const TokenDistribution& weights) {
  double total = 0;
  for (const auto& c : weights) total += c.first;
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (const auto& [p, id] : weights) {
    r -= p;
    if (r <= 0) return id;
  }
  return weights.back().second;
}

double Sampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

TokenChoice Sampler::sample(std::span<float> logits, std::span<const int32_t> history, std::size_t generated_from) {
  const float lse = log_sum_exp(logits);
  std::vector<float> raw;  // kept only if penalties change logits, for the reported logprob
  if (penalised()) raw.assign(logits.begin(), logits.end());
  penalise(logits, history, generated_from);
  auto choice = [&](int32_t id) { return TokenChoice{id, (raw.empty() ? logits[id] : raw[id]) - lse}; };

  if (params_.temperature <= 0.0f) {
    // Greedy: the first maximum, as argmax does.
    return choice(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  filter(logits);
  if (candidates_.empty()) return choice(0);
  return choice(draw(candidates_));
}

TokenDistribution Sampler::distribution(std::span<float> logits, std::span<const int32_t> history, std::size_t generated_from) {
  penalise(logits, history, generated_from);
  if (params_.temperature <= 0.0f)
    return {{1.0f, static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())}};
  filter(logits);
  if (candidates_.empty()) return {{1.0f, 0}};
  // Renormalised after min-p / top-p, as draw() normalises by the survivors' total.
  double total = 0;
  for (const auto& c : candidates_) total += c.first;
  TokenDistribution out(candidates_.begin(), candidates_.end());
  for (auto& c : out) c.first = static_cast<float>(c.first / total);
  return out;
}

}  // namespace sluice
