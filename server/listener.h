#pragma once
// Accepts connections and starts a Session on its own strand for each.
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "server/session.h"
#include "util/result.h"

namespace sluice::server {

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(net::io_context& ioc, ServerContext& ctx, const Router& router, SessionRegistry& registry);
  Status open(const std::string& host, int port);
  tcp::endpoint local_endpoint() const;
  void start();
  void stop();  // thread-safe

 private:
  void do_accept();

  net::io_context& ioc_;
  tcp::acceptor acceptor_;
  ServerContext& ctx_;
  const Router& router_;
  SessionRegistry& registry_;
};

}  // namespace sluice::server
