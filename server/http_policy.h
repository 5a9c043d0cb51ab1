#pragma once
// Cross-cutting HTTP rules: API-key authentication and CORS.
#include <string>
#include <string_view>

#include <boost/beast/http.hpp>

namespace sluice::server {

namespace http = boost::beast::http;

// Paths that answer without the API key: probes, scrapers, and the web app's static files.
bool is_auth_exempt(std::string_view path);

// True when no key is configured, the path is exempt, or the request carries the key as
// `Authorization: Bearer KEY` (or `X-Api-Key: KEY`).
bool is_authorized(const http::fields& headers, std::string_view path, const std::string& api_key);

// CORS for `--cors ORIGIN`: "*" allows any origin; otherwise only that exact origin.
class CorsPolicy {
 public:
  explicit CorsPolicy(std::string allowed_origin) : allowed_(std::move(allowed_origin)) {}
  bool enabled() const { return !allowed_.empty(); }
  // Adds Access-Control-Allow-Origin (and Vary) when the request's Origin is allowed.
  void apply(const http::fields& request, http::fields& response) const;
  // The answer to a preflight OPTIONS request (204, allowed methods and headers).
  http::response<http::string_body> preflight(const http::request<http::string_body>& request) const;

 private:
  std::string allowed_;
};

}  // namespace sluice::server
