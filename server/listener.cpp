#include "server/listener.h"

#include <sys/socket.h>

#include <boost/asio/strand.hpp>
#include <spdlog/spdlog.h>

namespace sluice::server {

Listener::Listener(net::io_context& ioc, ServerContext& ctx, const Router& router, SessionRegistry& registry)
    : ioc_(ioc), acceptor_(net::make_strand(ioc)), ctx_(ctx), router_(router), registry_(registry),
      retry_timer_(acceptor_.get_executor()) {}

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

Status Listener::adopt(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return make_error("cannot adopt the listening socket");
  beast::error_code ec;
  acceptor_.assign(address.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
  if (ec) return make_error("cannot adopt the listening socket: " + ec.message());
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
    self->retry_timer_.cancel();
  });
}

void Listener::do_accept() {
  acceptor_.async_accept(net::make_strand(ioc_), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !self->acceptor_.is_open()) return;
    if (ec) return self->on_accept_failed(ec);
    self->on_accepted();
    socket.set_option(tcp::no_delay(true), ec);
    std::make_shared<Session>(std::move(socket), self->ctx_, self->router_, self->registry_)->start();
    self->do_accept();
  });
}

void Listener::on_accept_failed(const beast::error_code& ec) {
  backoff_ = backoff_.count() == 0 ? kFirstBackoff : std::min(backoff_ * 2, kMaxBackoff);
  ++unreported_failures_;
  ++failures_in_a_row_;
  if (due_report()) {
    spdlog::warn("accept failed {} time(s) since the last report: {} (retrying after up to {} ms)",
                 unreported_failures_, ec.message(), kMaxBackoff.count());
    unreported_failures_ = 0;
    streak_reported_ = true;
  }
  retry_timer_.expires_after(backoff_);
  retry_timer_.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
    if (wait_ec || !self->acceptor_.is_open()) return;
    self->do_accept();
  });
}

void Listener::on_accepted() {
  if (failures_in_a_row_ == 0) return;
  // Only a streak whose failures were reported says it ended, so a flapping accept logs at most two
  // lines per interval; failures not reported yet stay counted for the next report.
  if (streak_reported_) spdlog::info("accepting again after {} failed accept(s) in a row", failures_in_a_row_);
  streak_reported_ = false;
  failures_in_a_row_ = 0;
  backoff_ = std::chrono::milliseconds(0);
}

bool Listener::due_report() {
  const auto now = std::chrono::steady_clock::now();
  if (reported_once_ && now - last_report_ < kReportInterval) return false;
  reported_once_ = true;
  last_report_ = now;
  return true;
}

}  // namespace sluice::server
