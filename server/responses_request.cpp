#include "server/responses_request.h"


#include "server/request_parser.h"
#include "util/json.h"

namespace sluice::server {
namespace {

using rapidjson::Value;
using Allocator = rapidjson::Document::AllocatorType;

ApiError bad(const std::string& field, const std::string& what) { return ApiError::bad_request(field + " " + what, field); }

using json::text_value;

using json::serialize;

bool is_text_part(std::string_view type) { return type == "input_text" || type == "output_text" || type == "text"; }

// A message item's content: a string, or parts of text (input_text; output_text and refusal in the
// assistant's own earlier turns). Images, files and audio are named as unsupported.
ApiResult<std::string> content_text(const Value& content, const std::string& where) {
  if (content.IsString()) return std::string(content.GetString(), content.GetStringLength());
  if (!content.IsArray()) return bad(where, "must be a string or an array of content parts");
  std::string text;
  for (rapidjson::SizeType j = 0; j < content.Size(); ++j) {
    const std::string part_field = where + "[" + std::to_string(j) + "]";
    const Value& part = content[j];
    auto type = part.IsObject() ? json::string(part, "type") : std::nullopt;
    if (!type) return bad(part_field, "must be an object with a string `type`");
    if (is_text_part(*type) || *type == "refusal") {
      auto part_text = json::string(part, *type == "refusal" ? "refusal" : "text");
      if (!part_text) return bad(part_field + (*type == "refusal" ? ".refusal" : ".text"), "must be a string");
      text += *part_text;
    } else {
      return bad(part_field + ".type", "\"" + *type + "\" is not supported: this server takes text parts only");
    }
  }
  return text;
}

// Reasoning item text: its reasoning_text content, else its summary.
std::string reasoning_text(const Value& item) {
  std::string text;
  for (const char* field : {"content", "summary"}) {
    const Value* parts = json::member(item, field);
    if (!parts || !parts->IsArray()) continue;
    for (const auto& part : parts->GetArray())
      if (auto t = part.IsObject() ? json::string(part, "text") : std::nullopt) text += *t;
    if (!text.empty()) break;
  }
  return text;
}

class MessageBuilder {
 public:
  explicit MessageBuilder(Allocator& a) : a_(a), messages_(rapidjson::kArrayType) {}

  void add(std::string_view role, std::string_view content) {
    Value m(rapidjson::kObjectType);
    m.AddMember("role", text_value(role, a_), a_);
    m.AddMember("content", text_value(content, a_), a_);
    if (role == "assistant") attach_reasoning(m);
    messages_.PushBack(m, a_);
  }

  // A call joins the assistant turn it follows (text and calls are one chat message), else opens one.
  void add_call(std::string_view call_id, std::string_view name, std::string_view arguments) {
    if (messages_.Empty() || std::string_view(messages_[messages_.Size() - 1]["role"].GetString()) != "assistant") {
      Value m(rapidjson::kObjectType);
      m.AddMember("role", "assistant", a_);
      m.AddMember("content", Value(), a_);
      attach_reasoning(m);
      messages_.PushBack(m, a_);
    }
    Value& turn = messages_[messages_.Size() - 1];
    if (!turn.HasMember("tool_calls")) turn.AddMember("tool_calls", Value(rapidjson::kArrayType), a_);
    Value function(rapidjson::kObjectType);
    function.AddMember("name", text_value(name, a_), a_);
    function.AddMember("arguments", text_value(arguments, a_), a_);
    Value call(rapidjson::kObjectType);
    call.AddMember("id", text_value(call_id, a_), a_);
    call.AddMember("type", "function", a_);
    call.AddMember("function", function, a_);
    turn["tool_calls"].PushBack(call, a_);
  }

  void add_output(std::string_view call_id, std::string_view output) {
    Value m(rapidjson::kObjectType);
    m.AddMember("role", "tool", a_);
    m.AddMember("tool_call_id", text_value(call_id, a_), a_);
    m.AddMember("content", text_value(output, a_), a_);
    messages_.PushBack(m, a_);
  }

  // A stored conversation's messages, as they were kept.
  void add_stored(const Value& messages) {
    for (const auto& m : messages.GetArray()) messages_.PushBack(Value(m, a_), a_);
  }

