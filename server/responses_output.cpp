#include "server/responses_output.h"

#include <algorithm>
#include <chrono>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "util/json.h"

namespace sluice::server {
namespace {

using rapidjson::Value;
using Allocator = rapidjson::Document::AllocatorType;

using json::text_value;

using json::serialize;

bool only_space(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; });
}

Value usage_value(const ChatUsage& u, Allocator& a) {
  Value usage(rapidjson::kObjectType);
  usage.AddMember("input_tokens", u.prompt_tokens, a);
  Value input_details(rapidjson::kObjectType);
  input_details.AddMember("cached_tokens", u.cached_tokens, a);
  usage.AddMember("input_tokens_details", input_details, a);
  usage.AddMember("output_tokens", u.completion_tokens, a);
  Value output_details(rapidjson::kObjectType);
  output_details.AddMember("reasoning_tokens", 0, a);  // the engine does not count them apart
  usage.AddMember("output_tokens_details", output_details, a);
  usage.AddMember("total_tokens", u.prompt_tokens + u.completion_tokens, a);
  return usage;
}

Value output_text_part(std::string_view text, Allocator& a) {
  Value part(rapidjson::kObjectType);
  part.AddMember("type", "output_text", a);
  part.AddMember("text", text_value(text, a), a);
  part.AddMember("annotations", Value(rapidjson::kArrayType), a);
  part.AddMember("logprobs", Value(rapidjson::kArrayType), a);
  return part;
}

Value reasoning_text_part(std::string_view text, Allocator& a) {
  Value part(rapidjson::kObjectType);
  part.AddMember("type", "reasoning_text", a);
  part.AddMember("text", text_value(text, a), a);
  return part;
}

// An output item: `done` false gives the empty form output_item.added carries (no content yet).
struct ItemFields {
  const char* type;
  std::string_view id, text, call_id, name;
  const char* status;
  bool done;
};

Value item_value(const ItemFields& f, Allocator& a) {
  Value item(rapidjson::kObjectType);
  item.AddMember("type", rapidjson::StringRef(f.type), a);
  item.AddMember("id", text_value(f.id, a), a);
  const std::string_view type = f.type;
  if (type == "message") {
    item.AddMember("status", rapidjson::StringRef(f.status), a);
    item.AddMember("role", "assistant", a);
    Value content(rapidjson::kArrayType);
    if (f.done) content.PushBack(output_text_part(f.text, a), a);
    item.AddMember("content", content, a);
  } else if (type == "reasoning") {
    item.AddMember("summary", Value(rapidjson::kArrayType), a);
    Value content(rapidjson::kArrayType);
    if (f.done) content.PushBack(reasoning_text_part(f.text, a), a);
    item.AddMember("content", content, a);
  } else {
    item.AddMember("call_id", text_value(f.call_id, a), a);
    item.AddMember("name", text_value(f.name, a), a);
    item.AddMember("arguments", text_value(f.done ? f.text : "", a), a);
    item.AddMember("status", rapidjson::StringRef(f.status), a);
  }
  return item;
}

const char* incomplete_reason_of(const std::string& finish_reason) {
  return finish_reason == "length" ? "max_output_tokens" : nullptr;
}

}  // namespace

ResponsesTranslator::ResponsesTranslator(std::string model, const rapidjson::Value& settings, ResponseStore* store,
                                         std::string conversation)
    : id_(make_api_id("resp_")),
      created_at_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                      .count()),
      model_(std::move(model)),
      store_(store),
      conversation_(std::move(conversation)) {
  settings_.CopyFrom(settings, settings_.GetAllocator());
  if (!settings_.IsObject()) settings_.SetObject();
}

