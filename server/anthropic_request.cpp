#include "server/anthropic_request.h"


#include "server/request_parser.h"
#include "util/json.h"

namespace sluice::server {
namespace {

using rapidjson::Value;
using Allocator = rapidjson::Document::AllocatorType;

ApiError bad(const std::string& field, const std::string& what) { return ApiError::bad_request(field + " " + what, field); }

using json::text_value;

using json::serialize;

std::optional<std::string> block_type(const Value& block) {
  return block.IsObject() ? json::string(block, "type") : std::nullopt;
}

ApiError unsupported_block(const std::string& where, const std::string& type) {
  return bad(where + ".type", "\"" + type + "\" blocks are not supported here (text, tool_use, tool_result and thinking are)");
}

// Text of a string or of text blocks (system, tool_result content).
ApiResult<std::string> blocks_text(const Value& content, const std::string& where) {
  if (content.IsString()) return std::string(content.GetString(), content.GetStringLength());
  if (!content.IsArray()) return bad(where, "must be a string or an array of text blocks");
  std::string text;
  for (rapidjson::SizeType j = 0; j < content.Size(); ++j) {
    const std::string block_field = where + "[" + std::to_string(j) + "]";
    auto type = block_type(content[j]);
    if (!type) return bad(block_field, "must be an object with a string `type`");
    if (*type != "text") return unsupported_block(block_field, *type);
    auto t = json::string(content[j], "text");
    if (!t) return bad(block_field + ".text", "must be a string");
    if (!text.empty()) text += "\n";
    text += *t;
  }
  return text;
}

Value chat_message(std::string_view role, std::string_view content, Allocator& a) {
  Value m(rapidjson::kObjectType);
  m.AddMember("role", text_value(role, a), a);
  m.AddMember("content", text_value(content, a), a);
  return m;
}

// A user turn: its tool results become tool messages, then its text one user message.
std::optional<ApiError> translate_user(const Value& content, const std::string& where, Value& messages, Allocator& a) {
  std::string text;
  bool has_text = false;
  for (rapidjson::SizeType j = 0; j < content.Size(); ++j) {
    const std::string field = where + "[" + std::to_string(j) + "]";
    auto type = block_type(content[j]);
    if (!type) return bad(field, "must be an object with a string `type`");
    if (*type == "text") {
      auto t = json::string(content[j], "text");
      if (!t) return bad(field + ".text", "must be a string");
      if (has_text) text += "\n";
      text += *t;
      has_text = true;
    } else if (*type == "tool_result") {
      auto id = json::string(content[j], "tool_use_id");
      if (!id) return bad(field + ".tool_use_id", "is required and must be a string");
      std::string result;
      if (const Value* c = json::member(content[j], "content")) {
        auto r = blocks_text(*c, field + ".content");
        if (!r) return r.error();
        result = std::move(*r);
      }
      Value m = chat_message("tool", result, a);
      m.AddMember("tool_call_id", text_value(*id, a), a);
      messages.PushBack(m, a);
    } else {
      return unsupported_block(field, *type);
    }
  }
  if (has_text) messages.PushBack(chat_message("user", text, a), a);
  return std::nullopt;
}

std::optional<ApiError> translate_assistant(const Value& content, const std::string& where, Value& messages,
                                            Allocator& a) {
  std::string text, reasoning;
  Value calls(rapidjson::kArrayType);
  for (rapidjson::SizeType j = 0; j < content.Size(); ++j) {
    const std::string field = where + "[" + std::to_string(j) + "]";
    auto type = block_type(content[j]);
    if (!type) return bad(field, "must be an object with a string `type`");
    if (*type == "text") {
      auto t = json::string(content[j], "text");
      if (!t) return bad(field + ".text", "must be a string");
      text += *t;
    } else if (*type == "thinking") {
      auto t = json::string(content[j], "thinking");
      if (!t) return bad(field + ".thinking", "must be a string");
      reasoning += *t;
    } else if (*type == "redacted_thinking") {
      continue;  // encrypted elsewhere: nothing a local model can read
    } else if (*type == "tool_use") {
      auto id = json::string(content[j], "id");
      auto name = json::string(content[j], "name");
      const Value* input = json::member(content[j], "input");
      if (!id) return bad(field + ".id", "is required and must be a string");
      if (!name) return bad(field + ".name", "is required and must be a string");
      if (!input || !input->IsObject()) return bad(field + ".input", "is required and must be an object");
      Value function(rapidjson::kObjectType);
      function.AddMember("name", text_value(*name, a), a);
      function.AddMember("arguments", text_value(serialize(*input), a), a);
      Value call(rapidjson::kObjectType);
      call.AddMember("id", text_value(*id, a), a);
      call.AddMember("type", "function", a);
      call.AddMember("function", function, a);
      calls.PushBack(call, a);
    } else {
      return unsupported_block(field, *type);
    }
  }
  Value m(rapidjson::kObjectType);
  m.AddMember("role", "assistant", a);
  if (text.empty() && !calls.Empty()) m.AddMember("content", Value(), a);
  else m.AddMember("content", text_value(text, a), a);
  if (!calls.Empty()) m.AddMember("tool_calls", calls, a);
  if (!reasoning.empty()) m.AddMember("reasoning_content", text_value(reasoning, a), a);
  messages.PushBack(m, a);
  return std::nullopt;
}

ApiResult<Value> translate_messages(const Value& body, Allocator& a) {
  Value messages(rapidjson::kArrayType);
  if (const Value* system = json::member(body, "system")) {
    auto text = blocks_text(*system, "system");
    if (!text) return text.error();
    messages.PushBack(chat_message("system", *text, a), a);
  }
  const Value* turns = json::member(body, "messages");
  if (!turns || !turns->IsArray() || turns->Empty()) return bad("messages", "is required and must be a non-empty array");
  for (rapidjson::SizeType i = 0; i < turns->Size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const Value& turn = (*turns)[i];
    if (!turn.IsObject()) return bad(where, "must be an object");
    auto role = json::string(turn, "role");
    if (!role || (*role != "user" && *role != "assistant")) return bad(where + ".role", "must be \"user\" or \"assistant\"");
    const Value* content = json::member(turn, "content");
    if (!content) return bad(where + ".content", "is required");
    if (content->IsString()) {
      messages.PushBack(chat_message(*role, std::string_view(content->GetString(), content->GetStringLength()), a), a);
      continue;
    }
    if (!content->IsArray()) return bad(where + ".content", "must be a string or an array of content blocks");
    auto err = *role == "user" ? translate_user(*content, where + ".content", messages, a)
                               : translate_assistant(*content, where + ".content", messages, a);
    if (err) return *err;
  }
  return messages;
}

ApiResult<Value> translate_tools(const Value& tools, Allocator& a) {
  if (!tools.IsArray()) return bad("tools", "must be an array");
  Value out(rapidjson::kArrayType);
  for (rapidjson::SizeType i = 0; i < tools.Size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const Value& tool = tools[i];
    if (!tool.IsObject()) return bad(where, "must be an object");
    if (auto type = json::string(tool, "type"); type && *type != "custom")
      return bad(where + ".type", "\"" + *type + "\" is one of Anthropic's server tools; this server runs client tools only");
    Value function(rapidjson::kObjectType);
    if (const Value* name = json::member(tool, "name")) function.AddMember("name", Value(*name, a), a);
    if (const Value* d = json::member(tool, "description")) function.AddMember("description", Value(*d, a), a);
    if (const Value* schema = json::member(tool, "input_schema")) function.AddMember("parameters", Value(*schema, a), a);
    Value entry(rapidjson::kObjectType);
    entry.AddMember("type", "function", a);
    entry.AddMember("function", function, a);
    out.PushBack(entry, a);
  }
  return out;
}

std::optional<ApiError> translate_tool_choice(const Value& choice, Value& chat, Allocator& a) {
  auto type = choice.IsObject() ? json::string(choice, "type") : std::nullopt;
  if (!type) return bad("tool_choice", "must be an object with a string `type`");
  if (*type == "auto" || *type == "none") {
    chat.AddMember("tool_choice", text_value(*type, a), a);
  } else if (*type == "any") {
    chat.AddMember("tool_choice", "required", a);
  } else if (*type == "tool") {
    auto name = json::string(choice, "name");
    if (!name) return bad("tool_choice.name", "is required and must be a string");
    Value function(rapidjson::kObjectType);
    function.AddMember("name", text_value(*name, a), a);
    Value named(rapidjson::kObjectType);
    named.AddMember("type", "function", a);
    named.AddMember("function", function, a);
    chat.AddMember("tool_choice", named, a);
  } else {
    return bad("tool_choice.type", "must be auto, any, tool or none");
  }
  auto no_parallel = optional_boolean(choice, "disable_parallel_tool_use");
  if (!no_parallel) return bad("tool_choice.disable_parallel_tool_use", "must be a boolean");
  if (no_parallel->value_or(false)) chat.AddMember("parallel_tool_calls", false, a);
  return std::nullopt;
}

constexpr const char* kPassedThrough[] = {"model", "temperature", "top_p", "top_k", "seed", "min_p",
                                          "chat_template_kwargs", "timeout", "ignore_eos"};

}  // namespace

ApiResult<MessagesRequest> translate_messages_request(std::string_view body_text, bool counting) {
  auto parsed = parse_body_object(body_text);
  if (!parsed) return parsed.error();
  const Value& body = *parsed;
  MessagesRequest out;
  rapidjson::Document chat(rapidjson::kObjectType);
  auto& a = chat.GetAllocator();

  const Value* max_tokens = json::member(body, "max_tokens");
  if (!max_tokens && !counting) return bad("max_tokens", "is required");
  if (max_tokens && (!max_tokens->IsInt64() || max_tokens->GetInt64() < 1))
    return bad("max_tokens", "must be a positive integer");
  if (max_tokens) chat.AddMember("max_tokens", Value(*max_tokens, a), a);
  auto messages = translate_messages(body, a);
  if (!messages) return messages.error();
  chat.AddMember("messages", std::move(*messages), a);
  for (const char* field : kPassedThrough)
    if (const Value* v = json::member(body, field)) chat.AddMember(rapidjson::StringRef(field), Value(*v, a), a);
  if (const Value* stops = json::member(body, "stop_sequences"); stops && !stops->IsNull()) {
    if (!stops->IsArray()) return bad("stop_sequences", "must be an array of strings");
    for (const auto& s : stops->GetArray())
      if (!s.IsString()) return bad("stop_sequences", "must be an array of strings");
    chat.AddMember("stop", Value(*stops, a), a);
  }
  if (const Value* tools = json::member(body, "tools"); tools && !tools->IsNull()) {
    auto translated = translate_tools(*tools, a);
    if (!translated) return translated.error();
    chat.AddMember("tools", std::move(*translated), a);
  }
  if (const Value* choice = json::member(body, "tool_choice"); choice && !choice->IsNull())
    if (auto err = translate_tool_choice(*choice, chat, a)) return *err;
  if (const Value* thinking = json::member(body, "thinking"); thinking && !thinking->IsNull()) {
    auto type = thinking->IsObject() ? json::string(*thinking, "type") : std::nullopt;
    if (!type || (*type != "enabled" && *type != "disabled" && *type != "adaptive"))
      return bad("thinking.type", "must be enabled, disabled or adaptive");
    chat.AddMember("enable_thinking", *type != "disabled", a);
  }
  auto stream = optional_boolean(body, "stream");
  if (!stream) return stream.error();
  out.stream = stream->value_or(false);
  chat.AddMember("stream", out.stream, a);
  if (out.stream) {
    Value options(rapidjson::kObjectType);
    options.AddMember("include_usage", true, a);  // message_delta's usage
    chat.AddMember("stream_options", options, a);
  }
  out.chat_body = serialize(chat);
  return out;
}

ApiError messages_error_from_chat(ApiError error) {
  struct Rename {
    std::string_view chat, messages;
  };
  static constexpr Rename kRenames[] = {{".function.parameters", ".input_schema"}, {".function.", "."}};
  auto rename = [](std::string& text) {
    for (const auto& r : kRenames)
      for (std::size_t at = text.find(r.chat); at != std::string::npos; at = text.find(r.chat, at + r.messages.size()))
        text.replace(at, r.chat.size(), r.messages);
  };
  rename(error.param);
  rename(error.message);
  if (error.param == "stop") {
    error.param = "stop_sequences";
    if (error.message.starts_with("stop ")) error.message.replace(0, 4, "stop_sequences");
  }
  return error;
}

}  // namespace sluice::server
