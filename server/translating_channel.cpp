#include "server/translating_channel.h"

#include <atomic>
#include <random>

#include "server/sse.h"

namespace sluice::server {

void TranslatingChannel::respond(int status, std::string body) {
  if (status == 200) return client_->respond(200, translator_->whole_answer(read_chat_completion(body)));
  ApiError error = read_api_error(status, body);
  client_->respond(error.status, translator_->error_body(error));
}

bool TranslatingChannel::forward(std::string events) {
  if (client_gone_) return false;
  if (!events.empty() && !client_->send_event(std::move(events))) client_gone_ = true;
  return !client_gone_ && !client_->cancelled()->load();
}

bool TranslatingChannel::send_event(std::string event) {
  std::optional<ChatOutput> chunk = read_chat_chunk(event);
  if (!chunk) return forward("");  // [DONE]: the API's own ending comes with end_stream
  return forward(translator_->stream_chunk(*chunk));
}

void TranslatingChannel::end_stream() {
  forward(translator_->stream_end());
  client_->end_stream();
}

std::string make_api_id(std::string_view prefix) {
  static const char* kAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t high = rng();
  uint64_t low = ++counter ^ (rng() << 20);  // the counter keeps two ids apart even if the draws repeat
  std::string id(prefix);
  for (int i = 0; i < 12; ++i, high /= 62) id += kAlphabet[high % 62];
  for (int i = 0; i < 12; ++i, low /= 62) id += kAlphabet[low % 62];
  return id;
}

std::string named_sse_event(std::string_view name, std::string_view json) {
  std::string out = "event: ";
  out.append(name);
  out += '\n';
  out += sse_event(json);
  return out;
}

}  // namespace sluice::server
