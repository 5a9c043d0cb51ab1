#include "server/anthropic_output.h"

#include <algorithm>

#include <rapidjson/document.h>
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

const char* error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status < 500 ? "invalid_request_error" : "api_error";
  }
}

// The chat finish reason → Anthropic's stop_reason.
const char* stop_reason(const std::string& finish, bool stopped_by_sequence) {
  if (finish == "tool_calls") return "tool_use";
  if (finish == "length") return "max_tokens";
  return stopped_by_sequence ? "stop_sequence" : "end_turn";
}

// Anthropic's call ids read toolu_…; the chat side's call_… keeps its random part. Ids of another
// form (Mistral's nine characters, the only ones its templates take back) stay as they are.
std::string tool_use_id(std::string_view chat_id) {
  if (!chat_id.starts_with("call_")) return std::string(chat_id);
  return "toolu_" + std::string(chat_id.substr(5));
}

// Input tokens read from cache are counted apart, as Anthropic does (input + cache reads = the prompt).
Value usage_value(int prompt_tokens, int cached_tokens, int output_tokens, Allocator& a) {
  Value usage(rapidjson::kObjectType);
  usage.AddMember("input_tokens", prompt_tokens - cached_tokens, a);
  usage.AddMember("cache_creation_input_tokens", 0, a);
  usage.AddMember("cache_read_input_tokens", cached_tokens, a);
  usage.AddMember("output_tokens", output_tokens, a);
  return usage;
}

Value stop_sequence_value(const std::optional<std::string>& stop, Allocator& a) {
  return stop ? text_value(*stop, a) : Value();
}

// An event's object, its type first as Anthropic writes it.
rapidjson::Document typed(const char* type) {
  rapidjson::Document doc(rapidjson::kObjectType);
  doc.AddMember("type", rapidjson::StringRef(type), doc.GetAllocator());
  return doc;
}

std::string event(const rapidjson::Document& doc) { return named_sse_event(doc["type"].GetString(), serialize(doc)); }

}  // namespace

std::string anthropic_error_json(const ApiError& error) {
  return "{\"type\":\"error\",\"error\":{\"type\":" + json::quote(error_type(error.status)) +
         ",\"message\":" + json::quote(error.message) + "}}";
}

Reply anthropic_error_reply(const ApiError& error) { return {error.status, anthropic_error_json(error), "application/json"}; }

Reply error_reply_for(std::string_view path, const ApiError& error) {
  return path.starts_with("/v1/messages") ? anthropic_error_reply(error) : Reply::error(error);
}

MessagesTranslator::MessagesTranslator(std::string model) : id_(make_api_id("msg_")), model_(std::move(model)) {}

std::string MessagesTranslator::whole_answer(const ChatOutput& answer) {
  rapidjson::Document doc(rapidjson::kObjectType);
  auto& a = doc.GetAllocator();
  doc.AddMember("id", text_value(id_, a), a);
  doc.AddMember("type", "message", a);
  doc.AddMember("role", "assistant", a);
  doc.AddMember("model", text_value(model_, a), a);
  Value content(rapidjson::kArrayType);
  if (!answer.reasoning.empty()) {
    Value block(rapidjson::kObjectType);
    block.AddMember("type", "thinking", a);
    block.AddMember("thinking", text_value(answer.reasoning, a), a);
    block.AddMember("signature", "", a);
    content.PushBack(block, a);
  }
  const bool text_block = !answer.content.empty() && (answer.calls.empty() || !only_space(answer.content));
  if (text_block || (answer.calls.empty() && answer.reasoning.empty())) {
    Value block(rapidjson::kObjectType);
    block.AddMember("type", "text", a);
    block.AddMember("text", text_value(answer.content, a), a);
    content.PushBack(block, a);
  }
  for (const auto& call : answer.calls) {
    Value block(rapidjson::kObjectType);
    block.AddMember("type", "tool_use", a);
    block.AddMember("id", text_value(tool_use_id(call.id), a), a);
    block.AddMember("name", text_value(call.name, a), a);
    // The input is an object; arguments a cut-off call left unfinished give an empty one.
    rapidjson::Document input;
    input.Parse(call.arguments.data(), call.arguments.size());
    if (input.HasParseError() || !input.IsObject()) input.SetObject();
    block.AddMember("input", Value(input, a), a);
    content.PushBack(block, a);
  }
  doc.AddMember("content", content, a);
  doc.AddMember("stop_reason", rapidjson::StringRef(stop_reason(answer.finish_reason.value_or("stop"),
                                                                answer.stop_sequence.has_value())),
                a);
  doc.AddMember("stop_sequence", stop_sequence_value(answer.stop_sequence, a), a);
  const ChatUsage usage = answer.usage.value_or(ChatUsage{});
  doc.AddMember("usage", usage_value(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens, a), a);
  return serialize(doc);
}

std::string MessagesTranslator::begin_stream() {
  begun_ = true;
  rapidjson::Document doc = typed("message_start");
  auto& a = doc.GetAllocator();
  Value message(rapidjson::kObjectType);
  message.AddMember("id", text_value(id_, a), a);
  message.AddMember("type", "message", a);
  message.AddMember("role", "assistant", a);
  message.AddMember("model", text_value(model_, a), a);
  message.AddMember("content", Value(rapidjson::kArrayType), a);
  message.AddMember("stop_reason", Value(), a);
  message.AddMember("stop_sequence", Value(), a);
  message.AddMember("usage", usage_value(prompt_tokens_, 0, 0, a), a);
  doc.AddMember("message", message, a);
  std::string out = event(doc);
  rapidjson::Document ping = typed("ping");
  return out + event(ping);
}

