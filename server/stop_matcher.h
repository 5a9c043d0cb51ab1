#pragma once
// Finds stop strings in generated text that arrives piece by piece (one token's text at a time), so a
// stop string split across tokens is still found, and never emitted. Text that might be the start of
// a stop string is held back until the next piece decides it.
//
// Stop strings come from requests, so the work is linear: each stop string keeps a Knuth-Morris-Pratt
// state (the longest prefix of it that the text ends with), and each pushed byte advances it in
// amortized constant time whatever the stop strings and text are.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds a piece of text; returns the text that is now safe to emit. Once a stop string is found,
  // stopped() is true, the returned text ends just before it (the earliest-starting stop string the
  // piece completes), and later pushes return "".
  std::string push(std::string_view piece);
  // The text held back at the end of generation (no stop string came).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that stopped it (null before then).
  const std::string* matched() const { return stopped_ ? matched_ : nullptr; }

 private:
  struct Stop {
    std::string text;
    std::vector<std::size_t> fallback;  // KMP prefix function: fallback[i] for a mismatch after text[0..i]
    std::size_t matched = 0;            // bytes of `text` the text so far ends with
  };

  std::vector<Stop> stops_;
  std::string pending_;  // held back: the longest `matched` of any stop
  bool stopped_ = false;
  const std::string* matched_ = nullptr;
};

}  // namespace sluice::server
