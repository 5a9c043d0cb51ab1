#pragma once
// Accepts connections and starts a Session on its own strand for each. When accept fails (out of
// file descriptors, most often) it waits before trying again, longer after each failure, and reports
// the failures at most once per interval: retrying at once spins a core and floods the log.
#include <chrono>
#include <cstdint>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "server/session.h"
#include "util/result.h"

namespace sluice::server {

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(net::io_context& ioc, ServerContext& ctx, const Router& router, SessionRegistry& registry);
  Status open(const std::string& host, int port);
  // Takes over a socket already listening (the loading answers' socket, LoadingServer::hand_over):
  // connections waiting in its backlog are accepted here, none is refused in the handover.
  Status adopt(int listening_fd);
  tcp::endpoint local_endpoint() const;
  void start();
  void stop();  // thread-safe

  static constexpr std::chrono::milliseconds kFirstBackoff{5};
  static constexpr std::chrono::milliseconds kMaxBackoff{1000};
  static constexpr std::chrono::seconds kReportInterval{5};  // one log line at most per interval

 private:
  void do_accept();
  void on_accept_failed(const beast::error_code& ec);
  void on_accepted();
  bool due_report();  // at most one log line per kReportInterval

  net::io_context& ioc_;
  tcp::acceptor acceptor_;
  ServerContext& ctx_;
  const Router& router_;
  SessionRegistry& registry_;
  net::steady_timer retry_timer_;
  std::chrono::milliseconds backoff_{0};  // 0 while accepting works
  uint64_t unreported_failures_ = 0;
  uint64_t failures_in_a_row_ = 0;
  std::chrono::steady_clock::time_point last_report_{};
  bool reported_once_ = false;
  bool streak_reported_ = false;  // the current run of failures has a log line
};

}  // namespace sluice::server
