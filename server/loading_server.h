#pragma once
// What `sluice serve` answers while the model is still being fetched and loaded (a hub model's
// download can take minutes): every request gets 503 with Retry-After, /health a JSON body saying
// what is happening (the download's progress). It owns the port until the real server takes it:
// hand_over() gives the listening socket itself to the server (connections waiting to be accepted go
// with it), and stop() then lets the answers in flight finish (a stalled client is cut after 2 s) —
// no connection is refused or dropped in the handover.
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "util/result.h"

namespace sluice::server {

class LoadingServer {
 public:
  // health_body: the JSON of /health now (called on the server's thread for each request).
  explicit LoadingServer(std::function<std::string()> health_body);
  ~LoadingServer();  // stop()s
  LoadingServer(const LoadingServer&) = delete;
  LoadingServer& operator=(const LoadingServer&) = delete;

  Status listen(const std::string& host, int port);  // binds and starts answering on its own thread
  unsigned short port() const { return port_; }      // the bound port (port 0 → the one chosen)
  // Stops accepting and returns the listening socket (the caller owns it), or -1 when not listening.
  int hand_over();
  void stop();  // closes the port if not handed over, then waits for open answers; idempotent

 private:
  void accept();

  std::function<std::string()> health_body_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_{ioc_};
  std::thread thread_;
  unsigned short port_ = 0;
  bool handed_over_ = false;
};

}  // namespace sluice::server
