#pragma once
// The engine's TokenConstraint over a compiled grammar: a Matcher plus its mask buffer.
#include <cmath>
#include <limits>
#include <memory>
#include <span>

#include "constrain/matcher.h"
#include "engine/token_constraint.h"

namespace sluice::constrain {

// Sets the logits of the tokens outside `mask` to -infinity (rows past the vocabulary too: padding);
// false when the mask allows nothing.
inline bool apply_mask(const TokenMask& mask, std::span<float> logits) {
  const std::size_t known = std::min(logits.size(), mask.size());
  const auto& words = mask.words();
  bool any = false;
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  for (std::size_t w = 0; w * 64 < known; ++w) {
    const uint64_t bits = words[w];
    any = any || bits != 0;
    const std::size_t end = std::min(known, w * 64 + 64);
    if (bits == ~uint64_t{0} && end == w * 64 + 64) continue;
    for (std::size_t i = w * 64; i < end; ++i)
      if (!((bits >> (i - w * 64)) & 1)) logits[i] = kNone;
  }
  for (std::size_t i = known; i < logits.size(); ++i) logits[i] = kNone;
  return any;
}

class GrammarConstraint final : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar)
      : grammar_(grammar), matcher_(grammar), mask_(grammar->vocab().size()) {}

  bool restrict(std::span<float> logits, int remaining) override {
    matcher_.fill_mask(mask_, remaining);
    return apply_mask(mask_, logits);
  }
  Status accept(int32_t id) override { return matcher_.accept(id); }
  bool must_stop() const override { return matcher_.must_stop(); }
  std::shared_ptr<TokenConstraint> restart() const override { return std::make_shared<GrammarConstraint>(grammar_); }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  Matcher matcher_;
  TokenMask mask_;
};

}  // namespace sluice::constrain
