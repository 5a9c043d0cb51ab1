#include "hub/http_client.h"

#include <openssl/ssl.h>

#include <limits>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace sluice::hub {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

constexpr std::size_t kErrorBodyKeep = 64u << 10;

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

// Beast's timeouts (tcp_stream::expires_after) act on asynchronous operations only: each step is
// started asynchronously and the context is run until it completes, which reads as blocking code.
template <class Start>
beast::error_code run_step(asio::io_context& ioc, Start&& start) {
  beast::error_code result;
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  ioc.restart();
  ioc.run();
  return result;
}

std::string describe(const beast::error_code& ec) {
  if (ec == beast::error::timeout) return "timed out";
  return ec.message();
}

template <class Stream>
Result<HttpResponse> exchange(asio::io_context& ioc, Stream& stream, const HttpRequest& rq, const BodyReceiver* receiver,
                              std::size_t max_body, std::chrono::seconds timeout) {
  auto& lowest = beast::get_lowest_layer(stream);
  const std::string where = rq.url.origin();
  http::request<http::empty_body> req{rq.method == "HEAD" ? http::verb::head : http::verb::get, rq.url.target, 11};
  const bool default_port = (rq.url.scheme == "http" && rq.url.port == "80") || (rq.url.scheme == "https" && rq.url.port == "443");
  req.set(http::field::host, default_port ? rq.url.host : rq.url.host + ":" + rq.url.port);
  req.set(http::field::user_agent, "sluice/0.1");
  req.set(http::field::connection, "close");
  for (const auto& [name, value] : rq.headers) req.set(name, value);

  lowest.expires_after(timeout);
  if (auto ec = run_step(ioc, [&](auto handler) { http::async_write(stream, req, handler); }))
    return make_error(where + ": sending the request: " + describe(ec));

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  // Bounded below (max_body when kept, the receiver's business when streamed). Not boost::none: Boost
  // 1.74 compares a Content-Length against an empty optional as "over the limit".
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  parser.header_limit(64u << 10);
  if (rq.method == "HEAD") parser.skip(true);
  lowest.expires_after(timeout);
  if (auto ec = run_step(ioc, [&](auto handler) { http::async_read_header(stream, buffer, parser, handler); }))
    return make_error(where + ": reading the answer: " + describe(ec));

  HttpResponse response;
  response.status = static_cast<int>(parser.get().result_int());
  for (const auto& field : parser.get()) response.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  const bool streamed = receiver && response.status / 100 == 2;
  const bool keep_all = !receiver && response.status / 100 == 2;
  if (streamed && receiver->start)
    if (auto ok = receiver->start(response); !ok) return ok.error();

  std::vector<char> chunk(256u << 10);
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    lowest.expires_after(timeout);
    auto ec = run_step(ioc, [&](auto handler) { http::async_read(stream, buffer, parser, handler); });
    if (ec == http::error::need_buffer) ec = {};
    // Bytes that arrived before a broken connection are delivered too: a resumed transfer starts after them.
    const std::size_t n = chunk.size() - parser.get().body().size;
    if (streamed) {
      if (n)
        if (auto ok = receiver->data(chunk.data(), n); !ok) return ok.error();
    } else if (keep_all) {
      if (response.body.size() + n > max_body) return make_error(where + ": answer larger than " + std::to_string(max_body) + " bytes");
      response.body.append(chunk.data(), n);
    } else if (response.body.size() < kErrorBodyKeep) {
      response.body.append(chunk.data(), std::min(n, kErrorBodyKeep - response.body.size()));
    }
    if (ec) return make_error(where + ": reading the body: " + describe(ec));
  }
  beast::error_code ignored;
  lowest.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return response;
}

}  // namespace

std::string HttpResponse::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (iequals(n, name)) return v;
  return {};
}

Result<HttpResponse> HttpClient::send(const HttpRequest& rq, const BodyReceiver* receiver, std::size_t max_body) const {
  try {
    asio::io_context ioc;
    tcp::resolver resolver(ioc);
    beast::error_code ec;
    const auto endpoints = resolver.resolve(rq.url.host, rq.url.port, ec);
    if (ec) return make_error("cannot resolve " + rq.url.host + ": " + ec.message());

    if (rq.url.scheme == "http") {
      beast::tcp_stream stream(ioc);
      stream.expires_after(timeout_);
      if (auto e = run_step(ioc, [&](auto handler) { stream.async_connect(endpoints, handler); }))
        return make_error("cannot connect to " + rq.url.origin() + ": " + describe(e));
      return exchange(ioc, stream, rq, receiver, max_body, timeout_);
    }

    ssl::context context(ssl::context::tls_client);
    context.set_default_verify_paths();  // the system's CA store (Debian: ca-certificates); SSL_CERT_FILE overrides
    context.set_verify_mode(ssl::verify_peer);
    beast::ssl_stream<beast::tcp_stream> stream(ioc, context);
    if (!SSL_set_tlsext_host_name(stream.native_handle(), rq.url.host.c_str()))  // SNI: CDNs pick the certificate by it
      return make_error("TLS: cannot set the server name " + rq.url.host);
    stream.set_verify_callback(ssl::host_name_verification(rq.url.host));
    beast::get_lowest_layer(stream).expires_after(timeout_);
    if (auto e = run_step(ioc, [&](auto handler) { beast::get_lowest_layer(stream).async_connect(endpoints, handler); }))
      return make_error("cannot connect to " + rq.url.origin() + ": " + describe(e));
    beast::get_lowest_layer(stream).expires_after(timeout_);
    if (auto e = run_step(ioc, [&](auto handler) { stream.async_handshake(ssl::stream_base::client, handler); }))
      return make_error("TLS handshake with " + rq.url.host + " failed: " + describe(e));
    return exchange(ioc, stream, rq, receiver, max_body, timeout_);
  } catch (const std::exception& e) {
    return make_error(rq.url.origin() + ": " + e.what());
  }
}

}  // namespace sluice::hub
