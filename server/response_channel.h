#pragma once
// How a handler that answers later (a completion) talks back to its connection. The session implements
// it; every method is thread-safe (the engine thread calls them) and never blocks: work is posted into
// the connection's strand.
#include <atomic>
#include <memory>
#include <string>

namespace sluice::server {

class ResponseChannel {
 public:
  virtual ~ResponseChannel() = default;
  // A complete, non-streamed JSON answer. Ends the exchange.
  virtual void respond(int status, std::string json_body) = 0;
  // One server-sent event (already framed). The first call sends the stream's headers. Returns false
  // when the client is gone or is not reading fast enough (its queue is full): stop generating.
  virtual bool send_event(std::string event) = 0;
  // Ends the stream. Ends the exchange.
  virtual void end_stream() = 0;
  // Set when the client disconnects; shared with the engine request so generation stops at once.
  virtual std::shared_ptr<std::atomic<bool>> cancelled() const = 0;
  // A response header for this exchange (the routing key), set before anything is sent — by the
  // handler, before the generation is submitted.
  virtual void set_header(std::string name, std::string value) = 0;
  // The prompt's length in tokens, told before the generation is submitted: an API that reports it
  // up front (Anthropic's message_start) reads it here; a connection has no use for it.
  virtual void note_prompt_tokens(int /*tokens*/) {}
};

}  // namespace sluice::server
