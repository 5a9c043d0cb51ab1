#pragma once
// Perplexity over a token sequence, cut into chunks of ctx tokens, each run from an empty cache.
// Scoring follows llama.cpp's perplexity tool by default (second half of each chunk), so the
// figures compare with its; `all` scores every predicted position (HF's loss over the window).
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "util/result.h"

namespace sluice {

class Runtime;

enum class PerplexityScoring { kSecondHalf, kAll };

struct PerplexityOptions {
  int ctx = 512;
  int chunks = 0;  // 0 = as many as the tokens fill
  PerplexityScoring scoring = PerplexityScoring::kSecondHalf;
  std::function<void(int chunk, int total, double running_ppl)> progress;
};

struct PerplexityResult {
  double ppl = 0;
  double mean_nll = 0;
  double stderr_nll = 0;  // standard error of mean_nll
  int64_t tokens_scored = 0;
  int chunks = 0;
  std::vector<float> nll;  // per scored token, in order
  double seconds = 0;
};

Result<PerplexityResult> compute_perplexity(Runtime& runtime, std::span<const int32_t> ids, const PerplexityOptions& options);

}  // namespace sluice
