#pragma once
// Anthropic's Messages API answers, made from a chat completion's output: the message object
// (content blocks thinking / text / tool_use with its input parsed to an object, stop_reason end_turn
// / max_tokens / stop_sequence / tool_use, usage), its event stream (message_start, ping, per block
// content_block_start, content_block_delta with thinking_delta / text_delta / input_json_delta,
// content_block_stop, then message_delta with the stop reason and usage, message_stop), and errors
// in its shape: {"type":"error","error":{"type","message"}}.
#include <optional>
#include <string>

#include "server/router.h"
#include "server/translating_channel.h"

namespace sluice::server {

// {"type":"error","error":{"type":…,"message":…}}, the type from the status (invalid_request_error,
// authentication_error, not_found_error, request_too_large, overloaded_error, api_error, ...).
std::string anthropic_error_json(const ApiError& error);
Reply anthropic_error_reply(const ApiError& error);
// An error the connection answers itself (401, 405, 503) in the shape the route's API speaks:
// Anthropic's on /v1/messages (and count_tokens), OpenAI's everywhere else.
Reply error_reply_for(std::string_view path, const ApiError& error);

class MessagesTranslator final : public ApiTranslator {
 public:
  explicit MessagesTranslator(std::string model);

  void set_prompt_tokens(int tokens) override { prompt_tokens_ = tokens; }
  std::string whole_answer(const ChatOutput& answer) override;
  std::string error_body(const ApiError& error) override { return anthropic_error_json(error); }
  std::string stream_chunk(const ChatOutput& chunk) override;
  std::string stream_end() override;

 private:
  enum class BlockKind { kNone, kThinking, kText, kToolUse };

  std::string begin_stream();
  std::string open(BlockKind kind, const std::string& call_id = {}, const std::string& name = {});
  std::string append(std::string_view text);
  std::string close();

  std::string id_;
  std::string model_;
  int prompt_tokens_ = 0;
  bool begun_ = false;
  bool ended_ = false;
  BlockKind block_ = BlockKind::kNone;
  int block_index_ = -1;  // the open (or last) block's index
  int call_index_ = -1;   // the chat stream's index of the open tool_use block
  std::string held_space_;
  bool made_calls_ = false;
  std::optional<ChatUsage> usage_;
  std::optional<std::string> finish_reason_;
  std::optional<std::string> stop_sequence_;
};

}  // namespace sluice::server