std::string ResponsesTranslator::response_json(const char* status, const Value& output,
                                               const std::optional<ChatUsage>& usage, const ApiError* error,
                                               const char* incomplete_reason) const {
  rapidjson::Document doc(rapidjson::kObjectType);
  auto& a = doc.GetAllocator();
  auto echoed = [&](const char* name, Value fallback) {
    const Value* v = settings_.HasMember(name) ? &settings_[name] : nullptr;
    doc.AddMember(rapidjson::StringRef(name), v ? Value(*v, a) : std::move(fallback), a);
  };
  doc.AddMember("id", text_value(id_, a), a);
  doc.AddMember("object", "response", a);
  doc.AddMember("created_at", created_at_, a);
  doc.AddMember("status", rapidjson::StringRef(status), a);
  doc.AddMember("background", false, a);
  if (error) {
    Value e(rapidjson::kObjectType);
    e.AddMember("code", text_value(error->code.empty() ? "server_error" : error->code, a), a);
    e.AddMember("message", text_value(error->message, a), a);
    doc.AddMember("error", e, a);
  } else {
    doc.AddMember("error", Value(), a);
  }
  if (incomplete_reason) {
    Value details(rapidjson::kObjectType);
    details.AddMember("reason", rapidjson::StringRef(incomplete_reason), a);
    doc.AddMember("incomplete_details", details, a);
  } else {
    doc.AddMember("incomplete_details", Value(), a);
  }
  echoed("instructions", Value());
  echoed("max_output_tokens", Value());
  doc.AddMember("model", text_value(settings_.HasMember("model") && settings_["model"].IsString()
                                        ? std::string_view(settings_["model"].GetString())
                                        : std::string_view(model_),
                                    a),
                a);
  doc.AddMember("output", Value(output, a), a);
  echoed("parallel_tool_calls", Value(true));
  echoed("previous_response_id", Value());
  Value reasoning(rapidjson::kObjectType);
  reasoning.AddMember("effort", Value(), a);
  reasoning.AddMember("summary", Value(), a);
  echoed("reasoning", std::move(reasoning));
  doc.AddMember("store", store_ != nullptr, a);
  echoed("temperature", Value());
  Value text(rapidjson::kObjectType);
  Value format(rapidjson::kObjectType);
  format.AddMember("type", "text", a);
  text.AddMember("format", format, a);
  echoed("text", std::move(text));
  echoed("tool_choice", Value("auto"));
  echoed("tools", Value(rapidjson::kArrayType));
  echoed("top_p", Value());
  echoed("truncation", Value("disabled"));
  if (usage) doc.AddMember("usage", usage_value(*usage, a), a);
  else doc.AddMember("usage", Value(), a);
  echoed("user", Value());
  echoed("metadata", Value(rapidjson::kObjectType));
  return serialize(doc);
}

std::string ResponsesTranslator::whole_answer(const ChatOutput& answer) {
  rapidjson::Document output(rapidjson::kArrayType);
  auto& a = output.GetAllocator();
  const std::string finish = answer.finish_reason.value_or("stop");
  const char* incomplete = incomplete_reason_of(finish);
  const char* item_status = incomplete ? "incomplete" : "completed";
  if (!answer.reasoning.empty())
    output.PushBack(item_value({"reasoning", make_api_id("rs_"), answer.reasoning, {}, {}, item_status, true}, a), a);
  // Whitespace around calls is not an answer of its own (as chat's content is null then).
  if (!answer.content.empty() && (answer.calls.empty() || !only_space(answer.content)))
    output.PushBack(item_value({"message", make_api_id("msg_"), answer.content, {}, {}, item_status, true}, a), a);
  for (const auto& call : answer.calls)
    output.PushBack(item_value({"function_call", make_api_id("fc_"), call.arguments, call.id, call.name, item_status, true}, a), a);
  if (output.Empty())  // a message the SDK's output_text finds, even when nothing was generated
    output.PushBack(item_value({"message", make_api_id("msg_"), "", {}, {}, item_status, true}, a), a);
  std::string response = response_json(incomplete ? "incomplete" : "completed", output, answer.usage, nullptr, incomplete);
  remember(output, response);
  return response;
}

// The answer's output items as the assistant turn a later request continues from.
void ResponsesTranslator::remember(const Value& output, const std::string& response) const {
  if (!store_) return;
  rapidjson::Document conversation;
  conversation.Parse(conversation_);
  if (conversation.HasParseError() || !conversation.IsArray()) conversation.SetArray();
  auto& a = conversation.GetAllocator();
  std::string text, reasoning;
  Value calls(rapidjson::kArrayType);
  for (const auto& item : output.GetArray()) {
    const std::string_view type = item["type"].GetString();
    if (type == "message" || type == "reasoning") {
      for (const auto& part : item["content"].GetArray()) (type == "message" ? text : reasoning) += part["text"].GetString();
    } else if (type == "function_call") {
      Value function(rapidjson::kObjectType);
      function.AddMember("name", Value(item["name"], a), a);
      function.AddMember("arguments", Value(item["arguments"], a), a);
      Value call(rapidjson::kObjectType);
      call.AddMember("id", Value(item["call_id"], a), a);
      call.AddMember("type", "function", a);
      call.AddMember("function", function, a);
      calls.PushBack(call, a);
    }
  }
  Value turn(rapidjson::kObjectType);
  turn.AddMember("role", "assistant", a);
  if (text.empty() && !calls.Empty()) turn.AddMember("content", Value(), a);
  else turn.AddMember("content", text_value(text, a), a);
  if (!calls.Empty()) turn.AddMember("tool_calls", calls, a);
  if (!reasoning.empty()) turn.AddMember("reasoning_content", text_value(reasoning, a), a);
  conversation.PushBack(turn, a);
  store_->put(id_, StoredResponse{serialize(conversation), response});
}

