#pragma once
// Method + path → handler. A handler answers at once (a Reply) or later through its ResponseChannel
// (it returns nullopt after handing the channel to a generation).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/beast/http.hpp>

#include "server/api_error.h"
#include "server/response_channel.h"

namespace sluice::server {

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;

struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers{};  // more response headers (ETag, Cache-Control)
  bool binary = false;  // bytes sent as they are (not made valid UTF-8): images

  static Reply json(std::string body) { return {200, std::move(body), "application/json"}; }
  static Reply error(const ApiError& e) { return {e.status, e.to_json(), "application/json"}; }
};

using Handler = std::function<std::optional<Reply>(const HttpRequest&, const std::shared_ptr<ResponseChannel>&)>;

// Where a route's handler runs: inline on the connection's I/O thread (cheap, bounded work: /health,
// /metrics, /v1/models) or on the work pool (anything that parses a body, renders or tokenizes).
enum class Work { kInline, kPool };

class Router {
 public:
  void add(http::verb method, std::string path, Handler handler, Work work = Work::kInline);
  // Every path that starts with `prefix` and goes on (e.g. "/v1/models/" for /v1/models/{id}; the
  // handler reads the rest from the request). Exact routes are tried first. `label` names the route
  // in metrics, so ids do not become label values.
  void add_prefix(http::verb method, std::string prefix, std::string label, Handler handler,
                  Work work = Work::kInline);

  struct Match {
    const Handler* handler = nullptr;  // null → `error` says why (404 or 405)
    std::optional<ApiError> error;
    std::string route;                 // the matched path, or "other" (a metrics label)
    Work work = Work::kInline;
  };
  Match find(http::verb method, std::string_view path) const;

 private:
  struct Route {
    http::verb method;
    std::string path;
    Handler handler;
    Work work;
    bool prefix = false;
    std::string label;
  };
  std::vector<Route> routes_;
};

// The path part of a request target ("/v1/models?x=1" → "/v1/models").
std::string_view target_path(std::string_view target);
// "%2F" → "/" (and '+' → ' ' when `plus_is_space`, as in a query). A malformed escape stays literal.
std::string percent_decoded(std::string_view text, bool plus_is_space = false);
// A query parameter's decoded value ("?q=qwen+2&limit=5", "q" → "qwen 2"); nullopt when absent.
std::optional<std::string> query_param(std::string_view target, std::string_view name);

}  // namespace sluice::server
