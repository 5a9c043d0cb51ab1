#include "server/generation_job.h"

#include <algorithm>

#include "server/api_error.h"
#include "server/metrics.h"
#include "server/sse.h"
#include "tokenizer/tokenizer.h"

namespace sluice::server {
namespace {

// A request refused for KV room is told to come back soon: running sequences finish and free their
// claims within seconds, and a longer wait is already behind it (--mem-wait).
constexpr int kRetryAfterSeconds = 2;

class TokenizerText final : public TokenText {
 public:
  TokenizerText(const Tokenizer& tokenizer, std::vector<int32_t> eos_ids)
      : tokenizer_(tokenizer), decoder_(tokenizer), eos_(std::move(eos_ids)) {}
  std::string push(int32_t id) override { return decoder_.push(id); }
  std::string flush() override { return decoder_.flush(); }
  std::string piece(int32_t id) override { return tokenizer_.decode(std::vector<int32_t>{id}); }
  bool is_control(int32_t id) override {
    return std::find(eos_.begin(), eos_.end(), id) != eos_.end() || tokenizer_.is_special(id);
  }

 private:
  const Tokenizer& tokenizer_;
  StreamingDecoder decoder_;
  std::vector<int32_t> eos_;
};

}  // namespace

std::unique_ptr<TokenText> make_token_text(const Tokenizer& tokenizer, std::vector<int32_t> eos_ids) {
  return std::make_unique<TokenizerText>(tokenizer, std::move(eos_ids));
}

GenerationJob::GenerationJob(JobSpec spec, std::unique_ptr<TokenText> text, std::shared_ptr<ResponseChannel> channel,
                             ServerCounters* counters)
    : spec_(std::move(spec)), text_(std::move(text)), channel_(std::move(channel)), counters_(counters),
      stop_(spec_.stop) {
  if (spec_.split_reasoning) reasoning_.emplace(spec_.prompt_opened_think);
  if (spec_.tool_format != toolcall::Format::kNone && id().chat)
    tools_ = std::make_unique<ToolCallOutput>(spec_.tool_format, spec_.parallel_tool_calls,
                                              std::move(spec_.tool_argument_types));
  if (counters_) ++counters_->active_generations;
}

GenerationJob::~GenerationJob() {
  if (counters_) --counters_->active_generations;
}

void GenerationJob::attach(GenerationRequest& request) {
  request.cancelled = channel_->cancelled();
  request.top_logprobs = spec_.logprobs ? std::max(spec_.top_logprobs, 1) : 0;
  auto self = shared_from_this();
  request.on_token = [self](const TokenEvent& event) { return self->on_token(event); };
  request.on_done = [self](const GenerationResult& result) { self->on_done(result); };
}

bool GenerationJob::send(std::string event) {
  if (client_gone_) return false;
  if (!channel_->send_event(std::move(event))) client_gone_ = true;
  return !client_gone_;
}

void GenerationJob::emit(const std::string& text, const std::vector<TokenLogprob>& logprobs) {
  emit_parts(reasoning_ ? reasoning_->push(text) : SplitText{{}, text}, logprobs);
}

// The reasoning split comes first — a call written inside <think> is reasoning, not a call — and the
// content then goes through the tool-call parser where the answer is parsed for calls.
void GenerationJob::emit_parts(const SplitText& parts, const std::vector<TokenLogprob>& logprobs) {
  if (!tools_) return emit_text(parts, logprobs);
  toolcall::StreamDelta delta = tools_->push(parts.content);
  emit_text(SplitText{parts.reasoning, delta.content}, logprobs);
  emit_calls(delta.calls);
}

void GenerationJob::emit_calls(const std::vector<toolcall::CallDelta>& calls) {
  if (calls.empty() || !spec_.stream) return;  // a whole answer takes its calls from tools_ at the end
  emit_text(SplitText{}, {});                  // the role chunk comes first
  send(sse_event(tools_->chunk_json(id(), calls, spec_.include_usage)));
}

void GenerationJob::emit_text(const SplitText& parts, const std::vector<TokenLogprob>& logprobs) {
  const std::string& text = parts.content;
  if (!spec_.stream) {
    full_reasoning_ += parts.reasoning;
    full_text_ += text;
    all_logprobs_.insert(all_logprobs_.end(), logprobs.begin(), logprobs.end());
    return;
  }
  if (!role_sent_) {
    role_sent_ = true;
    static const std::string kAssistant = "assistant";
    if (id().chat) send(sse_event(chunk_json(id(), &kAssistant, "", nullptr, nullptr, spec_.include_usage)));
    if (!spec_.echo_text.empty()) {
      send(sse_event(chunk_json(id(), nullptr, spec_.echo_text, nullptr, nullptr, spec_.include_usage)));
      emitted_bytes_ += spec_.echo_text.size();
    }
  }
  LogprobsPart part{logprobs, emitted_bytes_};
  const bool with_logprobs = spec_.logprobs && !logprobs.empty();
  // The reasoning of a piece comes before its content; the tokens' logprobs ride on the first chunk.
  if (!parts.reasoning.empty()) {
    send(sse_event(reasoning_chunk_json(id(), parts.reasoning, with_logprobs ? &part : nullptr, spec_.include_usage)));
    if (text.empty()) return;
    part.tokens.clear();
  } else if (text.empty() && logprobs.empty()) {
    return;
  }
  send(sse_event(chunk_json(id(), nullptr, text, nullptr, spec_.logprobs ? &part : nullptr, spec_.include_usage)));
  emitted_bytes_ += text.size();
}

bool GenerationJob::on_token(const TokenEvent& event) {
  if (client_gone_) return false;
  if (spec_.logprobs) {
    TokenLogprob lp{text_->piece(event.id), event.logprob, {}};
    for (int i = 0; i < spec_.top_logprobs && i < static_cast<int>(event.top_logprobs.size()); ++i)
      lp.top.emplace_back(text_->piece(event.top_logprobs[i].id), event.top_logprobs[i].logprob);
    pending_logprobs_.push_back(std::move(lp));
  }
  std::string piece;
  if (!text_->is_control(event.id)) {
    piece = text_->push(event.id);
  } else if (tools_) {  // a call's markers may be special tokens: the parser needs their text
    std::string special = text_->piece(event.id);
    if (tools_->needs_special_text(special)) piece = std::move(special);
  }
  std::string safe = stop_.push(piece);
  if (!safe.empty() || stop_.stopped() || (spec_.stream && !role_sent_)) {
    emit(safe, pending_logprobs_);
    pending_logprobs_.clear();
  }
  return !stop_.stopped() && !client_gone_;
}

void GenerationJob::on_done(const GenerationResult& result) {
  if (!stop_.stopped()) {
    std::string rest = stop_.push(text_->flush());
    rest += stop_.flush();
    if (!rest.empty() || !pending_logprobs_.empty()) emit(rest, pending_logprobs_);
    pending_logprobs_.clear();
  }
  // What the splitter held back (a possible tag that never completed) is text after all.
  if (reasoning_) {
    SplitText tail = reasoning_->flush();
    if (!tail.empty()) emit_parts(tail, {});
  }
  if (tools_) {  // what the parser still held: a cut-off call keeps its arguments, anything else is text
    toolcall::StreamDelta last = tools_->finish();
    emit_text(SplitText{{}, last.content}, {});
    emit_calls(last.calls);
  }
  if (result.finish == FinishReason::kError && result.retry_later) {  // never started: no KV room in time
    ApiError error = ApiError::overloaded("the server is at its memory limit: " + result.error);
    error.code = "memory_limit";
    channel_->set_header("Retry-After", std::to_string(kRetryAfterSeconds));
    channel_->respond(error.status, error.to_json());
    return;
  }
  if (result.finish == FinishReason::kError) {
    ApiError error = ApiError::server_error("generation failed: " + result.error);
    if (spec_.stream && role_sent_) {
      send(sse_event(error.to_json()));
      send(sse_done());
      channel_->end_stream();
    } else {
      channel_->respond(error.status, error.to_json());
    }
    return;
  }
  const char* finish = stop_.stopped() ? "stop" : finish_reason_name(result.finish);
  if (tools_) finish = tools_->finish_reason(finish);
  if (!spec_.stream) {
    LogprobsPart part{all_logprobs_, spec_.echo_text.size()};
    std::string body = completion_json(id(), spec_.echo_text + full_text_, finish, result.stats,
                                       spec_.logprobs ? &part : nullptr, reasoning_ ? &full_reasoning_ : nullptr,
                                       stop_.matched());
    channel_->respond(200, tools_ ? tools_->completion_with_calls(body) : body);
    return;
  }
  emit("", {});  // role (and echo) if no token came
  send(sse_event(chunk_json(id(), nullptr, "", finish, nullptr, spec_.include_usage, stop_.matched())));
  if (spec_.include_usage) send(sse_event(usage_chunk_json(id(), result.stats)));
  send(sse_done());
  channel_->end_stream();
}

}  // namespace sluice::server
