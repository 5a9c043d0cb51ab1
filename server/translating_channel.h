#pragma once
// A ResponseChannel that stands between a chat completion (a GenerationJob, which writes OpenAI chat
// JSON) and a client that speaks another API. The job's whole answer, its streamed chunks and its
// errors are read back (chat_output.h) and handed to the API's translator, whose text goes to the
// client's own channel. Generation, stop strings, tool-call parsing and the reasoning split stay in
// the job; a translator only reshapes what they produced.
#include <memory>
#include <string>

#include "server/chat_output.h"
#include "server/response_channel.h"

namespace sluice::server {

// One API's shapes. Streamed methods return framed server-sent events ("" for nothing to send).
class ApiTranslator {
 public:
  virtual ~ApiTranslator() = default;
  virtual void set_prompt_tokens(int /*tokens*/) {}
  virtual std::string whole_answer(const ChatOutput& answer) = 0;  // the 200 body of a non-streamed request
  virtual std::string error_body(const ApiError& error) = 0;       // an error answered before any event
  virtual std::string stream_chunk(const ChatOutput& chunk) = 0;   // one chat chunk (or a mid-stream error)
  virtual std::string stream_end() = 0;                            // the chat stream ended
};

class TranslatingChannel final : public ResponseChannel {
 public:
  TranslatingChannel(std::shared_ptr<ResponseChannel> client, std::unique_ptr<ApiTranslator> translator)
      : client_(std::move(client)), translator_(std::move(translator)) {}

  void respond(int status, std::string body) override;
  bool send_event(std::string event) override;
  void end_stream() override;
  std::shared_ptr<std::atomic<bool>> cancelled() const override { return client_->cancelled(); }
  void set_header(std::string name, std::string value) override { client_->set_header(std::move(name), std::move(value)); }
  void note_prompt_tokens(int tokens) override { translator_->set_prompt_tokens(tokens); }

 private:
  bool forward(std::string events);

  std::shared_ptr<ResponseChannel> client_;
  std::unique_ptr<ApiTranslator> translator_;
  bool client_gone_ = false;
};

// A fresh id: `prefix` and 24 letters and digits, unique in the process (resp_…, msg_…, toolu_…).
std::string make_api_id(std::string_view prefix);

// An SSE event with an `event:` name line, as the Responses and Messages APIs frame theirs.
std::string named_sse_event(std::string_view name, std::string_view json);

}  // namespace sluice::server
