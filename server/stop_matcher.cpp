#include "server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace sluice::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& text : stops) {
    if (text.empty()) continue;
    Stop stop{std::move(text), {}, 0};
    const std::string& s = stop.text;
    stop.fallback.assign(s.size(), 0);
    for (std::size_t i = 1, k = 0; i < s.size(); ++i) {
      while (k > 0 && s[i] != s[k]) k = stop.fallback[k - 1];
      if (s[i] == s[k]) ++k;
      stop.fallback[i] = k;
    }
    stops_.push_back(std::move(stop));
  }
}

std::string StopMatcher::push(std::string_view piece) {
  if (stopped_) return {};
  const std::size_t scanned = pending_.size();  // the held-back bytes were scanned by an earlier push
  pending_.append(piece);
  if (stops_.empty()) return std::exchange(pending_, {});

  // Each stop string's first completion in the new bytes; the earliest start among them ends generation.
  std::size_t first = std::string::npos;
  for (Stop& stop : stops_) {
    std::size_t k = stop.matched;
    for (std::size_t i = scanned; i < pending_.size(); ++i) {
      while (k > 0 && pending_[i] != stop.text[k]) k = stop.fallback[k - 1];
      if (pending_[i] == stop.text[k]) ++k;
      if (k == stop.text.size()) {
        if (i + 1 - k < first) {
          first = i + 1 - k;
          matched_ = &stop.text;
        }
        break;
      }
    }
    stop.matched = k;
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }

  // Hold back the longest suffix that is a proper prefix of some stop string.
  std::size_t hold = 0;
  for (const Stop& stop : stops_) hold = std::max(hold, stop.matched);
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  return std::exchange(pending_, {});
}

}  // namespace sluice::server
