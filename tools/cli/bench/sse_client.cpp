#include "sse_client.h"

#include <sys/socket.h>

#include <cstdint>
#include <limits>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace sluice::cli::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct SseClient::Impl {
  HttpTarget target;
  asio::io_context ioc;
  tcp::socket socket{ioc};
  beast::flat_buffer buffer;
  bool connected = false;
};

Result<HttpTarget> HttpTarget::parse(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return make_error("'" + url + "' is not an http:// URL");
  std::string rest = url.substr(scheme.size());
  HttpTarget t;
  const auto slash = rest.find('/');
  if (slash != std::string::npos) {
    t.base_path = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (!t.base_path.empty() && t.base_path.back() == '/') t.base_path.pop_back();
  }
  const auto colon = rest.rfind(':');
  t.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  t.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  if (t.host.empty() || t.port.empty() || t.port.find_first_not_of("0123456789") != std::string::npos)
    return make_error("'" + url + "': expected http://host[:port]");
  return t;
}

SseClient::SseClient(HttpTarget target) : impl_(std::make_unique<Impl>()) { impl_->target = std::move(target); }
SseClient::~SseClient() = default;

void SseClient::expire_if_late(std::chrono::steady_clock::time_point now) {
  const long long d = deadline_ns_.load();
  if (d == 0 || now.time_since_epoch().count() < d) return;
  const int fd = fd_.load();
  // shutdown(2) wakes a read blocked on the socket in the client's thread; asio's objects are not
  // touched from here.
  if (fd >= 0 && !expired_.exchange(true)) ::shutdown(fd, SHUT_RDWR);
}

namespace {

// Runs one request (fn) on the kept-alive connection, opening one where there is none. A server may
// close a kept-alive connection between requests without saying so (llama-server does after an
// answer; idle timeouts do too): a request on a reused connection that failed before any of its
// answer came back was never read by the server, so it is sent once more on a fresh connection. fn
// sets `answered` once the answer's header has arrived; after that a failure is the request's own.
template <class Fn>
Status with_connection(SseClient::Impl& im, std::atomic<int>& fd, const std::atomic<bool>& expired, Fn&& fn) {
  for (int attempt = 0;; ++attempt) {
    beast::error_code ec;
    const bool reused = im.connected;
    if (!im.connected) {
      tcp::resolver resolver(im.ioc);
      auto endpoints = resolver.resolve(im.target.host, im.target.port, ec);
      if (ec) return make_error("resolve " + im.target.host + ": " + ec.message());
      im.socket = tcp::socket(im.ioc);
      asio::connect(im.socket, endpoints, ec);
      if (ec) return make_error("connect " + im.target.host + ":" + im.target.port + ": " + ec.message());
      im.socket.set_option(tcp::no_delay(true), ec);
      im.buffer.clear();
      im.connected = true;
      fd = im.socket.native_handle();
    }
    bool answered = false;
    Status s = fn(answered);
    if (s) return s;
    // After a failed request the connection's state is unknown: the next starts on a fresh one.
    fd = -1;
    im.socket.close(ec);
    im.connected = false;
    if (!reused || answered || expired || attempt > 0) return s;
  }
}

}  // namespace

Status SseClient::post_stream(const std::string& path, const std::string& body, const std::string& api_key,
                              const std::function<void(const std::string&)>& on_data,
                              const std::vector<std::pair<std::string, std::string>>& headers, std::string* replica) {
  expired_ = false;
  Impl& im = *impl_;
  Status s = with_connection(im, fd_, expired_, [&](bool& answered) -> Status {
    beast::error_code ec;
    http::request<http::string_body> req{http::verb::post, im.target.base_path + path, 11};
    req.set(http::field::host, im.target.host);
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
    if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
    for (const auto& [name, value] : headers) req.set(name, value);
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    http::write(im.socket, req, ec);
    if (ec) return make_error("send: " + ec.message());
    http::response_parser<http::buffer_body> parser;
    // No limit on a stream's length — as a number: Boost 1.74 compares a Content-Length against an
    // empty optional limit as "over it" and refuses every answer that has one.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    http::read_header(im.socket, im.buffer, parser, ec);
    if (ec) return make_error("reading the answer's header: " + ec.message());
    answered = true;
    const unsigned status = parser.get().result_int();
    if (replica) {
      const auto it = parser.get().find("X-Sluice-Replica");
      *replica = it == parser.get().end() ? std::string() : std::string(it->value());
    }
    std::string pending, error_body;
    char chunk[16384];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof(chunk);
      // read_some returns with whatever arrived: events are seen when they come, not when the body
      // buffer is full.
      http::read_some(im.socket, im.buffer, parser, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return make_error("reading the stream: " + ec.message());
      const std::size_t n = sizeof(chunk) - parser.get().body().size;
      if (status != 200) {
        error_body.append(chunk, std::min<std::size_t>(n, 300 - std::min<std::size_t>(300, error_body.size())));
        continue;
      }
      pending.append(chunk, n);
      // Events end with a blank line; a data line may arrive split over reads.
      for (std::size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
        const std::string event = pending.substr(0, end);
        pending.erase(0, end + 2);
        std::size_t line_start = 0;
        while (line_start < event.size()) {
          std::size_t line_end = event.find('\n', line_start);
          if (line_end == std::string::npos) line_end = event.size();
          const std::string line = event.substr(line_start, line_end - line_start);
          if (line.rfind("data:", 0) == 0) on_data(line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5));
          line_start = line_end + 1;
        }
      }
    }
    if (status != 200) return make_error("HTTP " + std::to_string(status) + ": " + error_body);
    if (!parser.get().keep_alive()) {
      im.socket.close(ec);
      im.connected = false;
      fd_ = -1;
    }
    return {};
  });
  if (!s && expired_) return make_error("timed out (--request-timeout)");
  return s;
}

Result<std::string> SseClient::get(const std::string& path) {
  Impl& im = *impl_;
  std::string out;
  Status s = with_connection(im, fd_, expired_, [&](bool& answered) -> Status {
    beast::error_code ec;
    http::request<http::empty_body> req{http::verb::get, im.target.base_path + path, 11};
    req.set(http::field::host, im.target.host);
    req.keep_alive(true);
    http::write(im.socket, req, ec);
    if (ec) return make_error("send: " + ec.message());
    http::response_parser<http::string_body> parser;
    http::read_header(im.socket, im.buffer, parser, ec);
    if (ec) return make_error("GET " + path + ": " + ec.message());
    answered = true;
    http::read(im.socket, im.buffer, parser, ec);
    if (ec) return make_error("GET " + path + ": " + ec.message());
    auto& res = parser.get();
    if (res.result_int() != 200) return make_error("GET " + path + ": HTTP " + std::to_string(res.result_int()));
    out = res.body();
    if (!res.keep_alive()) {
      im.socket.close(ec);
      im.connected = false;
      fd_ = -1;
    }
    return {};
  });
  if (!s) return s.error();
  return out;
}

}  // namespace sluice::cli::bench