  void add_reasoning(std::string text) { pending_reasoning_ += text; }
  Value take() { return std::move(messages_); }

 private:
  void attach_reasoning(Value& message) {
    if (pending_reasoning_.empty()) return;
    message.AddMember("reasoning_content", text_value(pending_reasoning_, a_), a_);
    pending_reasoning_.clear();
  }

  Allocator& a_;
  Value messages_;
  std::string pending_reasoning_;  // a reasoning item's text, for the assistant turn that follows it
};

std::optional<ApiError> required_string(const Value& item, const char* name, const std::string& where,
                                        std::string& out) {
  auto v = json::string(item, name);
  if (!v) return bad(where + "." + name, "is required and must be a string");
  out = std::move(*v);
  return std::nullopt;
}

std::optional<ApiError> translate_item(const Value& item, const std::string& where, MessageBuilder& messages) {
  if (!item.IsObject()) return bad(where, "must be an object");
  const Value* type_value = json::member(item, "type");
  if (type_value && !type_value->IsString()) return bad(where + ".type", "must be a string");
  const std::string type = type_value ? type_value->GetString() : "message";
  if (type == "message") {
    std::string role;
    if (auto err = required_string(item, "role", where, role)) return err;
    if (role != "user" && role != "assistant" && role != "system" && role != "developer")
      return bad(where + ".role", "must be user, assistant, system or developer");
    const Value* content = json::member(item, "content");
    if (!content) return bad(where + ".content", "is required");
    auto text = content_text(*content, where + ".content");
    if (!text) return text.error();
    messages.add(role == "developer" ? "system" : role, *text);
  } else if (type == "function_call") {
    std::string call_id, name, arguments;
    if (auto err = required_string(item, "call_id", where, call_id)) return err;
    if (auto err = required_string(item, "name", where, name)) return err;
    if (auto err = required_string(item, "arguments", where, arguments)) return err;
    messages.add_call(call_id, name, arguments);
  } else if (type == "function_call_output") {
    std::string call_id;
    if (auto err = required_string(item, "call_id", where, call_id)) return err;
    const Value* output = json::member(item, "output");
    if (!output) return bad(where + ".output", "is required");
    auto text = content_text(*output, where + ".output");
    if (!text) return text.error();
    messages.add_output(call_id, *text);
  } else if (type == "reasoning") {
    messages.add_reasoning(reasoning_text(item));
  } else if (type == "item_reference") {
    return bad(where + ".type", "\"item_reference\" is not supported: send the item itself, or continue with previous_response_id");
  } else {
    return bad(where + ".type", "\"" + type + "\" is not supported (message, function_call, function_call_output and "
                                "reasoning items are)");
  }
  return std::nullopt;
}

// Flat Responses tools → chat tools.
ApiResult<Value> translate_tools(const Value& tools, Allocator& a) {
  if (!tools.IsArray()) return bad("tools", "must be an array");
  Value out(rapidjson::kArrayType);
  for (rapidjson::SizeType i = 0; i < tools.Size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const Value& tool = tools[i];
    auto type = tool.IsObject() ? json::string(tool, "type") : std::nullopt;
    if (!type) return bad(where, "must be an object with a string `type`");
    if (*type != "function")
      return bad(where + ".type", "\"" + *type + "\" is not supported: this server runs function tools only");
    Value function(rapidjson::kObjectType);
    for (const char* field : {"name", "description", "parameters", "strict"})
      if (const Value* v = json::member(tool, field)) function.AddMember(rapidjson::StringRef(field), Value(*v, a), a);
    Value entry(rapidjson::kObjectType);
    entry.AddMember("type", "function", a);
    entry.AddMember("function", function, a);
    out.PushBack(entry, a);
  }
  return out;
}

ApiResult<Value> translate_tool_choice(const Value& choice, Allocator& a) {
  if (choice.IsString()) return Value(choice, a);
  auto type = choice.IsObject() ? json::string(choice, "type") : std::nullopt;
  if (type && *type == "function") {
    auto name = json::string(choice, "name");
    if (!name) return bad("tool_choice.name", "is required and must be a string");
    Value function(rapidjson::kObjectType);
    function.AddMember("name", text_value(*name, a), a);
    Value out(rapidjson::kObjectType);
    out.AddMember("type", "function", a);
    out.AddMember("function", function, a);
    return out;
  }
  return bad("tool_choice", "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": …}");
}

ApiResult<Value> translate_text_format(const Value& text, Allocator& a) {
  if (!text.IsObject()) return bad("text", "must be an object");
  const Value* format = json::member(text, "format");
  if (!format) return Value();
  auto type = format->IsObject() ? json::string(*format, "type") : std::nullopt;
  if (!type) return bad("text.format", "must be an object with a string `type`");
  Value out(rapidjson::kObjectType);
  out.AddMember("type", text_value(*type, a), a);
  if (*type == "json_schema") {
    Value schema(rapidjson::kObjectType);
    for (const char* field : {"name", "schema", "strict", "description"})
      if (const Value* v = json::member(*format, field)) schema.AddMember(rapidjson::StringRef(field), Value(*v, a), a);
    out.AddMember("json_schema", schema, a);
  } else if (*type != "text" && *type != "json_object") {
    return bad("text.format.type", "must be text, json_object or json_schema");
  }
  return out;
}

// Fields refused because they need state this server does not keep (`keeps`: whether it keeps
// responses at all).
std::optional<ApiError> refuse_stateful(const Value& body, bool keeps) {
  if (const Value* v = json::member(body, "previous_response_id"); v && !v->IsNull() && !keeps)
    return bad("previous_response_id", "is not supported: this server keeps no responses; send the whole "
                                       "conversation in `input`");
  if (const Value* v = json::member(body, "conversation"); v && !v->IsNull())
    return bad("conversation", "is not supported: send the conversation in `input`, or continue a response "
                               "with previous_response_id");
  if (const Value* v = json::member(body, "store"); v && !v->IsNull() && !v->IsBool())
    return bad("store", "must be a boolean");
  if (const Value* v = json::member(body, "store"); v && v->IsBool() && v->GetBool() && !keeps)
    return bad("store", "must be false: this server keeps no responses");
  if (const Value* v = json::member(body, "background"); v && !v->IsNull() && !(v->IsBool() && !v->GetBool()))
    return bad("background", "must be false: responses are answered in the request");
  return std::nullopt;
}

// Sampling and template extensions the chat request takes as they are (Sluice, vLLM and llama.cpp
// spell them the same way there).
constexpr const char* kPassedThrough[] = {"model", "temperature", "top_p", "parallel_tool_calls", "user", "seed",
                                          "top_k", "min_p", "stop", "presence_penalty", "frequency_penalty",
                                          "repetition_penalty", "chat_template_kwargs", "timeout", "ignore_eos"};

// What the response object echoes back (the Responses API returns the request's settings).
constexpr const char* kEchoed[] = {"model", "instructions", "max_output_tokens", "temperature", "top_p", "tools",
                                   "tool_choice", "parallel_tool_calls", "text", "reasoning", "metadata", "user",
                                   "truncation", "previous_response_id"};

}  // namespace

ApiResult<ResponsesRequest> translate_responses_request(std::string_view body_text, ResponseStore* store) {
  auto parsed = parse_body_object(body_text);
  if (!parsed) return parsed.error();
  const Value& body = *parsed;
  if (auto err = refuse_stateful(body, store != nullptr)) return *err;

  ResponsesRequest out;
  rapidjson::Document chat(rapidjson::kObjectType);
  auto& a = chat.GetAllocator();
  MessageBuilder messages(a);
  bool has_instructions = false;
  if (const Value* instructions = json::member(body, "instructions"); instructions && !instructions->IsNull()) {
    if (!instructions->IsString()) return bad("instructions", "must be a string");
    messages.add("system", std::string_view(instructions->GetString(), instructions->GetStringLength()));
    has_instructions = true;
  }
  if (const Value* previous = json::member(body, "previous_response_id"); previous && !previous->IsNull()) {
    if (!previous->IsString()) return bad("previous_response_id", "must be a string");
    const std::string id(previous->GetString(), previous->GetStringLength());
    std::optional<StoredResponse> stored = store->get(id);
    if (!stored)
      return ApiError{404, "previous response " + id + " is not stored here (it was made with store: false, by "
                           "another server, or dropped to make room)", "invalid_request_error",
                      "previous_response_id", "previous_response_not_found"};
    rapidjson::Document history;
    history.Parse(stored->conversation);
    if (!history.HasParseError() && history.IsArray()) messages.add_stored(history);
  }
  auto store_field = optional_boolean(body, "store");
  if (!store_field) return store_field.error();
  out.store = store != nullptr && store_field->value_or(true);
  const Value* input = json::member(body, "input");
  if (!input) return bad("input", "is required");
  if (input->IsString()) {
    messages.add("user", std::string_view(input->GetString(), input->GetStringLength()));
  } else if (input->IsArray()) {
    for (rapidjson::SizeType i = 0; i < input->Size(); ++i)
      if (auto err = translate_item((*input)[i], "input[" + std::to_string(i) + "]", messages)) return *err;
  } else {
    return bad("input", "must be a string or an array of input items");
  }
  chat.AddMember("messages", messages.take(), a);
  if (out.store) {
    Value conversation(rapidjson::kArrayType);
    const Value& all = chat["messages"];
    for (rapidjson::SizeType i = has_instructions ? 1 : 0; i < all.Size(); ++i) conversation.PushBack(Value(all[i], a), a);
    out.conversation = serialize(conversation);
  }

  for (const char* field : kPassedThrough)
    if (const Value* v = json::member(body, field)) chat.AddMember(rapidjson::StringRef(field), Value(*v, a), a);
  if (const Value* v = json::member(body, "max_output_tokens")) chat.AddMember("max_tokens", Value(*v, a), a);
  if (const Value* tools = json::member(body, "tools")) {
    auto translated = translate_tools(*tools, a);
    if (!translated) return translated.error();
    chat.AddMember("tools", std::move(*translated), a);
  }
  if (const Value* choice = json::member(body, "tool_choice")) {
    auto translated = translate_tool_choice(*choice, a);
    if (!translated) return translated.error();
    chat.AddMember("tool_choice", std::move(*translated), a);
  }
  if (const Value* text = json::member(body, "text"); text && !text->IsNull()) {
    auto format = translate_text_format(*text, a);
    if (!format) return format.error();
    if (!format->IsNull()) chat.AddMember("response_format", std::move(*format), a);
  }
  if (const Value* reasoning = json::member(body, "reasoning"); reasoning && !reasoning->IsNull()) {
    if (!reasoning->IsObject()) return bad("reasoning", "must be an object");
    if (const Value* effort = json::member(*reasoning, "effort"); effort && !effort->IsNull()) {
      chat.AddMember("reasoning_effort", Value(*effort, a), a);
      // An effort asks for reasoning, "none" for none: for templates that switch thinking on and off.
      if (effort->IsString()) chat.AddMember("enable_thinking", std::string_view(effort->GetString()) != "none", a);
    }
  }
  auto stream = optional_boolean(body, "stream");
  if (!stream) return stream.error();
  out.stream = stream->value_or(false);
  chat.AddMember("stream", out.stream, a);
  if (out.stream) {
    // The usage chunk at the end fills response.completed's usage.
    Value options(rapidjson::kObjectType);
    options.AddMember("include_usage", true, a);
    chat.AddMember("stream_options", options, a);
  }
  out.chat_body = serialize(chat);

  out.settings.SetObject();
  for (const char* field : kEchoed)
    if (const Value* v = json::member(body, field))
      out.settings.AddMember(rapidjson::StringRef(field), Value(*v, out.settings.GetAllocator()), out.settings.GetAllocator());
  return out;
}

ApiError responses_error_from_chat(ApiError error) {
  struct Rename {
    std::string_view chat, responses;
  };
  static constexpr Rename kRenames[] = {{"max_tokens", "max_output_tokens"},
                                        {"response_format.json_schema.", "text.format."},
                                        {"response_format", "text.format"},
                                        {"reasoning_effort", "reasoning.effort"},
                                        {".function.", "."}};
  // The chat messages do not line up with input items one to one (instructions, merged calls): an
  // error in them points at `input` as a whole.
  if (error.param.starts_with("messages")) error.param = "input";
  auto rename = [](std::string& text) {
    for (const auto& r : kRenames)
      for (std::size_t at = text.find(r.chat); at != std::string::npos; at = text.find(r.chat, at + r.responses.size()))
        text.replace(at, r.chat.size(), r.responses);
  };
  rename(error.param);
  rename(error.message);
  return error;
}

}  // namespace sluice::server