std::string MessagesTranslator::open(BlockKind kind, const std::string& call_id, const std::string& name) {
  block_ = kind;
  ++block_index_;
  rapidjson::Document doc = typed("content_block_start");
  auto& a = doc.GetAllocator();
  doc.AddMember("index", block_index_, a);
  Value block(rapidjson::kObjectType);
  if (kind == BlockKind::kThinking) {
    block.AddMember("type", "thinking", a);
    block.AddMember("thinking", "", a);
    block.AddMember("signature", "", a);
  } else if (kind == BlockKind::kText) {
    block.AddMember("type", "text", a);
    block.AddMember("text", "", a);
  } else {
    block.AddMember("type", "tool_use", a);
    block.AddMember("id", text_value(tool_use_id(call_id), a), a);
    block.AddMember("name", text_value(name, a), a);
    block.AddMember("input", Value(rapidjson::kObjectType), a);
  }
  doc.AddMember("content_block", block, a);
  return event(doc);
}

// The per-token event, written straight out (no tree): this runs on the engine thread.
std::string MessagesTranslator::append(std::string_view text) {
  if (text.empty()) return "";
  const auto [delta_type, field] = block_ == BlockKind::kThinking ? std::pair{"thinking_delta", "thinking"}
                                   : block_ == BlockKind::kText   ? std::pair{"text_delta", "text"}
                                                                  : std::pair{"input_json_delta", "partial_json"};
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("type"), w.String("content_block_delta");
  w.Key("index"), w.Int(block_index_);
  w.Key("delta"), w.StartObject();
  w.Key("type"), w.String(delta_type);
  w.Key(field), w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
  w.EndObject();
  w.EndObject();
  return named_sse_event("content_block_delta", std::string_view(buffer.GetString(), buffer.GetSize()));
}

std::string MessagesTranslator::close() {
  if (block_ == BlockKind::kNone) return "";
  block_ = BlockKind::kNone;
  call_index_ = -1;
  rapidjson::Document doc = typed("content_block_stop");
  doc.AddMember("index", block_index_, doc.GetAllocator());
  return event(doc);
}

std::string MessagesTranslator::stream_chunk(const ChatOutput& chunk) {
  if (ended_) return "";
  std::string out = begun_ ? "" : begin_stream();
  if (chunk.error) {
    ended_ = true;
    rapidjson::Document doc = typed("error");
    auto& a = doc.GetAllocator();
    Value error(rapidjson::kObjectType);
    error.AddMember("type", rapidjson::StringRef(error_type(chunk.error->status)), a);
    error.AddMember("message", text_value(chunk.error->message, a), a);
    doc.AddMember("error", error, a);
    return out + event(doc);
  }
  if (chunk.usage) usage_ = chunk.usage;
  if (chunk.finish_reason) finish_reason_ = chunk.finish_reason;
  if (chunk.stop_sequence) stop_sequence_ = chunk.stop_sequence;
  if (!chunk.reasoning.empty()) {
    if (block_ != BlockKind::kThinking) {
      out += close();
      out += open(BlockKind::kThinking);
    }
    out += append(chunk.reasoning);
  }
  if (!chunk.content.empty()) {
    if (block_ == BlockKind::kText) {
      out += append(chunk.content);
    } else if (only_space(chunk.content)) {
      held_space_ += chunk.content;
    } else {
      out += close();
      out += open(BlockKind::kText);
      out += append(held_space_ + chunk.content);
      held_space_.clear();
    }
  }
  for (const auto& piece : chunk.calls) {
    if (block_ != BlockKind::kToolUse || call_index_ != piece.index) {
      out += close();
      out += open(BlockKind::kToolUse, piece.id, piece.name);
      call_index_ = piece.index;
      held_space_.clear();
      made_calls_ = true;
    }
    out += append(piece.arguments);
  }
  return out;
}

std::string MessagesTranslator::stream_end() {
  if (ended_) return "";
  std::string out = begun_ ? "" : begin_stream();
  ended_ = true;
  // As in the whole answer: whitespace alone is text only when no call came; an empty answer is an
  // empty text block.
  if (block_ != BlockKind::kText && !made_calls_ && (!held_space_.empty() || block_index_ < 0)) {
    out += close();
    out += open(BlockKind::kText);
    out += append(held_space_);
  }
  out += close();
  rapidjson::Document doc = typed("message_delta");
  auto& a = doc.GetAllocator();
  Value delta(rapidjson::kObjectType);
  delta.AddMember("stop_reason",
                  rapidjson::StringRef(stop_reason(finish_reason_.value_or("stop"), stop_sequence_.has_value())), a);
  delta.AddMember("stop_sequence", stop_sequence_value(stop_sequence_, a), a);
  doc.AddMember("delta", delta, a);
  const ChatUsage usage = usage_.value_or(ChatUsage{prompt_tokens_, 0, 0});
  doc.AddMember("usage", usage_value(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens, a), a);
  out += event(doc);
  rapidjson::Document stop = typed("message_stop");
  return out + event(stop);
}

}  // namespace sluice::server
