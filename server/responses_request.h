#pragma once
// OpenAI's Responses API request (POST /v1/responses) → the equivalent chat completion request, which
// the chat machinery then serves. What maps:
//   input (a string, or items: messages with input_text/output_text parts, function_call,
//   function_call_output, reasoning) → messages; instructions → a leading system message;
//   tools (flat {type:"function", name, parameters}) and tool_choice → the chat forms;
//   text.format (json_schema / json_object) → response_format; max_output_tokens → max_tokens;
//   reasoning.effort → reasoning_effort, and enable_thinking (off for "none", on for the others).
// previous_response_id continues a stored response (response_store.h): its conversation comes before
// this input (its instructions do not carry over, as in OpenAI's API); an unknown id is a 404 naming
// the field. conversation and background are a 400 naming the field, as are input items and tools of
// kinds the server does not run (images, files, built-in tools). Errors name the Responses API's own
// fields (input[2].content[0].text).
#include <string>
#include <string_view>

#include <rapidjson/document.h>

#include "server/api_error.h"
#include "server/response_store.h"

namespace sluice::server {

struct ResponsesRequest {
  std::string chat_body;        // the chat completion request (JSON text)
  bool stream = false;
  rapidjson::Document settings;  // the request's settings the response object echoes (model, tools, text, ...)
  bool store = true;             // keep the answer (store: false does not)
  std::string conversation;      // the chat messages without the instructions (JSON array), to store
};

// `store` null: nothing is kept, and previous_response_id / store: true are a 400.
ApiResult<ResponsesRequest> translate_responses_request(std::string_view body, ResponseStore* store = nullptr);

// A chat request's error, renamed to the Responses field it came from (tools[0].function.name →
// tools[0].name, max_tokens → max_output_tokens, response_format → text.format, messages → input).
ApiError responses_error_from_chat(ApiError error);

}  // namespace sluice::server
