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
  int n = 1;  // choices (the engine request's n): each streams with its index, the answer holds them all
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
  // One choice.
  GenerationJob(JobSpec spec, std::unique_ptr<TokenText> text, std::shared_ptr<ResponseChannel> channel,
                ServerCounters* counters);
  // spec.n choices, a text decoder each.
  GenerationJob(JobSpec spec, std::vector<std::unique_ptr<TokenText>> texts, std::shared_ptr<ResponseChannel> channel,
                ServerCounters* counters);
  ~GenerationJob();

  // Sets the request's on_token / on_done (and shares the channel's cancel flag with it).
  void attach(GenerationRequest& request);

  // Engine-thread callbacks (public for tests).
  bool on_token(const TokenEvent& event);
  void on_done(const GenerationResult& result);

 private:
  // What each choice has of its own: its text decoder, stop strings, reasoning split and tool-call
  // parser, and what it has emitted.
  struct Choice {
    explicit Choice(std::vector<std::string> stops) : stop(std::move(stops)) {}
    int index = 0;
    std::unique_ptr<TokenText> text;
    StopMatcher stop;
    std::optional<ReasoningSplitter> reasoning;  // set when spec_.split_reasoning
    std::unique_ptr<ToolCallOutput> tools;        // null unless the answer is parsed for tool calls
    bool role_sent = false;
    bool done = false;
    std::string full_text;                 // non-streamed: the whole completion (its content)
    std::string full_reasoning;            // non-streamed: the reasoning split off it
    std::size_t emitted_bytes = 0;         // streamed: text sent so far (for logprob text offsets)
    std::vector<TokenLogprob> pending_logprobs;  // tokens whose text has not been emitted yet
    std::vector<TokenLogprob> all_logprobs;      // non-streamed
    const char* finish = "stop";
    GenerationStats stats;
  };

  void emit(Choice& c, const std::string& text, const std::vector<TokenLogprob>& logprobs);
  void emit_parts(Choice& c, const SplitText& parts, const std::vector<TokenLogprob>& logprobs);
  void emit_text(Choice& c, const SplitText& parts, const std::vector<TokenLogprob>& logprobs);
  void emit_calls(Choice& c, const std::vector<toolcall::CallDelta>& calls);
  void fail(const std::string& error);
  void answer();   // every choice is done: the whole answer, or the stream's end
  GenerationStats usage() const;  // the prompt once, the completions of every choice
  bool send(std::string event);
  const CompletionIdentity& id() const { return spec_.identity; }

  JobSpec spec_;
  std::shared_ptr<ResponseChannel> channel_;
  ServerCounters* counters_;
  std::vector<Choice> choices_;
  int choices_done_ = 0;
  bool client_gone_ = false;
  bool failed_ = false;  // an error was answered: the other choices' ends are dropped
};

}  // namespace sluice::server
