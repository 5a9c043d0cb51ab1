#pragma once
// The engine's TokenConstraint over a compiled grammar: a Matcher plus its mask buffer.
#include <cmath>
#include <limits>
#include <memory>

#include "constrain/matcher.h"
#include "engine/token_constraint.h"

namespace sluice::constrain {

class GrammarConstraint final : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar) : matcher_(grammar), mask_(grammar->vocab().size()) {}

  bool restrict(std::span<float> logits, int remaining) override {
    matcher_.fill_mask(mask_, remaining);
    const std::size_t known = std::min(logits.size(), mask_.size());
    bool any = false;
    for (std::size_t i = 0; i < known; ++i) {
      if (mask_.test(static_cast<int32_t>(i))) any = true;
      else logits[i] = -std::numeric_limits<float>::infinity();
    }
    for (std::size_t i = known; i < logits.size(); ++i) logits[i] = -std::numeric_limits<float>::infinity();  // padding rows
    return any;
  }
  Status accept(int32_t id) override { return matcher_.accept(id); }
  bool must_stop() const override { return matcher_.must_stop(); }

 private:
  Matcher matcher_;
  TokenMask mask_;
};

}  // namespace sluice::constrain
