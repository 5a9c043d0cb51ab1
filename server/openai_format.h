#pragma once
// The JSON objects of OpenAI's chat and text completion responses (plain and streamed chunks).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace sluice::server {

struct CompletionIdentity {
  std::string id;        // chatcmpl-... / cmpl-...
  int64_t created = 0;   // Unix seconds
  std::string model;
  bool chat = true;
};

CompletionIdentity make_identity(bool chat, std::string model);

struct TokenLogprob {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

// Chat: {"content":[...]}; text: {"tokens","token_logprobs","top_logprobs","text_offset"}.
struct LogprobsPart {
  std::vector<TokenLogprob> tokens;
  std::size_t text_offset = 0;  // where this part's text starts in the completion (text form)
};

// reasoning_content: non-null for a model that reasons (<think>): message.reasoning_content is the
// string, or null when the answer held none.
std::string completion_json(const CompletionIdentity& id, const std::string& text, const char* finish_reason,
                            const GenerationStats& stats, const LogprobsPart* logprobs,
                            const std::string* reasoning_content = nullptr, const std::string* stop_reason = nullptr);
// A streamed chunk of choice `index`. Chat: `role` first (delta {role, content:""}), then content
// deltas; the last carries finish_reason and an empty delta.
// `stop_reason` (vLLM's field, beside finish_reason "stop"): the stop string that ended the answer.
std::string chunk_json(const CompletionIdentity& id, const std::string* role, const std::string& text,
                       const char* finish_reason, const LogprobsPart* logprobs, bool with_null_usage,
                       const std::string* stop_reason = nullptr, int index = 0);
// A streamed chat chunk of reasoning: delta {reasoning_content} (vLLM's and DeepSeek's field).
std::string reasoning_chunk_json(const CompletionIdentity& id, const std::string& reasoning, const LogprobsPart* logprobs,
                                 bool with_null_usage, int index = 0);
// Whole answers of n choices (completion_json's, each with its choice in choices[0]) as one: their
// choices in order, indexed 0..n-1, and the usage of the first (the caller gives it the total).
std::string merge_choices_json(const std::vector<std::string>& completions);
// The final usage chunk (choices: []) for stream_options.include_usage.
std::string usage_chunk_json(const CompletionIdentity& id, const GenerationStats& stats);

const char* finish_reason_name(FinishReason reason);

}  // namespace sluice::server
