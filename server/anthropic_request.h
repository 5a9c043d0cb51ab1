#pragma once
// Anthropic's Messages API request (POST /v1/messages, what Claude Code and other coding agents speak)
// → the equivalent chat completion request. What maps:
//   system (a string or text blocks) → a leading system message; messages with content as a string
//   or blocks: text; tool_use {id, name, input} in assistant turns → tool_calls (input as JSON text);
//   tool_result {tool_use_id, content} in user turns → tool messages (placed before the turn's text,
//   where chat templates expect them); thinking blocks → the assistant's reasoning_content;
//   tools {name, description, input_schema} → function tools; tool_choice auto / any / tool / none →
//   auto / required / a named function / none, disable_parallel_tool_use → parallel_tool_calls false;
//   max_tokens (required, as there), stop_sequences → stop, temperature / top_p / top_k;
//   thinking {type: enabled | disabled} → enable_thinking (absent: the server's --thinking).
// Images, documents and Anthropic's server tools (web search, code execution, ...) are a 400 naming
// the block or tool.
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"

namespace sluice::server {

struct MessagesRequest {
  std::string chat_body;  // the chat completion request (JSON text)
  bool stream = false;
};

// `counting`: for /v1/messages/count_tokens, where max_tokens is not asked for.
ApiResult<MessagesRequest> translate_messages_request(std::string_view body, bool counting = false);

// A chat request's error in the Messages API's words (stop → stop_sequences, tools[0].function.parameters
// → tools[0].input_schema).
ApiError messages_error_from_chat(ApiError error);

}  // namespace sluice::server
