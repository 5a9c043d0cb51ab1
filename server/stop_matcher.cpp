#include "server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace sluice::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(std::string_view piece) {
  if (stopped_) return {};
  pending_.append(piece);
  if (stops_.empty()) return std::exchange(pending_, {});

  // The earliest complete stop string ends generation.
  std::size_t first = std::string::npos;
  for (const auto& stop : stops_) first = std::min(first, pending_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }

  // Hold back the longest suffix that is a proper prefix of some stop string.
  std::size_t hold = 0;
  for (const auto& stop : stops_) {
    std::size_t longest = std::min(stop.size() - 1, pending_.size());
    for (std::size_t len = longest; len > hold; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(stop).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  return std::exchange(pending_, {});
}

}  // namespace sluice::server
