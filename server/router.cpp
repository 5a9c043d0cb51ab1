#include "server/router.h"

namespace sluice::server {

void Router::add(http::verb method, std::string path, Handler handler, Work work) {
  routes_.push_back({method, std::move(path), std::move(handler), work});
}

void Router::add_prefix(http::verb method, std::string prefix, std::string label, Handler handler, Work work) {
  routes_.push_back({method, std::move(prefix), std::move(handler), work, true, std::move(label)});
}

Router::Match Router::find(http::verb method, std::string_view path) const {
  bool path_known = false;
  for (const auto& r : routes_) {
    if (r.prefix || r.path != path) continue;
    path_known = true;
    if (r.method == method) return {&r.handler, std::nullopt, r.path, r.work};
  }
  if (!path_known) {
    for (const auto& r : routes_) {
      if (!r.prefix || path.size() <= r.path.size() || !path.starts_with(r.path)) continue;
      if (r.method == method) return {&r.handler, std::nullopt, r.label, r.work};
      path_known = true;
    }
  }
  Match m;
  if (path_known) {
    m.error = ApiError::method_not_allowed(std::string(http::to_string(method)), std::string(path));
    m.route = std::string(path);
  } else {
    m.error = ApiError::not_found(std::string(path));
    m.route = "other";
  }
  return m;
}

std::string_view target_path(std::string_view target) {
  auto q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

std::string percent_decoded(std::string_view text, bool plus_is_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 &&
        hex(text[i + 2]) >= 0) {
      out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else if (plus_is_space && text[i] == '+') {
      out += ' ';
    } else {
      out += text[i];
    }
  }
  return out;
}

std::optional<std::string> query_param(std::string_view target, std::string_view name) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const auto eq = pair.find('=');
    if (percent_decoded(pair.substr(0, eq), true) == name)
      return eq == std::string_view::npos ? std::string() : percent_decoded(pair.substr(eq + 1), true);
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

}  // namespace sluice::server