std::string ResponsesTranslator::event(rapidjson::Document& doc) {
  doc.AddMember("sequence_number", sequence_++, doc.GetAllocator());
  return named_sse_event(doc["type"].GetString(), serialize(doc));
}

std::string ResponsesTranslator::begin_stream() {
  begun_ = true;
  std::string out;
  for (const char* type : {"response.created", "response.in_progress"}) {
    rapidjson::Document doc(rapidjson::kObjectType);
    auto& a = doc.GetAllocator();
    doc.AddMember("type", rapidjson::StringRef(type), a);
    rapidjson::Document response;
    response.Parse(response_json("in_progress", Value(rapidjson::kArrayType), std::nullopt, nullptr, nullptr));
    doc.AddMember("response", Value(response, a), a);
    out += event(doc);
  }
  return out;
}

std::string ResponsesTranslator::open(ItemKind kind, std::string call_id, std::string name, int chat_index) {
  static constexpr const char* kTypes[] = {"", "reasoning", "message", "function_call"};
  static constexpr const char* kPrefixes[] = {"", "rs_", "msg_", "fc_"};
  const auto k = static_cast<std::size_t>(kind);
  item_ = OpenItem{kind, make_api_id(kPrefixes[k]), static_cast<int>(output_.Size()), "", std::move(call_id),
                   std::move(name), chat_index};
  std::string out;
  {
    rapidjson::Document doc(rapidjson::kObjectType);
    auto& a = doc.GetAllocator();
    doc.AddMember("type", "response.output_item.added", a);
    doc.AddMember("output_index", item_.output_index, a);
    doc.AddMember("item", item_value({kTypes[k], item_.id, "", item_.call_id, item_.name, "in_progress", false}, a), a);
    out += event(doc);
  }
  if (kind == ItemKind::kCall) return out;
  rapidjson::Document doc(rapidjson::kObjectType);
  auto& a = doc.GetAllocator();
  doc.AddMember("type", "response.content_part.added", a);
  doc.AddMember("item_id", text_value(item_.id, a), a);
  doc.AddMember("output_index", item_.output_index, a);
  doc.AddMember("content_index", 0, a);
  doc.AddMember("part", kind == ItemKind::kMessage ? output_text_part("", a) : reasoning_text_part("", a), a);
  return out + event(doc);
}

// The per-token event, written straight out (no tree): this runs on the engine thread.
std::string ResponsesTranslator::append(std::string_view text) {
  if (text.empty()) return "";
  item_.text.append(text);
  const char* type = item_.kind == ItemKind::kMessage   ? "response.output_text.delta"
                     : item_.kind == ItemKind::kReasoning ? "response.reasoning_text.delta"
                                                           : "response.function_call_arguments.delta";
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("type"), w.String(type);
  w.Key("item_id"), w.String(item_.id.data(), static_cast<rapidjson::SizeType>(item_.id.size()));
  w.Key("output_index"), w.Int(item_.output_index);
  if (item_.kind != ItemKind::kCall) w.Key("content_index"), w.Int(0);
  w.Key("delta"), w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
  if (item_.kind == ItemKind::kMessage) w.Key("logprobs"), w.StartArray(), w.EndArray();
  w.Key("sequence_number"), w.Int(sequence_++);
  w.EndObject();
  return named_sse_event(type, std::string_view(buffer.GetString(), buffer.GetSize()));
}

