#pragma once
// A small blocking HTTP/1.1 client for the hub: http:// and https:// (OpenSSL, certificates checked
// against the system's store and the host name), one connection per request, a timeout on every
// step, bodies streamed to a callback. Redirects are the caller's: the hub's protocol treats a
// relative redirect (a renamed repo) differently from an absolute one (a CDN).
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hub/url.h"
#include "util/result.h"

namespace sluice::hub {

struct HttpResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // the body when not streamed (errors: its first 64 KiB)

  std::string header(std::string_view name) const;  // case-insensitive; "" when absent
  bool is_redirect() const { return status >= 300 && status < 400 && status != 304; }
};

struct HttpRequest {
  std::string method = "GET";  // GET or HEAD
  Url url;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Receives a 2xx answer: its head before the body, then the body piece by piece. An error from
// either ends the transfer and is what send() returns.
struct BodyReceiver {
  std::function<Status(const HttpResponse& head)> start;
  std::function<Status(const char* data, std::size_t size)> data;
};

class HttpClient {
 public:
  explicit HttpClient(std::chrono::seconds step_timeout = std::chrono::seconds(30)) : timeout_(step_timeout) {}

  // Sends one request and reads the answer. A 2xx body goes to the receiver when one is given, else into
  // HttpResponse::body up to max_body bytes (more is an error). Any other status's body is kept
  // (truncated) for the error message. Connection, TLS and timeout failures are errors naming the host.
  Result<HttpResponse> send(const HttpRequest& request, const BodyReceiver* receiver = nullptr,
                            std::size_t max_body = 16u << 20) const;

 private:
  std::chrono::seconds timeout_;
};

}  // namespace sluice::hub
