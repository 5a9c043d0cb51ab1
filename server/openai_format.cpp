#include "server/openai_format.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace sluice::server {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void key(Writer& w, const char* k) { w.Key(k); }
void str(Writer& w, const std::string& s) { w.String(s.data(), static_cast<rapidjson::SizeType>(s.size())); }
void num(Writer& w, double x) { std::isfinite(x) ? w.Double(x) : w.Double(-9999.0); }

void header(Writer& w, const CompletionIdentity& id, const char* object) {
  key(w, "id"), str(w, id.id);
  key(w, "object"), w.String(object);
  key(w, "created"), w.Int64(id.created);
  key(w, "model"), str(w, id.model);
  key(w, "system_fingerprint"), w.String("sluice");
}

void usage(Writer& w, const GenerationStats& s) {
  key(w, "usage");
  w.StartObject();
  key(w, "prompt_tokens"), w.Int(s.prompt_tokens);
  key(w, "completion_tokens"), w.Int(s.completion_tokens);
  key(w, "total_tokens"), w.Int(s.prompt_tokens + s.completion_tokens);
  key(w, "prompt_tokens_details");
  w.StartObject();
  key(w, "cached_tokens"), w.Int(s.cached_tokens);
  w.EndObject();
  w.EndObject();
  // llama.cpp's timings shape, plus the queue wait.
  key(w, "timings");
  w.StartObject();
  key(w, "cache_n"), w.Int(s.cached_tokens);
  key(w, "prompt_n"), w.Int(s.prompt_tokens - s.cached_tokens);
  key(w, "prompt_ms"), num(w, s.prefill_ms);
  key(w, "prompt_per_second"), num(w, s.prefill_tps());
  key(w, "predicted_n"), w.Int(s.completion_tokens);
  key(w, "predicted_ms"), num(w, s.decode_ms);
  key(w, "predicted_per_second"), num(w, s.decode_tps());
  key(w, "queue_ms"), num(w, s.queue_ms);
  w.EndObject();
}

void token_bytes(Writer& w, const std::string& token) {
  key(w, "bytes");
  w.StartArray();
  for (unsigned char c : token) w.Int(c);
  w.EndArray();
}

void logprobs_value(Writer& w, bool chat, const LogprobsPart* lp) {
  key(w, "logprobs");
  if (!lp) {
    w.Null();
    return;
  }
  w.StartObject();
  if (chat) {
    key(w, "content");
    w.StartArray();
    for (const auto& t : lp->tokens) {
      w.StartObject();
      key(w, "token"), str(w, t.token);
      key(w, "logprob"), num(w, t.logprob);
      token_bytes(w, t.token);
      key(w, "top_logprobs");
      w.StartArray();
      for (const auto& [tok, p] : t.top) {
        w.StartObject();
        key(w, "token"), str(w, tok);
        key(w, "logprob"), num(w, p);
        token_bytes(w, tok);
        w.EndObject();
      }
      w.EndArray();
      w.EndObject();
    }
    w.EndArray();
  } else {
    key(w, "tokens");
    w.StartArray();
    for (const auto& t : lp->tokens) str(w, t.token);
    w.EndArray();
    key(w, "token_logprobs");
    w.StartArray();
    for (const auto& t : lp->tokens) num(w, t.logprob);
    w.EndArray();
    key(w, "top_logprobs");
    w.StartArray();
    for (const auto& t : lp->tokens) {
      w.StartObject();
      for (const auto& [tok, p] : t.top) str(w, tok), num(w, p);
      w.EndObject();
    }
    w.EndArray();
    key(w, "text_offset");
    w.StartArray();
    std::size_t offset = lp->text_offset;
    for (const auto& t : lp->tokens) {
      w.Uint64(offset);
      offset += t.token.size();
    }
    w.EndArray();
  }
  w.EndObject();
}

void finish(Writer& w, const char* reason, const std::string* stop_string = nullptr) {
  key(w, "finish_reason");
  reason ? w.String(reason) : w.Null();
  if (stop_string) key(w, "stop_reason"), str(w, *stop_string);
}

}  // namespace

