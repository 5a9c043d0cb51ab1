#include "server/loading_server.h"

#include <future>

#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace sluice::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

// One request, one answer, then the connection closes: clients poll /health and retry the rest.
struct LoadingSession : std::enable_shared_from_this<LoadingSession> {
  LoadingSession(tcp::socket socket, const std::function<std::string()>& health) : stream(std::move(socket)), health(health) {}

  void start() {
    stream.expires_after(std::chrono::seconds(2));  // bounds how long a stalled client delays the handover
    parser.header_limit(16u << 10);
    parser.body_limit(64u << 10);
    http::async_read(stream, buffer, parser, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (!ec) self->answer();
    });
  }

  void answer() {
    const auto& req = parser.get();
    const std::string target(req.target());
    const bool health_route = target == "/health" || target.rfind("/health?", 0) == 0;
    response.result(http::status::service_unavailable);
    response.version(req.version());
    response.set(http::field::content_type, "application/json");
    response.set(http::field::retry_after, "5");
    response.set(http::field::cache_control, "no-store");
    response.keep_alive(false);
    response.body() = health_route ? health()
                                   : R"({"error":{"message":"the model is loading; see /health for progress","type":"unavailable_error","code":503}})";
    response.prepare_payload();
    http::async_write(stream, response, [self = shared_from_this()](beast::error_code, std::size_t) {
      beast::error_code ignored;
      self->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    });
  }

  beast::tcp_stream stream;
  const std::function<std::string()>& health;
  beast::flat_buffer buffer;
  http::request_parser<http::string_body> parser;
  http::response<http::string_body> response;
};

}  // namespace

LoadingServer::LoadingServer(std::function<std::string()> health_body) : health_body_(std::move(health_body)) {}

LoadingServer::~LoadingServer() { stop(); }

Status LoadingServer::listen(const std::string& host, int port) {
  beast::error_code ec;
  const auto address = net::ip::make_address(host, ec);
  if (ec) return make_error("--host " + host + ": not an IP address (" + ec.message() + ")");
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return make_error("cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  port_ = acceptor_.local_endpoint().port();
  accept();
  thread_ = std::thread([this] { ioc_.run(); });
  return {};
}

void LoadingServer::accept() {
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) std::make_shared<LoadingSession>(std::move(socket), health_body_)->start();
    accept();
  });
}

int LoadingServer::hand_over() {
  if (!thread_.joinable() || handed_over_) return -1;
  handed_over_ = true;
  std::promise<int> socket;
  net::post(ioc_, [this, &socket] {
    beast::error_code ec;
    // release() ends the pending accept and takes the socket out of this context without closing it.
    const int fd = acceptor_.release(ec);
    socket.set_value(ec ? -1 : fd);
  });
  return socket.get_future().get();
}

void LoadingServer::stop() {
  if (!thread_.joinable()) return;
  if (!handed_over_) {
    handed_over_ = true;
    net::post(ioc_, [this] {
      beast::error_code ec;
      acceptor_.close(ec);
    });
  }
  thread_.join();  // run() returns once the last session has answered or timed out
}

}  // namespace sluice::server
