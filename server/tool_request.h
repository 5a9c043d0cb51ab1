#pragma once
// The tool fields of a chat request — `tools`, `tool_choice`, `parallel_tool_calls` — checked at the
// edge: each tool must be {"type": "function", "function": {"name", "parameters"?: object, …}};
// errors name the field (tools[2].function.name).
#include <optional>
#include <string>

#include <rapidjson/document.h>

#include "server/api_error.h"

namespace sluice::server {

enum class ToolChoice {
  kAuto,  // the model may call a tool: its answer is parsed for calls (the default when tools are given)
  kNone,  // the model answers in text; the tools are still shown to it, as OpenAI and vLLM do
  kRequired,  // the answer is one or more calls (forced by constrained decoding)
  kNamed,     // the answer is a call of ToolFields::forced_name
};

struct ToolFields {
  rapidjson::Document tools;  // null when absent
  ToolChoice choice = ToolChoice::kAuto;
  bool parallel_calls = true;  // false: only the first call of an answer is returned
  std::string forced_name;     // kNamed: the function
  bool has_tools() const { return tools.IsArray() && !tools.Empty(); }
};

// `required` and a named function are forced through constrained decoding (constrain/tool_call_grammar.h);
// they need tools.
std::optional<ApiError> parse_tool_fields(const rapidjson::Value& body, ToolFields& out);

}  // namespace sluice::server
