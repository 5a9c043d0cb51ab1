#pragma once
// The Responses API's answers, made from a chat completion's output: the response object
// (object: "response", output items — reasoning, message with output_text, function_call — and usage
// in input/output tokens), and its typed stream: response.created, response.in_progress, then per
// output item output_item.added, content_part.added, output_text.delta / reasoning_text.delta /
// function_call_arguments.delta, their .done events, output_item.done, and at the end
// response.completed (response.incomplete when max_output_tokens cut it short, response.failed when
// generation failed), every event with its sequence_number.
#include <cstdint>
#include <optional>
#include <string>

#include <rapidjson/document.h>

#include "server/response_store.h"
#include "server/translating_channel.h"

namespace sluice::server {

class ResponsesTranslator final : public ApiTranslator {
 public:
  // `settings`: what the request set that the response object echoes (ResponsesRequest::settings).
  // With a `store`, a finished answer is kept there under its id: `conversation` (the request's chat
  // messages) with the answer's assistant turn appended, and the response object.
  ResponsesTranslator(std::string model, const rapidjson::Value& settings, ResponseStore* store = nullptr,
                      std::string conversation = {});

  std::string whole_answer(const ChatOutput& answer) override;
  std::string error_body(const ApiError& error) override { return error.to_json(); }
  std::string stream_chunk(const ChatOutput& chunk) override;
  std::string stream_end() override;

  const std::string& id() const { return id_; }

 private:
  enum class ItemKind { kNone, kReasoning, kMessage, kCall };
  struct OpenItem {
    ItemKind kind = ItemKind::kNone;
    std::string id;
    int output_index = 0;
    std::string text;  // the reasoning, the message's text, or the call's arguments
    std::string call_id, name;
    int chat_index = -1;  // the chat stream's index of the call
  };

  // The response object with these output items; `status` in_progress, completed, incomplete or failed.
  std::string response_json(const char* status, const rapidjson::Value& output, const std::optional<ChatUsage>& usage,
                            const ApiError* error, const char* incomplete_reason) const;
  std::string event(rapidjson::Document& doc);  // adds sequence_number, frames it
  std::string begin_stream();
  std::string open(ItemKind kind, std::string call_id = {}, std::string name = {}, int chat_index = -1);
  std::string append(std::string_view text);
  std::string close(const char* status);
  void remember(const rapidjson::Value& output, const std::string& response) const;

  std::string id_;
  int64_t created_at_;
  std::string model_;
  rapidjson::Document settings_;
  ResponseStore* store_;
  std::string conversation_;
  // Streamed state.
  bool begun_ = false;
  bool ended_ = false;
  int sequence_ = 0;
  OpenItem item_;
  std::string held_space_;  // whitespace before any message text: shown only if text follows
  bool made_calls_ = false;
  rapidjson::Document output_{rapidjson::kArrayType};  // the items closed so far
  std::optional<ChatUsage> usage_;
  std::optional<std::string> finish_reason_;
};

}  // namespace sluice::server
