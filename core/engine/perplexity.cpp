#include "engine/perplexity.h"

#include <chrono>
#include <cmath>

#include "engine/runtime.h"

namespace sluice {

Result<PerplexityResult> compute_perplexity(Runtime& rt, std::span<const int32_t> ids, const PerplexityOptions& opt) {
  if (opt.ctx < 2) return make_error("--ctx must be at least 2");
  if (opt.ctx > rt.context_size())
    return make_error("--ctx " + std::to_string(opt.ctx) + " exceeds the context size " + std::to_string(rt.context_size()));
  const int available = static_cast<int>(ids.size() / static_cast<std::size_t>(opt.ctx));
  if (available == 0)
    return make_error("need at least " + std::to_string(opt.ctx) + " tokens, have " + std::to_string(ids.size()));
  const int chunks = opt.chunks > 0 ? opt.chunks : available;
  if (chunks > available)
    return make_error(std::to_string(chunks) + " chunks of " + std::to_string(opt.ctx) + " need " +
                      std::to_string(static_cast<int64_t>(chunks) * opt.ctx) + " tokens, have " + std::to_string(ids.size()));

  const auto start = std::chrono::steady_clock::now();
  const std::size_t vocab = static_cast<std::size_t>(rt.config().vocab_size);
  // Position i's logits predict token i + 1; score from `first` to ctx - 2.
  const int first = opt.scoring == PerplexityScoring::kAll ? 0 : opt.ctx / 2;
  PerplexityResult result;
  double sum = 0, sum_sq = 0;
  std::vector<float> logits;
  for (int c = 0; c < chunks; ++c) {
    auto chunk = ids.subspan(static_cast<std::size_t>(c) * opt.ctx, static_cast<std::size_t>(opt.ctx));
    SequenceState seq;
    auto status = rt.run(seq, chunk, true, logits);
    rt.release(seq);
    if (!status) return status.error();
    for (int i = first; i < opt.ctx - 1; ++i) {
      const float* row = logits.data() + static_cast<std::size_t>(i) * vocab;
      float m = row[0];
      for (std::size_t v = 1; v < vocab; ++v) m = std::max(m, row[v]);
      double s = 0;
      for (std::size_t v = 0; v < vocab; ++v) s += std::exp(static_cast<double>(row[v] - m));
      const int32_t target = chunk[static_cast<std::size_t>(i) + 1];
      if (target < 0 || static_cast<std::size_t>(target) >= vocab)
        return make_error("token id " + std::to_string(target) + " outside the vocabulary");
      const double nll = std::log(s) + m - row[target];
      result.nll.push_back(static_cast<float>(nll));
      sum += nll;
      sum_sq += nll * nll;
    }
    result.tokens_scored = static_cast<int64_t>(result.nll.size());
    if (opt.progress) opt.progress(c + 1, chunks, std::exp(sum / static_cast<double>(result.tokens_scored)));
  }
  const double n = static_cast<double>(result.tokens_scored);
  result.chunks = chunks;
  result.mean_nll = sum / n;
  result.ppl = std::exp(result.mean_nll);
  const double var = n > 1 ? (sum_sq / n - result.mean_nll * result.mean_nll) * n / (n - 1) : 0;
  result.stderr_nll = std::sqrt(std::max(0.0, var) / n);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace sluice
