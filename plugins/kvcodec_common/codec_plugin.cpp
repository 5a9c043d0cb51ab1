#include "kvcodec_common/codec_plugin.h"

#include <charconv>
#include <cstring>

namespace sluice::kvcodec {

void write_error(sl_error* err, const char* message) {
  if (!err) return;
  std::strncpy(err->message, message, SL_ERROR_MESSAGE_SIZE - 1);
  err->message[SL_ERROR_MESSAGE_SIZE - 1] = '\0';
}

Options::Options(std::string_view text) {
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find_first_of(":;", start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(start, end - start);
    if (!item.empty()) {
      const auto eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0)
        throw std::invalid_argument("option '" + std::string(item) + "': expected key=value");
      items_.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
    }
    start = end + 1;
  }
  used_.assign(items_.size(), false);
}

std::string Options::get(const std::string& key, const std::string& fallback) {
  std::string value = fallback;
  for (std::size_t i = 0; i < items_.size(); ++i)
    if (items_[i].first == key) {
      value = items_[i].second;
      used_[i] = true;
    }
  return value;
}

uint64_t Options::get_u64(const std::string& key, uint64_t fallback) {
  const std::string text = get(key, "");
  if (text.empty()) return fallback;
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size())
    throw std::invalid_argument("option " + key + "=" + text + ": expected a non-negative integer");
  return v;
}

int Options::get_int(const std::string& key, int fallback, int lo, int hi) {
  const std::string text = get(key, "");
  if (text.empty()) return fallback;
  int v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v < lo || v > hi)
    throw std::invalid_argument("option " + key + "=" + text + ": expected an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
  return v;
}

void Options::reject_unused() const {
  for (std::size_t i = 0; i < items_.size(); ++i)
    if (!used_[i]) throw std::invalid_argument("unknown option '" + items_[i].first + "'");
}

}  // namespace sluice::kvcodec
