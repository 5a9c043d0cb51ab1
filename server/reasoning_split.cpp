#include "server/reasoning_split.h"

#include <algorithm>

namespace sluice::server {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The length of the longest suffix of `text` that is a proper prefix of `tag` (bytes to hold back).
std::size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (std::size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

bool prompt_opens_think(std::string_view prompt) {
  auto at = prompt.rfind(kOpen);
  if (at == std::string_view::npos) return false;
  std::string_view tail = prompt.substr(at + kOpen.size());
  return std::all_of(tail.begin(), tail.end(), is_space);
}

ReasoningSplitter::ReasoningSplitter(bool prompt_opened_think)
    : state_(prompt_opened_think ? State::kReasoning : State::kBeforeThink) {}

SplitText ReasoningSplitter::push(std::string_view text) {
  pending_.append(text);
  SplitText out;
  run(out);
  return out;
}

void ReasoningSplitter::run(SplitText& out) {
  for (;;) {
    if (state_ == State::kBeforeThink) {
      // Whitespace, then either the opening tag (reasoning follows) or anything else (all content).
      std::size_t start = 0;
      while (start < pending_.size() && is_space(pending_[start])) ++start;
      std::string_view rest = std::string_view(pending_).substr(start);
      if (rest.size() >= kOpen.size() && rest.substr(0, kOpen.size()) == kOpen) {
        pending_.erase(0, start + kOpen.size());
        state_ = State::kReasoning;
        at_part_start_ = true;
        continue;
      }
      if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return;  // may still open
      state_ = State::kContent;
      at_part_start_ = false;  // an answer without reasoning is passed on verbatim
      continue;
    }
    std::string& sink = state_ == State::kReasoning ? out.reasoning : out.content;
    std::size_t take = pending_.size();
    bool closes = false;
    if (state_ == State::kReasoning) {
      auto at = pending_.find(kClose);
      if (at != std::string::npos) {
        take = at;
        closes = true;
      } else {
        take -= partial_tag_suffix(pending_, kClose);
      }
    }
    std::size_t from = 0;
    if (at_part_start_) {
      while (from < take && is_space(pending_[from])) ++from;
      if (from < take) at_part_start_ = false;
    }
    sink.append(pending_, from, take - from);
    if (!closes) {
      pending_.erase(0, take);
      return;
    }
    pending_.erase(0, take + kClose.size());
    state_ = State::kContent;
    at_part_start_ = true;
  }
}

SplitText ReasoningSplitter::flush() {
  SplitText out;
  run(out);
  // Held bytes could only have been a tag's beginning; the answer ended, so they are text.
  if (state_ == State::kBeforeThink) {
    state_ = State::kContent;
    at_part_start_ = false;
    run(out);
  } else if (!pending_.empty()) {
    std::string& sink = state_ == State::kReasoning ? out.reasoning : out.content;
    std::size_t from = 0;
    if (at_part_start_)
      while (from < pending_.size() && is_space(pending_[from])) ++from;
    sink.append(pending_, from);
    pending_.clear();
  }
  return out;
}

}  // namespace sluice::server
