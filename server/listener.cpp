#include "server/listener.h"

#include <boost/asio/strand.hpp>
#include <spdlog/spdlog.h>

namespace sluice::server {

Listener::Listener(net::io_context& ioc, ServerContext& ctx, const Router& router, SessionRegistry& registry)
    : ioc_(ioc), acceptor_(net::make_strand(ioc)), ctx_(ctx), router_(router), registry_(registry) {}

Status Listener::open(const std::string& host, int port) {
  beast::error_code ec;
  auto address = net::ip::make_address(host, ec);
  if (ec) return make_error("--host " + host + ": not an IP address (" + ec.message() + ")");
  tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return make_error("cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  return {};
}

tcp::endpoint Listener::local_endpoint() const {
  beast::error_code ec;
  return acceptor_.local_endpoint(ec);
}

void Listener::start() { do_accept(); }

void Listener::stop() {
  net::post(acceptor_.get_executor(), [self = shared_from_this()] {
    beast::error_code ec;
    self->acceptor_.close(ec);
  });
}

void Listener::do_accept() {
  acceptor_.async_accept(net::make_strand(ioc_), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !self->acceptor_.is_open()) return;
    if (ec) {
      spdlog::warn("accept failed: {}", ec.message());
    } else {
      socket.set_option(tcp::no_delay(true), ec);
      std::make_shared<Session>(std::move(socket), self->ctx_, self->router_, self->registry_)->start();
    }
    self->do_accept();
  });
}

}  // namespace sluice::server
