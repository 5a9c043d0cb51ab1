// Prompt-lookup drafting: guesses copied from earlier in the sequence itself.
#include <algorithm>

#include "engine/drafter.h"

namespace sluice {

std::vector<int32_t> NgramLookup::find(std::span<const int32_t> tokens, int n) {
  if (n <= 0) return {};
  const std::size_t len = tokens.size();
  for (std::size_t g = std::min(kMaxNgram, len > 0 ? len - 1 : 0); g >= kMinNgram && g > 0; --g) {
    const auto suffix = tokens.subspan(len - g);
    // The latest occurrence that ends before the suffix itself starts over it: its continuation
    // is known (at least one token) and most like what comes next.
    for (std::size_t start = len - g; start-- > 0;) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + static_cast<std::ptrdiff_t>(start))) continue;
      const std::size_t from = start + g;
      const std::size_t take = std::min<std::size_t>(static_cast<std::size_t>(n), len - from);
      return {tokens.begin() + static_cast<std::ptrdiff_t>(from), tokens.begin() + static_cast<std::ptrdiff_t>(from + take)};
    }
  }
  return {};
}

namespace {

class NgramSequence final : public SequenceDrafter {
 public:
  Result<DraftTokens> propose(std::span<const int32_t> tokens, std::size_t, int n) override {
    DraftTokens d;
    d.ids = NgramLookup::find(tokens, n);
    return d;
  }
  bool may_guess(std::span<const int32_t> tokens) const override { return !NgramLookup::find(tokens, 1).empty(); }
};

class NgramDrafter final : public Drafter {
 public:
  std::unique_ptr<SequenceDrafter> start(const SamplingParams&) override { return std::make_unique<NgramSequence>(); }
  std::string describe() const override { return "ngram"; }
};

}  // namespace

std::unique_ptr<Drafter> make_ngram_drafter() { return std::make_unique<NgramDrafter>(); }

}  // namespace sluice
