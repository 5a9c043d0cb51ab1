#include "server/chat_messages.h"

#include <string>

#include "util/json.h"

namespace sluice::server {
namespace {

using rapidjson::Value;

bool valid_role(std::string_view role) {
  return role == "system" || role == "developer" || role == "user" || role == "assistant" || role == "tool" ||
         role == "function";
}

ApiError field_error(const std::string& field, const std::string& what) {
  return ApiError::bad_request(field + " " + what, field);
}

// An optional string member: absent or a string; anything else is a 400 naming it.
std::optional<ApiError> optional_string(const Value& object, const char* name, const std::string& where) {
  const Value* v = json::member(object, name);
  if (v && !v->IsString()) return field_error(where + "." + name, "must be a string");
  return std::nullopt;
}

// content: a string, an array of text parts (flattened), or — for an assistant — null/absent.
std::optional<ApiError> normalize_content(const Value& message, std::string_view role, const std::string& where,
                                          Value& copy, rapidjson::Document::AllocatorType& alloc) {
  const Value* content = json::member(message, "content");
  const std::string field = where + ".content";
  if (!content || content->IsNull()) {
    if (role != "assistant") return field_error(field, "is required");
    // Null stays null here: whether a template wants it as "" is decided per template.
    if (copy.HasMember("content")) copy["content"].SetNull();
    else copy.AddMember("content", Value(), alloc);
    return std::nullopt;
  }
  if (content->IsString()) return std::nullopt;
  if (!content->IsArray()) return field_error(field, "must be a string, an array of text parts, or null");
  std::string text;
  for (rapidjson::SizeType j = 0; j < content->Size(); ++j) {
    const Value& part = (*content)[j];
    auto type = part.IsObject() ? json::string(part, "type") : std::nullopt;
    auto part_text = part.IsObject() ? json::string(part, "text") : std::nullopt;
    if (!type || (*type != "text" && *type != "input_text") || !part_text)
      return field_error(field + "[" + std::to_string(j) + "]", "must be a text part: only text parts are supported");
    text += *part_text;
  }
  copy["content"].SetString(text.data(), static_cast<rapidjson::SizeType>(text.size()), alloc);
  return std::nullopt;
}

// One tool call as OpenAI writes it; `type` defaults to "function" so templates can rely on it.
std::optional<ApiError> normalize_tool_call(Value& call, const std::string& where,
                                            rapidjson::Document::AllocatorType& alloc) {
  if (!call.IsObject()) return field_error(where, "must be an object");
  if (auto err = optional_string(call, "id", where)) return err;
  if (const Value* type = json::member(call, "type")) {
    if (!type->IsString() || std::string_view(type->GetString(), type->GetStringLength()) != "function")
      return field_error(where + ".type", "must be \"function\"");
  } else if (call.HasMember("type")) {
    call["type"].SetString("function", alloc);  // an explicit null
  } else {
    call.AddMember("type", "function", alloc);
  }
  const Value* function = json::member(call, "function");
  if (!function || !function->IsObject()) return field_error(where + ".function", "must be an object");
  const Value* name = json::member(*function, "name");
  if (!name || !name->IsString() || name->GetStringLength() == 0)
    return field_error(where + ".function.name", "must be a non-empty string");
  const Value* arguments = json::member(*function, "arguments");
  if (!arguments || !arguments->IsString())
    return field_error(where + ".function.arguments", "must be a string (the arguments as JSON text)");
  return std::nullopt;
}

std::optional<ApiError> normalize_tool_calls(std::string_view role, const std::string& where, Value& copy,
                                             rapidjson::Document::AllocatorType& alloc) {
  if (!copy.HasMember("tool_calls")) return std::nullopt;
  Value& calls = copy["tool_calls"];
  const std::string field = where + ".tool_calls";
  if (calls.IsNull() || (calls.IsArray() && calls.Empty())) {
    // What clients send for "no calls": dropped, so templates testing `tool_calls is defined` agree.
    copy.RemoveMember("tool_calls");
    return std::nullopt;
  }
  if (role != "assistant") return field_error(field, "is only allowed on assistant messages");
  if (!calls.IsArray()) return field_error(field, "must be an array");
  for (rapidjson::SizeType j = 0; j < calls.Size(); ++j)
    if (auto err = normalize_tool_call(calls[j], field + "[" + std::to_string(j) + "]", alloc)) return err;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> normalize_messages(const Value& messages, rapidjson::Document& out) {
  if (!messages.IsArray() || messages.Empty())
    return ApiError::bad_request("messages must be a non-empty array", "messages");
  out.SetArray();
  auto& alloc = out.GetAllocator();
  for (rapidjson::SizeType i = 0; i < messages.Size(); ++i) {
    const Value& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.IsObject()) return field_error(where, "must be an object");
    auto role = json::string(m, "role");
    if (!role || !valid_role(*role))
      return field_error(where + ".role", "must be system, developer, user, assistant or tool");
    Value copy(m, alloc);  // keeps fields we do not interpret (templates may read them)
    if (auto err = normalize_content(m, *role, where, copy, alloc)) return err;
    if (auto err = normalize_tool_calls(*role, where, copy, alloc)) return err;
    if (auto err = optional_string(m, "name", where)) return err;
    if (auto err = optional_string(m, "reasoning_content", where)) return err;
    if (*role == "tool") {
      const Value* id = json::member(m, "tool_call_id");
      if (!id || !id->IsString()) return field_error(where + ".tool_call_id", "must be a string (the call answered)");
    }
    out.PushBack(copy, alloc);
  }
  return std::nullopt;
}

}  // namespace sluice::server
