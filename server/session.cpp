#include "server/session.h"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>

#include <spdlog/spdlog.h>

#include "server/anthropic_output.h"  // error_reply_for
#include "server/http_policy.h"
#include "server/utf8_output.h"
#include "server/work_pool.h"

namespace sluice::server {
namespace {

// Beast reports one error for a header block over its limit. Its parser takes the request line as soon
// as that line is complete, so an empty target means the line alone did not fit: then, or when the
// target it took is over the target limit, the URL is what is too long.
bool target_too_long(const http::request_parser<http::string_body>& parser, std::size_t limit) {
  const auto target = parser.get().target();
  return target.empty() || target.size() > limit;
}

std::optional<Reply> call_handler(const Handler& handler, const HttpRequest& request,
                                  const std::shared_ptr<ResponseChannel>& channel) {
  try {
    return handler(request, channel);
  } catch (const std::exception& e) {
    return Reply::error(ApiError::server_error(e.what()));
  } catch (...) {
    return Reply::error(ApiError::server_error("internal error"));
  }
}

}  // namespace

// What the engine thread holds for one exchange: posts everything into the session's strand.
class SessionChannel final : public ResponseChannel {
 public:
  SessionChannel(std::shared_ptr<Session> session, uint64_t exchange)
      : session_(std::move(session)), exchange_(exchange), cancelled_(session_->cancelled_),
        gone_(session_->gone_), queued_(session_->queued_bytes_) {}

  void respond(int status, std::string body) override {
    make_valid_utf8(body);  // here, on the engine thread, not on the connection's strand
    net::post(session_->stream_.get_executor(),
              [s = session_, ex = exchange_, status, b = std::move(body), h = headers_]() mutable {
                s->deliver_response(ex, Reply{status, std::move(b), "application/json", std::move(h)});
              });
  }

  void set_header(std::string name, std::string value) override { headers_.emplace_back(std::move(name), std::move(value)); }

  bool send_event(std::string event) override {
    if (gone_->load()) return false;
    make_valid_utf8(event);
    const std::size_t n = event.size();
    if (queued_->fetch_add(n) + n > Session::kMaxQueuedBytes) {
      queued_->fetch_sub(n);
      gone_->store(true);
      net::post(session_->stream_.get_executor(), [s = session_] { s->client_gone(/*too_slow=*/true); });
      return false;
    }
    // The stream's head goes out with the first event: the headers travel with it (a copy; set_header
    // is done before the first event).
    net::post(session_->stream_.get_executor(), [s = session_, ex = exchange_, e = std::move(event), h = headers_]() mutable {
      s->deliver_event(ex, std::move(e), h);
    });
    return true;
  }

  void end_stream() override {
    net::post(session_->stream_.get_executor(), [s = session_, ex = exchange_] { s->deliver_end(ex); });
  }

  std::shared_ptr<std::atomic<bool>> cancelled() const override { return cancelled_; }

 private:
  std::shared_ptr<Session> session_;
  uint64_t exchange_;
  std::shared_ptr<std::atomic<bool>> cancelled_;
  std::shared_ptr<std::atomic<bool>> gone_;
  std::shared_ptr<std::atomic<std::size_t>> queued_;
  std::vector<std::pair<std::string, std::string>> headers_;
};

Session::Session(tcp::socket&& socket, ServerContext& ctx, const Router& router, SessionRegistry& registry)
    : stream_(std::move(socket)), ctx_(ctx), router_(router), registry_(registry) {
  ++ctx_.counters.open_connections;
}

Session::~Session() {
  registry_.remove(this);
  --ctx_.counters.open_connections;
}

void Session::start() {
  registry_.add(shared_from_this());
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
}

void Session::stop() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    self->stopping_ = true;
    if (self->state_ == State::kReading) self->close();
  });
}

void Session::do_read() {
  if (stopping_) return close();
  state_ = State::kReading;
  parser_.emplace();
  parser_->body_limit(ctx_.options.body_limit);
  parser_->header_limit(kMaxHeaderBytes);
  // The idle timeout covers the wait for the next request's header; the read timeout its body.
  stream_.expires_after(std::chrono::seconds(ctx_.options.idle_timeout_s));
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
}

