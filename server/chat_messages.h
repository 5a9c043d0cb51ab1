#pragma once
// An OpenAI `messages` array → the validated, normalised form the chat template renders from.
// Accepted as OpenAI sends them: content null (assistant only), a string, or an array of text parts
// (flattened to one string); assistant `tool_calls` of {id, type: "function", function: {name,
// arguments}} with `arguments` a JSON *string*; `tool` messages with `tool_call_id`; an optional
// `name`; an assistant's `reasoning_content` (replayed by reasoning templates). Wrong types are a 400
// whose param names the field (e.g. messages[2].tool_calls[0].function.arguments).
// The template-specific spelling (arguments as an object, null content as "") is applied later, per
// template, by chat_history_form.h.
#include <optional>

#include <rapidjson/document.h>

#include "server/api_error.h"

namespace sluice::server {

std::optional<ApiError> normalize_messages(const rapidjson::Value& messages, rapidjson::Document& out);

}  // namespace sluice::server