std::string ResponsesTranslator::close(const char* status) {
  if (item_.kind == ItemKind::kNone) return "";
  std::string out;
  auto base = [&](rapidjson::Document& doc, const char* type) {
    auto& a = doc.GetAllocator();
    doc.AddMember("type", rapidjson::StringRef(type), a);
    doc.AddMember("item_id", text_value(item_.id, a), a);
    doc.AddMember("output_index", item_.output_index, a);
  };
  const char* item_type = "function_call";
  if (item_.kind == ItemKind::kCall) {
    rapidjson::Document doc(rapidjson::kObjectType);
    base(doc, "response.function_call_arguments.done");
    doc.AddMember("name", text_value(item_.name, doc.GetAllocator()), doc.GetAllocator());
    doc.AddMember("arguments", text_value(item_.text, doc.GetAllocator()), doc.GetAllocator());
    out += event(doc);
  } else {
    const bool message = item_.kind == ItemKind::kMessage;
    item_type = message ? "message" : "reasoning";
    rapidjson::Document text_done(rapidjson::kObjectType);
    base(text_done, message ? "response.output_text.done" : "response.reasoning_text.done");
    auto& ta = text_done.GetAllocator();
    text_done.AddMember("content_index", 0, ta);
    text_done.AddMember("text", text_value(item_.text, ta), ta);
    if (message) text_done.AddMember("logprobs", Value(rapidjson::kArrayType), ta);
    out += event(text_done);
    rapidjson::Document part_done(rapidjson::kObjectType);
    base(part_done, "response.content_part.done");
    auto& pa = part_done.GetAllocator();
    part_done.AddMember("content_index", 0, pa);
    part_done.AddMember("part", message ? output_text_part(item_.text, pa) : reasoning_text_part(item_.text, pa), pa);
    out += event(part_done);
  }
  Value item = item_value({item_type, item_.id, item_.text, item_.call_id, item_.name, status, true}, output_.GetAllocator());
  rapidjson::Document doc(rapidjson::kObjectType);
  auto& a = doc.GetAllocator();
  doc.AddMember("type", "response.output_item.done", a);
  doc.AddMember("output_index", item_.output_index, a);
  doc.AddMember("item", Value(item, a), a);
  out += event(doc);
  output_.PushBack(item, output_.GetAllocator());
  item_ = OpenItem{};
  return out;
}

std::string ResponsesTranslator::stream_chunk(const ChatOutput& chunk) {
  if (ended_) return "";
  std::string out = begun_ ? "" : begin_stream();
  if (chunk.error) {
    ended_ = true;
    out += close("incomplete");
    rapidjson::Document doc(rapidjson::kObjectType);
    auto& a = doc.GetAllocator();
    doc.AddMember("type", "response.failed", a);
    rapidjson::Document response;
    response.Parse(response_json("failed", output_, usage_, &*chunk.error, nullptr));
    doc.AddMember("response", Value(response, a), a);
    return out + event(doc);
  }
  if (chunk.usage) usage_ = chunk.usage;
  if (chunk.finish_reason) finish_reason_ = chunk.finish_reason;
  if (!chunk.reasoning.empty()) {
    if (item_.kind != ItemKind::kReasoning) {
      out += close("completed");
      out += open(ItemKind::kReasoning);
    }
    out += append(chunk.reasoning);
  }
  if (!chunk.content.empty()) {
    if (item_.kind == ItemKind::kMessage) {
      out += append(chunk.content);
    } else if (only_space(chunk.content)) {
      held_space_ += chunk.content;
    } else {
      out += close("completed");
      out += open(ItemKind::kMessage);
      out += append(held_space_ + chunk.content);
      held_space_.clear();
    }
  }
  for (const auto& piece : chunk.calls) {
    if (item_.kind != ItemKind::kCall || item_.chat_index != piece.index) {
      out += close("completed");
      out += open(ItemKind::kCall, piece.id, piece.name, piece.index);
      held_space_.clear();
      made_calls_ = true;
    }
    out += append(piece.arguments);
  }
  return out;
}

std::string ResponsesTranslator::stream_end() {
  if (ended_) return "";
  std::string out = begun_ ? "" : begin_stream();
  ended_ = true;
  const std::string finish = finish_reason_.value_or("stop");
  const char* incomplete = incomplete_reason_of(finish);
  const char* status = incomplete ? "incomplete" : "completed";
  // Whitespace alone is an answer only when nothing else came; an empty answer is still a message.
  if (item_.kind != ItemKind::kMessage && !made_calls_ && !held_space_.empty()) {
    out += close("completed");
    out += open(ItemKind::kMessage);
    out += append(held_space_);
    held_space_.clear();
  }
  if (item_.kind == ItemKind::kNone && output_.Empty()) out += open(ItemKind::kMessage);
  out += close(status);
  rapidjson::Document doc(rapidjson::kObjectType);
  auto& a = doc.GetAllocator();
  doc.AddMember("type", rapidjson::StringRef(incomplete ? "response.incomplete" : "response.completed"), a);
  const std::string final_response = response_json(status, output_, usage_, nullptr, incomplete);
  remember(output_, final_response);
  rapidjson::Document response;
  response.Parse(final_response);
  doc.AddMember("response", Value(response, a), a);
  return out + event(doc);
}

}  // namespace sluice::server