void Session::on_header(beast::error_code ec) {
  if (!ec && state_ != State::kClosed && parser_->get().target().size() > kMaxTargetBytes) {  // before the body
    stream_.expires_never();
    return reject(ApiError::uri_too_long(kMaxTargetBytes));
  }
  if (ec || parser_->is_done()) return on_body(ec);
  stream_.expires_after(std::chrono::seconds(ctx_.options.read_timeout_s));
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec2, std::size_t) { self->on_body(ec2); });
}

void Session::on_body(beast::error_code ec) {
  stream_.expires_never();
  if (state_ == State::kClosed) return;
  if (ec) {
    if (ec == http::error::body_limit) return reject(ApiError::payload_too_large(ctx_.options.body_limit));
    if (ec == http::error::header_limit) {
      return reject(target_too_long(*parser_, kMaxTargetBytes) ? ApiError::uri_too_long(kMaxTargetBytes)
                                                               : ApiError::header_fields_too_large(kMaxHeaderBytes));
    }
    if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return reject(ApiError::bad_request("malformed HTTP request: " + ec.message()));
    }
    return close();  // end of stream, timeout, reset
  }
  request_ = std::make_shared<HttpRequest>(parser_->release());
  handle();
}

// An error about the request itself (not its route): answered, then the connection closes, since
// what follows in the stream cannot be trusted to start a request.
void Session::reject(const ApiError& error) {
  keep_alive_ = false;
  ++exchange_;
  // The answer speaks the request's HTTP version when its header got parsed.
  const unsigned version = parser_ && parser_->is_header_done() ? parser_->get().version() : 11;
  request_ = std::make_shared<HttpRequest>();
  request_->version(version == 10 ? 10 : 11);
  write_reply(Reply::error(error), "other");
}

void Session::handle() {
  ++exchange_;
  keep_alive_ = request_->keep_alive() && !stopping_;
  route_ = "other";
  const std::string path(target_path(std::string_view(request_->target().data(), request_->target().size())));
  SPDLOG_DEBUG("{} {}", std::string(request_->method_string()), path);

  if (request_->method() == http::verb::options) {
    auto res = std::make_shared<http::response<http::string_body>>(ctx_.cors.preflight(*request_));
    ctx_.counters.count_request("preflight", res->result_int());
    res->keep_alive(keep_alive_);
    state_ = State::kReplying;
    reply_ = res;
    stream_.expires_after(std::chrono::seconds(ctx_.options.write_timeout_s));
    http::async_write(stream_, *reply_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->stream_.expires_never();
      self->reply_.reset();
      ec ? self->close() : self->finish_exchange();
    });
    return;
  }

  Router::Match match = router_.find(request_->method(), path);
  if (!is_authorized(*request_, path, ctx_.options.api_key)) {
    return write_reply(error_reply_for(path, ApiError::unauthorized()), match.route);
  }
  if (!match.handler) return write_reply(error_reply_for(path, *match.error), match.route);

  route_ = match.route;
  cancelled_ = std::make_shared<std::atomic<bool>>(false);
  gone_->store(false);
  queued_bytes_->store(0);
  outbox_.clear();
  head_written_ = writing_ = end_requested_ = false;
  state_ = State::kWaiting;

  auto channel = std::make_shared<SessionChannel>(shared_from_this(), exchange_);
  if (match.work == Work::kPool && ctx_.work_pool) return run_on_pool(*match.handler, channel);
  std::optional<Reply> reply = call_handler(*match.handler, *request_, channel);
  if (reply) return write_reply(*reply, route_);
  watch_disconnect();
}

