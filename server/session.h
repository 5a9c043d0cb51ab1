#pragma once
// One client connection: reads requests (keep-alive), routes them, and writes answers — whole
// responses, or server-sent event streams fed by the engine thread. Everything runs on the
// connection's strand; the engine thread only posts into it (through SessionChannel) and never waits.
#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <mutex>
#include <unordered_map>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/context.h"
#include "server/router.h"

namespace sluice::server {

namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;

class SessionRegistry;

class Session : public std::enable_shared_from_this<Session> {
 public:
  // Bytes of events queued for a client before it counts as too slow and its generation is cancelled.
  static constexpr std::size_t kMaxQueuedBytes = 4u << 20;
  // A request's header block (431 above) and its request target (414 above).
  static constexpr std::size_t kMaxHeaderBytes = 64u << 10;
  static constexpr std::size_t kMaxTargetBytes = 8u << 10;

  Session(tcp::socket&& socket, ServerContext& ctx, const Router& router, SessionRegistry& registry);
  ~Session();
  void start();
  // Server shutdown (thread-safe): close when idle, or after the exchange in progress.
  void stop();
  bool closed() const { return closed_flag_.load(); }

 private:
  friend class SessionChannel;
  enum class State { kReading, kReplying, kWaiting, kStreaming, kClosed };

  void do_read();
  void on_header(beast::error_code ec);
  void on_body(beast::error_code ec);
  void handle();
  void run_on_pool(const Handler& handler, const std::shared_ptr<ResponseChannel>& channel);
  void reject(const ApiError& error);
  // `body_checked`: the body was already made valid UTF-8 (off the strand, where large bodies come from).
  void write_reply(const Reply& reply, const std::string& route, bool body_checked = false);
  void finish_exchange();
  void watch_disconnect();
  void client_gone(bool too_slow);
  void close();

  // Channel side, on the strand.
  void deliver_response(uint64_t exchange, Reply reply);
  void deliver_event(uint64_t exchange, std::string event, const std::vector<std::pair<std::string, std::string>>& headers);
  void deliver_end(uint64_t exchange);
  void pump();

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  // The exchange's request; shared (read-only) with its handler when that runs on the work pool.
  std::shared_ptr<HttpRequest> request_ = std::make_shared<HttpRequest>();
  ServerContext& ctx_;
  const Router& router_;
  SessionRegistry& registry_;

  State state_ = State::kReading;
  uint64_t exchange_ = 0;
  std::string route_;
  bool keep_alive_ = true;
  bool stopping_ = false;
  bool watching_ = false;
  std::shared_ptr<std::atomic<bool>> cancelled_;
  std::shared_ptr<std::atomic<bool>> gone_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<std::size_t>> queued_bytes_ = std::make_shared<std::atomic<std::size_t>>(0);

  // Streaming.
  std::unique_ptr<http::response<http::empty_body>> stream_head_;
  std::unique_ptr<http::response_serializer<http::empty_body>> stream_serializer_;
  std::deque<std::string> outbox_;
  std::string in_flight_;
  bool head_written_ = false;
  bool writing_ = false;
  bool end_requested_ = false;
  bool chunked_ = true;  // HTTP/1.0 has no chunked encoding: its stream is the raw events, ended by closing

  std::shared_ptr<http::response<http::string_body>> reply_;
  std::atomic<bool> closed_flag_{false};
};

// Live sessions, so shutdown can reach them.
class SessionRegistry {
 public:
  void add(const std::shared_ptr<Session>& s);
  void remove(Session* s);
  void stop_all();
  std::size_t open_count() const;  // sessions not yet closed

 private:
  mutable std::mutex mutex_;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions_;
};

}  // namespace sluice::server
