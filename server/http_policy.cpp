#include "server/http_policy.h"

#include "server/static_assets.h"

namespace sluice::server {
namespace {

// Constant-time comparison so the key cannot be guessed byte by byte from response times.
bool equal_secret(std::string_view given, std::string_view secret) {
  if (secret.empty()) return false;
  std::size_t diff = given.size() ^ secret.size();
  for (std::size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i]) ^ static_cast<unsigned char>(secret[i % secret.size()]);
  return diff == 0;
}

}  // namespace

// The web app's files hold no secret (the page asks for the key and sends it with its API calls).
bool is_auth_exempt(std::string_view path) {
  return path == "/health" || path == "/metrics" || find_embedded_file(path) != nullptr;
}

bool is_authorized(const http::fields& headers, std::string_view path, const std::string& api_key) {
  if (api_key.empty() || is_auth_exempt(path)) return true;
  auto auth = headers[http::field::authorization];
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.size() > kBearer.size() && std::string_view(auth.data(), kBearer.size()) == kBearer) {
    std::string_view token(auth.data() + kBearer.size(), auth.size() - kBearer.size());
    if (equal_secret(token, api_key)) return true;
  }
  auto x_key = headers["x-api-key"];
  return !x_key.empty() && equal_secret(std::string_view(x_key.data(), x_key.size()), api_key);
}

void CorsPolicy::apply(const http::fields& request, http::fields& response) const {
  if (!enabled()) return;
  if (allowed_ == "*") {
    response.set(http::field::access_control_allow_origin, "*");
    return;
  }
  auto origin = request[http::field::origin];
  if (std::string_view(origin.data(), origin.size()) == allowed_) {
    response.set(http::field::access_control_allow_origin, allowed_);
    const auto vary = response[http::field::vary];  // keeps what the answer already varies by
    response.set(http::field::vary, vary.empty() ? std::string("Origin") : std::string(vary) + ", Origin");
  }
}

http::response<http::string_body> CorsPolicy::preflight(const http::request<http::string_body>& request) const {
  http::response<http::string_body> res{http::status::no_content, request.version()};
  res.set(http::field::allow, "GET, POST, OPTIONS");
  if (enabled()) {
    apply(request, res);
    res.set(http::field::access_control_allow_methods, "GET, POST, OPTIONS");
    auto asked = request[http::field::access_control_request_headers];
    res.set(http::field::access_control_allow_headers,
            asked.empty() ? std::string("Authorization, Content-Type") : std::string(asked));
    res.set(http::field::access_control_max_age, "86400");
  }
  res.keep_alive(request.keep_alive());
  res.prepare_payload();
  return res;
}

}  // namespace sluice::server