// The handler runs on a pool thread; its reply (if it answers at once) comes back through the strand.
// Meanwhile the session waits as for a generation: a client that hangs up closes it, and a job whose
// client is gone before it starts is skipped. The job shares the request and keeps the session alive.
void Session::run_on_pool(const Handler& handler, const std::shared_ptr<ResponseChannel>& channel) {
  auto& preparing = ctx_.counters.preparing_requests;
  auto job = [self = shared_from_this(), exchange = exchange_, handler = &handler, request = request_, channel,
              &preparing] {
    struct Done {
      std::atomic<int64_t>& count;
      ~Done() { --count; }
    } done{preparing};
    if (self->gone_->load()) return;
    std::optional<Reply> reply = call_handler(*handler, *request, channel);
    if (!reply) return;  // the channel answers
    if (!reply->binary) make_valid_utf8(reply->body);
    net::post(self->stream_.get_executor(), [self, exchange, r = std::move(*reply)]() mutable {
      self->deliver_response(exchange, std::move(r));
    });
  };
  // Cancelled by shutdown before it started: the client still gets an answer.
  auto dropped = [self = shared_from_this(), exchange = exchange_, &preparing] {
    --preparing;
    net::post(self->stream_.get_executor(), [self, exchange] {
      self->deliver_response(exchange, Reply::error(ApiError::shutting_down()));
    });
  };
  ++preparing;
  if (!ctx_.work_pool->submit(std::move(job), std::move(dropped))) {
    --preparing;
    ++ctx_.counters.rejected_overloaded;
    const std::string_view path = target_path(std::string_view(request_->target().data(), request_->target().size()));
    return write_reply(error_reply_for(path, ApiError::overloaded("the server is busy: too many requests are being prepared")),
                       route_);
  }
  watch_disconnect();
}

void Session::write_reply(const Reply& reply, const std::string& route, bool body_checked) {
  state_ = State::kReplying;
  ctx_.counters.count_request(route, reply.status);
  auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(reply.status),
                                                                  request_->version());
  res->set(http::field::server, "sluice");
  res->set(http::field::content_type, reply.content_type);
  for (const auto& [name, value] : reply.headers) res->set(name, value);
  if (reply.status == 401) res->set(http::field::www_authenticate, "Bearer");
  if (reply.status == 405) res->set(http::field::allow, request_->method() == http::verb::get ? "POST" : "GET");
  ctx_.cors.apply(*request_, *res);
  res->keep_alive(keep_alive_);
  res->body() = reply.body;
  if (!body_checked && !reply.binary) make_valid_utf8(res->body());
  res->prepare_payload();
  reply_ = res;
  stream_.expires_after(std::chrono::seconds(ctx_.options.write_timeout_s));
  http::async_write(stream_, *reply_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
    self->stream_.expires_never();
    self->reply_.reset();
    ec ? self->close() : self->finish_exchange();
  });
}

void Session::finish_exchange() {
  if (!keep_alive_ || stopping_) return close();
  do_read();
}

// While a completion is generated nothing is read, so a client that hangs up would go unnoticed until
// the first write. Waiting for readability notices it at once. Readiness can be spurious (the reactor
// remembers an edge whose bytes an earlier read already took), so a peek decides: 0 bytes is EOF.
void Session::watch_disconnect() {
  if (watching_ || state_ == State::kClosed) return;
  watching_ = true;
  stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
    self->watching_ = false;
    if (ec == net::error::operation_aborted || self->state_ == State::kClosed) return;
    if (self->state_ != State::kWaiting && self->state_ != State::kStreaming) return;
    if (!ec) {
      char byte;
      const ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) return;  // a pipelined request: the next read takes it
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return self->watch_disconnect();
    }
    self->client_gone(/*too_slow=*/false);
  });
}

void Session::client_gone(bool too_slow) {
  if (state_ != State::kWaiting && state_ != State::kStreaming) return;
  if (too_slow) ++ctx_.counters.slow_client_cancels;
  else ++ctx_.counters.disconnect_cancels;
  SPDLOG_DEBUG("client {}; cancelling its generation", too_slow ? "too slow" : "disconnected");
  close();
}

void Session::close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  closed_flag_.store(true);
  gone_->store(true);
  if (cancelled_) cancelled_->store(true);
  outbox_.clear();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
}

void Session::deliver_response(uint64_t exchange, Reply reply) {
  if (exchange != exchange_ || state_ != State::kWaiting) return;
  write_reply(reply, route_, /*body_checked=*/true);
}

