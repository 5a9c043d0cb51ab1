#pragma once
// OpenAI request bodies → C++ structs, validated at the edge. Unknown fields are ignored; a field of
// the wrong type or out of range is a 400 naming the field.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <rapidjson/document.h>

#include "engine/sampling.h"
#include "server/api_error.h"
#include "server/chat_messages.h"  // normalize_messages, shared with /apply-template
#include "server/template_controls.h"
#include "server/tool_request.h"

namespace sluice::server {

// Server-side defaults a request starts from (from the command line / config file).
struct RequestDefaults {
  SamplingParams sampling;
  int max_tokens = 2048;  // default, and the ceiling a request is clamped to
};

// What chat and text completions share.
struct CompletionParams {
  static constexpr std::size_t kMaxLogitBias = 1024;  // logit_bias entries

  std::string model;
  int max_tokens = 0;
  bool max_tokens_given = false;  // the request set max_tokens or max_completion_tokens (else the default)
  int n = 1;                    // choices (1..GenerationRequest::kMaxChoices)
  SamplingParams sampling;      // with logit_bias (ids checked against the vocabulary by the handler)
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;   // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;
  bool json_object = false;     // response_format json_object: the output is one JSON object
  // response_format json_schema: the schema the output must validate against (null: none).
  std::shared_ptr<const rapidjson::Document> json_schema;
  bool ignore_eos = false;      // llama.cpp extension
  std::optional<double> timeout_s;  // Sluice extension: a deadline, seconds from arrival
  std::string user;
};

struct ChatRequest {
  CompletionParams params;
  // Normalized messages (content flattened to a string) for the template, and `tools` when given.
  rapidjson::Document messages;
  rapidjson::Document tools;  // null when absent; validated by parse_tool_fields
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string forced_tool;  // tool_choice naming a function
  bool parallel_tool_calls = true;
  std::optional<bool> add_generation_prompt;
  TemplateControls template_controls;  // chat_template_kwargs, enable_thinking, reasoning_effort
};

struct TextCompletionRequest {
  CompletionParams params;
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;  // when the prompt was an array of token ids
  bool echo = false;
};

ApiResult<ChatRequest> parse_chat_request(std::string_view body, const RequestDefaults& defaults);
ApiResult<TextCompletionRequest> parse_completion_request(std::string_view body, const RequestDefaults& defaults);

// An optional boolean field: absent or null → nullopt; any other type → a 400 naming the field.
ApiResult<std::optional<bool>> optional_boolean(const rapidjson::Value& object, const char* name);

// Parses a request body as a JSON object, or the 400 to answer with.
ApiResult<rapidjson::Document> parse_body_object(std::string_view body);

}  // namespace sluice::server
