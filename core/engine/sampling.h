#pragma once
// Sampling parameters and the sampler that turns a row of logits into the next token.
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

namespace sluice {

struct SamplingParams {
  float temperature = 0.6f;     // 0 → greedy (argmax)
  float top_p = 1.0f;
  int top_k = 0;                // 0 = off
  float min_p = 0.0f;           // 0 = off
  float repeat_penalty = 1.0f;  // llama.cpp/HF style: divides positive logits, multiplies negative
  float presence_penalty = 0.0f;   // OpenAI: subtract once per token seen in the completion
  float frequency_penalty = 0.0f;  // OpenAI: subtract per occurrence in the completion
  std::optional<uint64_t> seed;    // same seed and request → same output
  // OpenAI's logit_bias: (token id, bias) added to the raw logits before anything else (penalties,
  // a constraint's mask, temperature): -100 bans a token in practice, +100 forces it unless a mask
  // forbids it. Reported logprobs are those of the biased distribution.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// Adds each bias to its token's logit (ids outside the row are skipped: the edge validates them).
void apply_logit_bias(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias);

struct TokenChoice {
  int32_t id = 0;
  float logprob = 0.0f;  // log-softmax of the raw logits (before penalties and temperature)
};

// A distribution over a few tokens: (probability, id) pairs, most likely first, summing to 1.
using TokenDistribution = std::vector<std::pair<float, int32_t>>;

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // history: the prompt and the generated ids so far (repeat_penalty looks at all of it;
  // presence/frequency penalties look at the generated part starting at generated_from).
  TokenChoice sample(std::span<float> logits, std::span<const int32_t> history, std::size_t generated_from);
  // The distribution sample() draws from for these logits (penalties, temperature, top-k, min-p,
  // top-p applied; greedy: the argmax alone). Speculative decoding compares it with a draft's.
  // Like sample(), it may change `logits` (penalties).
  TokenDistribution distribution(std::span<float> logits, std::span<const int32_t> history, std::size_t generated_from);
  // Draws an id from weights that need not sum to 1, and a uniform number in [0, 1), from the
  // request's generator (so a seed reproduces them too).
  int32_t draw(const TokenDistribution& weights);
  double uniform();
  bool greedy() const { return params_.temperature <= 0.0f; }
  const SamplingParams& params() const { return params_; }
  // The n most likely tokens under the raw logits, for logprobs.
  static std::vector<TokenChoice> top_logprobs(std::span<const float> logits, int n);
  static float logprob_of(std::span<const float> logits, int32_t id);

 private:
  void penalise(std::span<float> logits, std::span<const int32_t> history, std::size_t generated_from) const;
  bool penalised() const;
  // candidates_ ← the tokens that survive the filters, with their probabilities, most likely first.
  void filter(std::span<const float> logits);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

}  // namespace sluice
