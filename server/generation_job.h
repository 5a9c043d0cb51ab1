#pragma once
// One completion in flight: turns the engine's token callbacks (on the engine thread) into text,
// finds stop strings across token boundaries, and answers through the connection's ResponseChannel —
// as one JSON response, or as server-sent event chunks.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/openai_format.h"
#include "server/reasoning_split.h"
#include "server/response_channel.h"
#include "server/stop_matcher.h"
#include "server/tool_call_output.h"

namespace sluice {
class Tokenizer;
}

namespace sluice::server {

class ServerCounters;

// Token ids → text for one completion (wraps the tokenizer's streaming decoder).
class TokenText {
 public:
  virtual ~TokenText() = default;
  virtual std::string push(int32_t id) = 0;     // complete UTF-8 text this token finishes
  virtual std::string flush() = 0;              // what is left at the end
  virtual std::string piece(int32_t id) = 0;    // one token's own text (for logprobs)
  virtual bool is_control(int32_t id) = 0;      // EOS and special tokens: counted, not shown
};

std::unique_ptr<TokenText> make_token_text(const Tokenizer& tokenizer, std::vector<int32_t> eos_ids);

struct JobSpec {
  CompletionIdentity identity;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int top_logprobs = 0;
  std::vector<std::string> stop;
  std::string echo_text;  // text completions with echo: the prompt, put before the completion
  // Chat with a <think>-style template: the answer's reasoning goes to reasoning_content.
  bool split_reasoning = false;
  bool prompt_opened_think = false;  // the prompt ends inside <think>: the answer starts as reasoning
  // Chat with tools and tool_choice auto (or forced: required / named): the answer (its content, after the reasoning split) is parsed
  // for calls in this syntax.
  toolcall::Format tool_format = toolcall::Format::kNone;
  bool parallel_tool_calls = true;
  toolcall::ArgumentTypes tool_argument_types;  // what the tools' schemas declare, for converted notations
};

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  GenerationJob(JobSpec spec, std::unique_ptr<TokenText> text, std::shared_ptr<ResponseChannel> channel,
                ServerCounters* counters);
  ~GenerationJob();

  // Sets the request's on_token / on_done (and shares the channel's cancel flag with it).
  void attach(GenerationRequest& request);

  // Engine-thread callbacks (public for tests).
  bool on_token(const TokenEvent& event);
  void on_done(const GenerationResult& result);

 private:
  void emit(const std::string& text, const std::vector<TokenLogprob>& logprobs);
  void emit_parts(const SplitText& parts, const std::vector<TokenLogprob>& logprobs);
  void emit_text(const SplitText& parts, const std::vector<TokenLogprob>& logprobs);
  void emit_calls(const std::vector<toolcall::CallDelta>& calls);
  bool send(std::string event);
  const CompletionIdentity& id() const { return spec_.identity; }

  JobSpec spec_;
  std::unique_ptr<TokenText> text_;
  std::shared_ptr<ResponseChannel> channel_;
  ServerCounters* counters_;
  StopMatcher stop_;
  std::optional<ReasoningSplitter> reasoning_;  // set when spec_.split_reasoning
  std::unique_ptr<ToolCallOutput> tools_;        // null unless the answer is parsed for tool calls
  bool role_sent_ = false;
  bool client_gone_ = false;
  std::string full_text_;                 // non-streamed: the whole completion (its content)
  std::string full_reasoning_;            // non-streamed: the reasoning split off it
  std::size_t emitted_bytes_ = 0;         // streamed: text sent so far (for logprob text offsets)
  std::vector<TokenLogprob> pending_logprobs_;  // tokens whose text has not been emitted yet
  std::vector<TokenLogprob> all_logprobs_;      // non-streamed
};

}  // namespace sluice::server
