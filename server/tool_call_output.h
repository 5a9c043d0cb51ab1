#pragma once
// The response side of tools for one chat completion: the answer's text goes through the model
// family's tool-call parser (core/toolcall); calls get ids (call_…, unique) and come out as OpenAI's
// `message.tool_calls` or as `delta.tool_calls` stream chunks; `content` is null when the answer is
// only calls, and finish_reason becomes "tool_calls".
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_format.h"
#include "toolcall/tool_call.h"

namespace sluice::server {

// A new call's id: call_ and 24 letters and digits, as OpenAI's look — or, for Mistral's format, 9
// letters and digits, the only ids Mistral's chat templates take back when the history is replayed.
std::string make_tool_call_id(toolcall::Format format = toolcall::Format::kNone);

class ToolCallOutput {
 public:
  // parallel false: only the first call is taken (later ones stay text).
  ToolCallOutput(toolcall::Format format, bool parallel, toolcall::ArgumentTypes types);

  // Special tokens are hidden from answers; these are the ones the parser needs to see.
  bool needs_special_text(std::string_view token_text) const;

  // Text as it is generated → what may be shown now (content and call pieces). Calls are also kept
  // for the whole-answer response.
  toolcall::StreamDelta push(std::string_view text);
  toolcall::StreamDelta finish();

  int calls() const { return static_cast<int>(ids_.size()); }
  const std::string& id(int index) const { return ids_.at(static_cast<std::size_t>(index)); }

  // A streamed chunk carrying call pieces (delta.tool_calls: index, and on a call's first piece its
  // id, type and function.name; then function.arguments fragments).
  std::string chunk_json(const CompletionIdentity& identity, const std::vector<toolcall::CallDelta>& calls,
                         bool with_null_usage, int choice = 0) const;
  // The whole answer's JSON with message.tool_calls added (content null when only whitespace is left).
  std::string completion_with_calls(const std::string& completion_json) const;

  // finish_reason for an answer that stopped naturally.
  const char* finish_reason(const char* engine_reason) const;

 private:
  void record(const toolcall::StreamDelta& delta);

  toolcall::Format format_;
  toolcall::StreamParser parser_;
  std::vector<std::string> markers_;
  std::vector<std::string> ids_;
  toolcall::ParsedOutput assembled_;
};

}  // namespace sluice::server
