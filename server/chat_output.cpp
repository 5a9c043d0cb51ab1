#include "server/chat_output.h"

#include <rapidjson/document.h>

#include "util/json.h"

namespace sluice::server {
namespace {

using rapidjson::Value;

std::string text_of(const Value& object, const char* name) {
  const Value* v = json::member(object, name);
  return v && v->IsString() ? std::string(v->GetString(), v->GetStringLength()) : std::string();
}

void read_calls(const Value& holder, std::vector<ChatCallPiece>& out) {
  const Value* calls = json::member(holder, "tool_calls");
  if (!calls || !calls->IsArray()) return;
  int position = 0;
  for (const auto& call : calls->GetArray()) {
    ChatCallPiece piece;
    const Value* index = json::member(call, "index");
    piece.index = index && index->IsInt() ? index->GetInt() : position;
    piece.id = text_of(call, "id");
    if (const Value* function = json::member(call, "function"); function && function->IsObject()) {
      piece.name = text_of(*function, "name");
      piece.arguments = text_of(*function, "arguments");
    }
    out.push_back(std::move(piece));
    ++position;
  }
}

std::optional<ChatUsage> read_usage(const Value& doc) {
  const Value* usage = json::member(doc, "usage");
  if (!usage || !usage->IsObject()) return std::nullopt;
  ChatUsage u;
  u.prompt_tokens = static_cast<int>(json::integer(*usage, "prompt_tokens").value_or(0));
  u.completion_tokens = static_cast<int>(json::integer(*usage, "completion_tokens").value_or(0));
  if (const Value* details = json::member(*usage, "prompt_tokens_details"); details && details->IsObject())
    u.cached_tokens = static_cast<int>(json::integer(*details, "cached_tokens").value_or(0));
  return u;
}

// The choice's finish_reason and the stop string behind it (when a stop string ended it).
void read_finish(const Value& choice, ChatOutput& out) {
  if (auto finish = json::string(choice, "finish_reason")) out.finish_reason = *finish;
  if (auto stop = json::string(choice, "stop_reason")) out.stop_sequence = *stop;
}

std::optional<ApiError> error_of(const Value& doc) {
  const Value* error = json::member(doc, "error");
  if (!error || !error->IsObject()) return std::nullopt;
  ApiError e;
  e.status = 500;
  e.message = text_of(*error, "message");
  e.type = text_of(*error, "type");
  e.param = text_of(*error, "param");
  e.code = text_of(*error, "code");
  if (e.type.empty()) e.type = "server_error";
  return e;
}

rapidjson::Document parse(std::string_view text) {
  rapidjson::Document doc;
  doc.Parse(text.data(), text.size());
  return doc;
}

}  // namespace

std::optional<ChatOutput> read_chat_chunk(std::string_view sse_event) {
  // The job's payloads are single-line JSON; joining every data: line covers the general framing.
  std::string payload;
  std::size_t pos = 0;
  while (pos < sse_event.size()) {
    std::size_t end = sse_event.find('\n', pos);
    if (end == std::string_view::npos) end = sse_event.size();
    std::string_view line = sse_event.substr(pos, end - pos);
    if (line.starts_with("data: ")) payload.append(line.substr(6));
    else if (line.starts_with("data:")) payload.append(line.substr(5));
    pos = end + 1;
  }
  if (payload == "[DONE]") return std::nullopt;
  ChatOutput out;
  // A chunk is small: its tree lives in a buffer on the stack rather than in a fresh 64 KiB pool
  // (this runs on the engine thread for every streamed token).
  char value_buffer[8192];
  char parse_buffer[2048];
  rapidjson::MemoryPoolAllocator<> values(value_buffer, sizeof value_buffer);
  rapidjson::MemoryPoolAllocator<> parse_stack(parse_buffer, sizeof parse_buffer);
  rapidjson::GenericDocument<rapidjson::UTF8<>, rapidjson::MemoryPoolAllocator<>, rapidjson::MemoryPoolAllocator<>> doc(
      &values, sizeof parse_buffer, &parse_stack);
  doc.Parse(payload.data(), payload.size());
  if (doc.HasParseError() || !doc.IsObject()) {
    out.error = ApiError::server_error("unreadable chat completion chunk");
    return out;
  }
  if (auto error = error_of(doc)) {
    out.error = std::move(error);
    return out;
  }
  out.usage = read_usage(doc);
  const Value* choices = json::member(doc, "choices");
  if (!choices || !choices->IsArray() || choices->Empty()) return out;
  const Value& choice = (*choices)[0];
  if (const Value* delta = json::member(choice, "delta"); delta && delta->IsObject()) {
    out.reasoning = text_of(*delta, "reasoning_content");
    out.content = text_of(*delta, "content");
    read_calls(*delta, out.calls);
  }
  read_finish(choice, out);
  return out;
}

ChatOutput read_chat_completion(std::string_view json) {
  ChatOutput out;
  rapidjson::Document doc = parse(json);
  if (doc.HasParseError() || !doc.IsObject()) {
    out.error = ApiError::server_error("unreadable chat completion");
    return out;
  }
  if (auto error = error_of(doc)) {
    out.error = std::move(error);
    return out;
  }
  out.usage = read_usage(doc);
  const Value* choices = json::member(doc, "choices");
  if (!choices || !choices->IsArray() || choices->Empty()) return out;
  const Value& choice = (*choices)[0];
  if (const Value* message = json::member(choice, "message"); message && message->IsObject()) {
    out.reasoning = text_of(*message, "reasoning_content");
    out.content = text_of(*message, "content");
    read_calls(*message, out.calls);
  }
  read_finish(choice, out);
  return out;
}

ApiError read_api_error(int status, std::string_view json) {
  rapidjson::Document doc = parse(json);
  std::optional<ApiError> error = !doc.HasParseError() && doc.IsObject() ? error_of(doc) : std::nullopt;
  if (!error) error = ApiError::server_error("the request failed");
  error->status = status;
  return *error;
}

}  // namespace sluice::server
