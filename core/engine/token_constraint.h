#pragma once
// What a request's output must follow (structured outputs, forced tool calls): before each token
// is sampled the engine asks which tokens may come next, and tells it the token chosen. One per
// request, used on the engine thread only.
#include <cstdint>
#include <memory>
#include <span>

#include "util/result.h"

namespace sluice {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of the tokens not allowed next to -infinity (end-of-sequence tokens only
  // when the output is complete). remaining: tokens the request may still generate. False when
  // no token is allowed.
  virtual bool restrict(std::span<float> logits, int remaining) = 0;
  // The token chosen (an allowed one). An error ends the request.
  virtual Status accept(int32_t id) = 0;
  // Complete and nothing may follow: the request ends here without another step.
  virtual bool must_stop() const = 0;
  // The same constraint from its start, for another choice of the same request (n > 1): each
  // choice's output follows the grammar on its own.
  virtual std::shared_ptr<TokenConstraint> restart() const = 0;
};

}  // namespace sluice