void Session::deliver_event(uint64_t exchange, std::string event, const std::vector<std::pair<std::string, std::string>>& headers) {
  if (exchange != exchange_ || (state_ != State::kWaiting && state_ != State::kStreaming)) {
    queued_bytes_->fetch_sub(event.size());
    return;
  }
  outbox_.push_back(std::move(event));
  if (state_ == State::kStreaming) return pump();

  state_ = State::kStreaming;
  ctx_.counters.count_request(route_, 200);
  stream_head_ = std::make_unique<http::response<http::empty_body>>(http::status::ok, request_->version());
  stream_head_->set(http::field::server, "sluice");
  stream_head_->set(http::field::content_type, "text/event-stream");
  stream_head_->set(http::field::cache_control, "no-cache");
  stream_head_->set("X-Accel-Buffering", "no");
  for (const auto& [name, value] : headers) stream_head_->set(name, value);
  ctx_.cors.apply(*request_, *stream_head_);
  chunked_ = request_->version() >= 11;
  if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the end of the stream is the end of the connection
  stream_head_->keep_alive(keep_alive_);
  if (chunked_) stream_head_->chunked(true);
  else stream_head_->set(http::field::connection, "close");
  stream_serializer_ = std::make_unique<http::response_serializer<http::empty_body>>(*stream_head_);
  writing_ = true;
  stream_.expires_after(std::chrono::seconds(ctx_.options.write_timeout_s));
  http::async_write_header(stream_, *stream_serializer_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
    self->stream_.expires_never();
    self->writing_ = false;
    if (ec) return self->client_gone(ec == beast::error::timeout);
    self->head_written_ = true;
    self->pump();
  });
}

void Session::deliver_end(uint64_t exchange) {
  if (exchange != exchange_) return;
  if (state_ == State::kWaiting) {  // a stream that never sent an event: answer plainly
    return write_reply(Reply::error(ApiError::server_error("the generation ended without output")), route_);
  }
  if (state_ != State::kStreaming) return;
  end_requested_ = true;
  pump();
}

void Session::pump() {
  if (state_ != State::kStreaming || !head_written_ || writing_) return;
  if (!outbox_.empty()) {
    // Everything queued goes out as one chunk: a client that reads slowly gets fewer, larger writes.
    in_flight_.clear();
    for (auto& e : outbox_) in_flight_ += e;
    outbox_.clear();
    writing_ = true;
    stream_.expires_after(std::chrono::seconds(ctx_.options.write_timeout_s));
    auto on_written = [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->stream_.expires_never();
      self->writing_ = false;
      self->queued_bytes_->fetch_sub(std::min(self->queued_bytes_->load(), self->in_flight_.size()));
      if (ec) return self->client_gone(ec == beast::error::timeout);
      self->pump();
    };
    if (chunked_) net::async_write(stream_, http::make_chunk(net::buffer(in_flight_)), std::move(on_written));
    else net::async_write(stream_, net::buffer(in_flight_), std::move(on_written));
    return;
  }
  if (!end_requested_) return;
  if (!chunked_) return close();  // everything is written: closing ends the body
  static const std::string kLastChunk = "0\r\n\r\n";
  writing_ = true;
  stream_.expires_after(std::chrono::seconds(ctx_.options.write_timeout_s));
  net::async_write(stream_, net::buffer(kLastChunk), [self = shared_from_this()](beast::error_code ec, std::size_t) {
    self->stream_.expires_never();
    self->writing_ = false;
    ec ? self->close() : self->finish_exchange();
  });
}

void SessionRegistry::add(const std::shared_ptr<Session>& s) {
  std::lock_guard lock(mutex_);
  sessions_[s.get()] = s;
}

void SessionRegistry::remove(Session* s) {
  std::lock_guard lock(mutex_);
  sessions_.erase(s);
}

void SessionRegistry::stop_all() {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(mutex_);
    for (auto& [ptr, weak] : sessions_)
      if (auto s = weak.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) s->stop();
}

std::size_t SessionRegistry::open_count() const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& [ptr, weak] : sessions_)
    if (auto s = weak.lock(); s && !s->closed()) ++n;
  return n;
}

}  // namespace sluice::server
