#include "server/server.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "server/handlers.h"

namespace sluice::server {

Server::Server(Engine& engine, const ServerOptions& options, ChatPrompt chat)
    : ctx_(engine, options, std::move(chat)),
      router_(make_router(ctx_)),
      ioc_(options.http_threads),
      signals_(ioc_, SIGINT, SIGTERM),
      shutdown_timer_(ioc_),
      listener_(std::make_shared<Listener>(ioc_, ctx_, router_, registry_)),
      work_pool_(options.work_threads, static_cast<std::size_t>(options.work_queue)) {
  ctx_.work_pool = &work_pool_;
  ctx_.request_drain = [this] { net::post(ioc_, [this] { begin_drain(); }); };
}

Server::~Server() = default;

Status Server::listen() {
  Status s = listener_->open(ctx_.options.host, ctx_.options.port);
  if (s) name_replica();
  return s;
}

Status Server::listen_on(int listening_fd) {
  Status s = listener_->adopt(listening_fd);
  if (s) name_replica();
  return s;
}

// Behind a balancer, which replica answered (sluice bench --server groups by it): its --replica-name,
// else the host's name and the bound port.
void Server::name_replica() {
  if (!ctx_.options.replica_name.empty()) {
    ctx_.info.replica = ctx_.options.replica_name;
    return;
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "localhost");
  ctx_.info.replica = std::string(host) + ":" + std::to_string(listener_->local_endpoint().port());
}

tcp::endpoint Server::local_endpoint() const { return listener_->local_endpoint(); }

void Server::request_stop() {
  net::post(ioc_, [this] { begin_shutdown(); });
}

void Server::run() {
  std::function<void(beast::error_code, int)> on_signal = [this, &on_signal](beast::error_code ec, int signo) {
    if (ec) return;
    if (shutting_down_) {
      spdlog::warn("second signal: cancelling in-flight requests now");
      grace_deadline_ = std::chrono::steady_clock::now();
    } else {
      spdlog::info("signal {}: draining, then shutting down", signo);
      begin_drain();
    }
    signals_.async_wait(on_signal);
  };
  signals_.async_wait(on_signal);
  listener_->start();

  std::vector<std::thread> threads;
  for (int i = 1; i < ctx_.options.http_threads; ++i) threads.emplace_back([this] { ioc_.run(); });
  ioc_.run();
  for (auto& t : threads) t.join();
  // Requests still being prepared finish (a generation they submit ends with the engine below); the
  // ones not started are answered 503 by the final run below.
  work_pool_.stop();

  // Whatever still runs in the engine ends now; its last callbacks post into the (stopped) context,
  // which runs briefly once more so connections close cleanly.
  if (!engine_stopped_) ctx_.engine.shutdown();
  engine_stopped_ = true;
  ioc_.restart();
  registry_.stop_all();
  ioc_.run_for(std::chrono::seconds(1));
}

void Server::begin_drain() {
  if (draining_ || shutting_down_) return;
  draining_ = true;
  ctx_.draining.store(true);
  grace_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(ctx_.options.shutdown_grace_s);
  spdlog::info("draining: /health answers 503, new generations are refused, {} in flight", ctx_.engine.metrics().active_sequences);
  poll_drain();
}

void Server::poll_drain() {
  if (shutting_down_) return;
  const EngineMetrics m = ctx_.engine.metrics();
  if ((m.active_sequences == 0 && m.queue_depth == 0) || std::chrono::steady_clock::now() >= grace_deadline_) {
    begin_shutdown();
    return;
  }
  shutdown_timer_.expires_after(std::chrono::milliseconds(20));
  shutdown_timer_.async_wait([this](beast::error_code ec) {
    if (!ec) poll_drain();
  });
}

void Server::begin_shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  ctx_.draining.store(true);
  listener_->stop();
  registry_.stop_all();
  const auto now = std::chrono::steady_clock::now();
  // After a drain the grace it began with is what is left; a direct stop gets the whole grace.
  if (!draining_) grace_deadline_ = now + std::chrono::seconds(ctx_.options.shutdown_grace_s);
  hard_deadline_ = grace_deadline_ + std::chrono::seconds(3);
  poll_shutdown();
}

void Server::poll_shutdown() {
  const auto now = std::chrono::steady_clock::now();
  if (registry_.open_count() == 0 || now >= hard_deadline_) {
    signals_.cancel();
    ioc_.stop();
    return;
  }
  if (now >= grace_deadline_ && !engine_stopped_) {
    spdlog::info("cancelling {} in-flight connection(s)", registry_.open_count());
    engine_stopped_ = true;
    work_pool_.cancel_queued();  // requests not yet prepared are answered 503
    ctx_.engine.shutdown();  // running and waiting requests finish as cancelled; streams end with [DONE]
    hard_deadline_ = now + std::chrono::seconds(3);
  }
  shutdown_timer_.expires_after(std::chrono::milliseconds(20));
  shutdown_timer_.async_wait([this](beast::error_code ec) {
    if (!ec) poll_shutdown();
  });
}

}  // namespace sluice::server
