#pragma once
// Finds stop strings in generated text that arrives piece by piece (one token's text at a time), so a
// stop string split across tokens is still found, and never emitted. Text that might be the start of
// a stop string is held back until the next piece decides it.
#include <string>
#include <string_view>
#include <vector>

namespace sluice::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds a piece of text; returns the text that is now safe to emit. Once a stop string is found,
  // stopped() is true, the returned text ends just before it, and later pushes return "".
  std::string push(std::string_view piece);
  // The text held back at the end of generation (no stop string came).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace sluice::server
