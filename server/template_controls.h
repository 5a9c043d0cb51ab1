#pragma once
// What a request may set in the chat template besides the messages: `chat_template_kwargs` (an
// object whose keys become template variables, as vLLM and llama.cpp take it), a top-level
// `enable_thinking` (Qwen3-style templates; wins over the same key in chat_template_kwargs), and
// `reasoning_effort` (gpt-oss-style templates read it). The server's --thinking is the default
// for enable_thinking when neither says.
#include <optional>
#include <string>

#include <rapidjson/document.h>

#include "server/api_error.h"

namespace sluice::server {

struct TemplateControls {
  rapidjson::Document kwargs{rapidjson::kObjectType};  // validated chat_template_kwargs (empty when absent)
  std::optional<bool> enable_thinking;                  // top-level, or chat_template_kwargs.enable_thinking
  std::optional<std::string> reasoning_effort;
};

// Bounds: a request sets at most this many template variables, each named like a Jinja identifier.
inline constexpr std::size_t kMaxTemplateKwargs = 32;
inline constexpr std::size_t kMaxTemplateKwargNameBytes = 64;

// Reads the fields above from a request body; a wrong type, a name a template cannot take, or one
// the server sets itself (messages, tools, bos_token, ...) is a 400 naming the field.
ApiResult<TemplateControls> parse_template_controls(const rapidjson::Value& body);

}  // namespace sluice::server