CompletionIdentity make_identity(bool chat, std::string model) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  CompletionIdentity id;
  id.chat = chat;
  id.model = std::move(model);
  id.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count();
  id.id = fmt::format("{}{:08x}{:012x}", chat ? "chatcmpl-" : "cmpl-", static_cast<uint32_t>(salt), ++counter);
  return id;
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "length";  // a deadline or shutdown cut it short
    case FinishReason::kError: return "error";
  }
  return "stop";
}

std::string completion_json(const CompletionIdentity& id, const std::string& text, const char* finish_reason,
                            const GenerationStats& stats, const LogprobsPart* logprobs,
                            const std::string* reasoning_content, const std::string* stop_reason) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  header(w, id, id.chat ? "chat.completion" : "text_completion");
  key(w, "choices");
  w.StartArray();
  w.StartObject();
  key(w, "index"), w.Int(0);
  if (id.chat) {
    key(w, "message");
    w.StartObject();
    key(w, "role"), w.String("assistant");
    key(w, "content"), str(w, text);
    if (reasoning_content) {
      key(w, "reasoning_content");
      if (reasoning_content->empty()) w.Null();
      else str(w, *reasoning_content);
    }
    w.EndObject();
  } else {
    key(w, "text"), str(w, text);
  }
  logprobs_value(w, id.chat, logprobs);
  finish(w, finish_reason, stop_reason);
  w.EndObject();
  w.EndArray();
  usage(w, stats);
  w.EndObject();
  return {buffer.GetString(), buffer.GetSize()};
}

std::string chunk_json(const CompletionIdentity& id, const std::string* role, const std::string& text,
                       const char* finish_reason, const LogprobsPart* logprobs, bool with_null_usage,
                       const std::string* stop_reason, int index) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  header(w, id, id.chat ? "chat.completion.chunk" : "text_completion");
  key(w, "choices");
  w.StartArray();
  w.StartObject();
  key(w, "index"), w.Int(index);
  if (id.chat) {
    key(w, "delta");
    w.StartObject();
    if (role) key(w, "role"), str(w, *role);
    if (role || !text.empty() || !finish_reason) key(w, "content"), str(w, text);
    w.EndObject();
  } else {
    key(w, "text"), str(w, text);
  }
  logprobs_value(w, id.chat, logprobs);
  finish(w, finish_reason, stop_reason);
  w.EndObject();
  w.EndArray();
  if (with_null_usage) key(w, "usage"), w.Null();
  w.EndObject();
  return {buffer.GetString(), buffer.GetSize()};
}

std::string reasoning_chunk_json(const CompletionIdentity& id, const std::string& reasoning, const LogprobsPart* logprobs,
                                 bool with_null_usage, int index) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  header(w, id, "chat.completion.chunk");
  key(w, "choices");
  w.StartArray();
  w.StartObject();
  key(w, "index"), w.Int(index);
  key(w, "delta");
  w.StartObject();
  key(w, "reasoning_content"), str(w, reasoning);
  w.EndObject();
  logprobs_value(w, /*chat=*/true, logprobs);
  finish(w, nullptr);
  w.EndObject();
  w.EndArray();
  if (with_null_usage) key(w, "usage"), w.Null();
  w.EndObject();
  return {buffer.GetString(), buffer.GetSize()};
}

std::string merge_choices_json(const std::vector<std::string>& completions) {
  if (completions.size() == 1) return completions.front();
  rapidjson::Document merged;
  rapidjson::Value choices(rapidjson::kArrayType);
  for (std::size_t i = 0; i < completions.size(); ++i) {
    rapidjson::Document one;
    one.Parse(completions[i].data(), completions[i].size());
    if (i == 0) merged.CopyFrom(one, merged.GetAllocator());
    rapidjson::Value choice(one["choices"][0], merged.GetAllocator());
    choice["index"].SetInt(static_cast<int>(i));
    choices.PushBack(choice, merged.GetAllocator());
  }
  merged["choices"] = choices;
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  merged.Accept(w);
  return {buffer.GetString(), buffer.GetSize()};
}

std::string usage_chunk_json(const CompletionIdentity& id, const GenerationStats& stats) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  header(w, id, id.chat ? "chat.completion.chunk" : "text_completion");
  key(w, "choices");
  w.StartArray();
  w.EndArray();
  usage(w, stats);
  w.EndObject();
  return {buffer.GetString(), buffer.GetSize()};
}

}  // namespace sluice::server
