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

}  // namespace sluice::server
