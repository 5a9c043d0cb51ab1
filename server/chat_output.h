#pragma once
// What a chat completion said, read back from the JSON a GenerationJob writes — a whole
// `chat.completion` or one streamed `chat.completion.chunk` — for the APIs that are translated from
// chat completions (the Responses API, Anthropic's Messages API). The generation logic stays in one
// place; these readers are the seam its output crosses.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"

namespace sluice::server {

// One tool call, or (streamed) a piece of one: the first piece of a call carries its id and name,
// later pieces only argument text.
struct ChatCallPiece {
  int index = 0;
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChatUsage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
};

struct ChatOutput {
  std::string reasoning;  // reasoning_content
  std::string content;
  std::vector<ChatCallPiece> calls;
  std::optional<std::string> finish_reason;  // stop, length, tool_calls
  std::optional<std::string> stop_sequence;  // the stop string that ended it (vLLM's stop_reason)
  std::optional<ChatUsage> usage;
  std::optional<ApiError> error;  // a stream that failed after it began
};

// One framed server-sent event of a chat stream (`data: {...}\n\n`). nullopt for `data: [DONE]`.
std::optional<ChatOutput> read_chat_chunk(std::string_view sse_event);
// A whole (non-streamed) chat completion.
ChatOutput read_chat_completion(std::string_view json);
// An error body in OpenAI's shape, with the status it came with (a body that is not one: a 500 saying so).
ApiError read_api_error(int status, std::string_view json);

}  // namespace sluice::server
