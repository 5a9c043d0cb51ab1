#pragma once
// The HTTP server: a listener, sessions on strands, a pool of I/O threads, and graceful shutdown on
// SIGINT/SIGTERM or POST /admin/drain: first it drains — still listening, /health answers 503 and new
// generations are refused (a balancer sends them elsewhere) while the ones in flight finish — then,
// once the engine is idle or --shutdown-grace has passed, it stops accepting, cancels what is left
// and exits. A second signal cancels at once.
#include <atomic>
#include <memory>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "server/context.h"
#include "server/listener.h"
#include "server/router.h"
#include "server/session.h"
#include "server/work_pool.h"

namespace sluice::server {

class Server {
 public:
  Server(Engine& engine, const ServerOptions& options, ChatPrompt chat);
  ~Server();

  Status listen();                      // binds host:port
  Status listen_on(int listening_fd);   // takes over a socket already bound and listening
  tcp::endpoint local_endpoint() const; // the bound address (port 0 → the port chosen)
  // Serves until a signal or request_stop(); returns after the shutdown completes and the engine has
  // stopped.
  void run();
  void request_stop();                  // thread-safe

 private:
  void name_replica();
  void begin_drain();
  void poll_drain();
  void begin_shutdown();
  void poll_shutdown();

  ServerContext ctx_;
  Router router_;
  SessionRegistry registry_;
  net::io_context ioc_;
  net::signal_set signals_;
  net::steady_timer shutdown_timer_;
  std::shared_ptr<Listener> listener_;
  bool draining_ = false;
  bool shutting_down_ = false;
  bool engine_stopped_ = false;
  std::chrono::steady_clock::time_point grace_deadline_;
  std::chrono::steady_clock::time_point hard_deadline_;
  // Last, so it stops (its jobs hold sessions and use the context) before anything above is destroyed.
  WorkPool work_pool_;
};

}  // namespace sluice::server
