#include "server/tool_call_output.h"

#include <algorithm>
#include <atomic>
#include <random>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace sluice::server {
namespace {

toolcall::ParserLimits limits_for(bool parallel) {
  toolcall::ParserLimits limits;
  if (!parallel) limits.max_calls = 1;
  return limits;
}

rapidjson::Value string_value(std::string_view s, rapidjson::Document::AllocatorType& a) {
  return rapidjson::Value(s.data(), static_cast<rapidjson::SizeType>(s.size()), a);
}

std::string serialize(const rapidjson::Document& doc) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  doc.Accept(w);
  return {buffer.GetString(), buffer.GetSize()};
}

bool only_space(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; });
}

}  // namespace

// Random per process, with a counter so two calls never share one.
std::string make_tool_call_id(toolcall::Format format) {
  static const char* kAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t high = rng();
  uint64_t low = ++counter ^ (rng() << 20);
  if (format == toolcall::Format::kMistral) {
    std::string id;
    for (uint64_t v = high ^ low; id.size() < 9; v /= 62) id += kAlphabet[v % 62];
    return id;
  }
  std::string id = "call_";
  for (int i = 0; i < 12; ++i, high /= 62) id += kAlphabet[high % 62];
  for (int i = 0; i < 12; ++i, low /= 62) id += kAlphabet[low % 62];
  return id;
}

ToolCallOutput::ToolCallOutput(toolcall::Format format, bool parallel, toolcall::ArgumentTypes types)
    : format_(format), parser_(format, limits_for(parallel), std::move(types)), markers_(toolcall::format_markers(format)) {}

bool ToolCallOutput::needs_special_text(std::string_view token_text) const {
  return std::find(markers_.begin(), markers_.end(), token_text) != markers_.end();
}

void ToolCallOutput::record(const toolcall::StreamDelta& delta) {
  for (const auto& c : delta.calls) {
    while (static_cast<int>(ids_.size()) <= c.index) ids_.push_back(make_tool_call_id(format_));
  }
  toolcall::accumulate(assembled_, delta);
}

toolcall::StreamDelta ToolCallOutput::push(std::string_view text) {
  toolcall::StreamDelta d = parser_.push(text);
  record(d);
  return d;
}

toolcall::StreamDelta ToolCallOutput::finish() {
  toolcall::StreamDelta d = parser_.finish();
  record(d);
  return d;
}

const char* ToolCallOutput::finish_reason(const char* engine_reason) const {
  return calls() > 0 && std::string_view(engine_reason) == "stop" ? "tool_calls" : engine_reason;
}

std::string ToolCallOutput::chunk_json(const CompletionIdentity& identity,
                                       const std::vector<toolcall::CallDelta>& calls, bool with_null_usage,
                                       int choice) const {
  // The chunk's frame (id, created, model, …) is the one every chunk has; its delta becomes the calls.
  rapidjson::Document doc;
  doc.Parse(server::chunk_json(identity, nullptr, "", nullptr, nullptr, with_null_usage, nullptr, choice));
  auto& a = doc.GetAllocator();
  rapidjson::Value list(rapidjson::kArrayType);
  for (const auto& c : calls) {
    rapidjson::Value entry(rapidjson::kObjectType);
    entry.AddMember("index", c.index, a);
    rapidjson::Value function(rapidjson::kObjectType);
    if (!c.name.empty()) {
      entry.AddMember("id", string_value(id(c.index), a), a);
      entry.AddMember("type", "function", a);
      function.AddMember("name", string_value(c.name, a), a);
    }
    function.AddMember("arguments", string_value(c.arguments, a), a);
    entry.AddMember("function", function, a);
    list.PushBack(entry, a);
  }
  rapidjson::Value delta(rapidjson::kObjectType);
  delta.AddMember("tool_calls", list, a);
  doc["choices"][0]["delta"] = delta;
  return serialize(doc);
}

std::string ToolCallOutput::completion_with_calls(const std::string& completion_json) const {
  if (calls() == 0) return completion_json;
  rapidjson::Document doc;
  doc.Parse(completion_json);
  auto& a = doc.GetAllocator();
  rapidjson::Value& message = doc["choices"][0]["message"];
  rapidjson::Value& content = message["content"];
  if (content.IsString() && only_space({content.GetString(), content.GetStringLength()})) content.SetNull();
  rapidjson::Value list(rapidjson::kArrayType);
  for (int i = 0; i < calls(); ++i) {
    const auto& call = assembled_.calls[static_cast<std::size_t>(i)];
    rapidjson::Value entry(rapidjson::kObjectType);
    entry.AddMember("id", string_value(id(i), a), a);
    entry.AddMember("type", "function", a);
    rapidjson::Value function(rapidjson::kObjectType);
    function.AddMember("name", string_value(call.name, a), a);
    function.AddMember("arguments", string_value(call.arguments, a), a);
    entry.AddMember("function", function, a);
    list.PushBack(entry, a);
  }
  message.AddMember("tool_calls", list, a);
  return serialize(doc);
}

}  // namespace sluice::server
