#pragma once
// The tool fields of a chat request — `tools`, `tool_choice`, `parallel_tool_calls` — checked at the
// edge: each tool must be {"type": "function", "function": {"name", "parameters"?: object, …}};
// errors name the field (tools[2].function.name).
#include <optional>

#include <rapidjson/document.h>

#include "server/api_error.h"

namespace sluice::server {

enum class ToolChoice {
  kAuto,  // the model may call a tool: its answer is parsed for calls (the default when tools are given)
  kNone,  // the model answers in text; the tools are still shown to it, as OpenAI and vLLM do
};

struct ToolFields {
  rapidjson::Document tools;  // null when absent
  ToolChoice choice = ToolChoice::kAuto;
  bool parallel_calls = true;  // false: only the first call of an answer is returned
  bool has_tools() const { return tools.IsArray() && !tools.Empty(); }
};

// `required` and a named function need constrained decoding, which is not built yet: they are refused
// with a 400 rather than answered as `auto`.
std::optional<ApiError> parse_tool_fields(const rapidjson::Value& body, ToolFields& out);

}  // namespace sluice::server
