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
    : GenerationJob(std::move(spec), [&] {
        std::vector<std::unique_ptr<TokenText>> texts;
        texts.push_back(std::move(text));
        return texts;
      }(), std::move(channel), counters) {}

GenerationJob::GenerationJob(JobSpec spec, std::vector<std::unique_ptr<TokenText>> texts,
                             std::shared_ptr<ResponseChannel> channel, ServerCounters* counters)
    : spec_(std::move(spec)), channel_(std::move(channel)), counters_(counters) {
  spec_.n = static_cast<int>(texts.size());
  choices_.reserve(texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    Choice& c = choices_.emplace_back(spec_.stop);
    c.index = static_cast<int>(i);
    c.text = std::move(texts[i]);
    if (spec_.split_reasoning) c.reasoning.emplace(spec_.prompt_opened_think);
    if (spec_.tool_format != toolcall::Format::kNone && id().chat)
      c.tools = std::make_unique<ToolCallOutput>(spec_.tool_format, spec_.parallel_tool_calls, spec_.tool_argument_types);
  }
  if (counters_) ++counters_->active_generations;
}

GenerationJob::~GenerationJob() {
  if (counters_) --counters_->active_generations;
}

void GenerationJob::attach(GenerationRequest& request) {
  request.cancelled = channel_->cancelled();
  request.n = spec_.n;
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

void GenerationJob::emit(Choice& c, const std::string& text, const std::vector<TokenLogprob>& logprobs) {
  emit_parts(c, c.reasoning ? c.reasoning->push(text) : SplitText{{}, text}, logprobs);
}

// The reasoning split comes first — a call written inside <think> is reasoning, not a call — and the
// content then goes through the tool-call parser where the answer is parsed for calls.
void GenerationJob::emit_parts(Choice& c, const SplitText& parts, const std::vector<TokenLogprob>& logprobs) {
  if (!c.tools) return emit_text(c, parts, logprobs);
  toolcall::StreamDelta delta = c.tools->push(parts.content);
  emit_text(c, SplitText{parts.reasoning, delta.content}, logprobs);
  emit_calls(c, delta.calls);
}

void GenerationJob::emit_calls(Choice& c, const std::vector<toolcall::CallDelta>& calls) {
  if (calls.empty() || !spec_.stream) return;  // a whole answer takes its calls from tools at the end
  emit_text(c, SplitText{}, {});               // the role chunk comes first
  send(sse_event(c.tools->chunk_json(id(), calls, spec_.include_usage, c.index)));
}

void GenerationJob::emit_text(Choice& c, const SplitText& parts, const std::vector<TokenLogprob>& logprobs) {
  const std::string& text = parts.content;
  if (!spec_.stream) {
    c.full_reasoning += parts.reasoning;
    c.full_text += text;
    c.all_logprobs.insert(c.all_logprobs.end(), logprobs.begin(), logprobs.end());
    return;
  }
  const bool first = !c.role_sent;
  if (first) {
    c.role_sent = true;
    static const std::string kAssistant = "assistant";
    if (id().chat) send(sse_event(chunk_json(id(), &kAssistant, "", nullptr, nullptr, spec_.include_usage, nullptr, c.index)));
    if (!spec_.echo_text.empty()) {
      send(sse_event(chunk_json(id(), nullptr, spec_.echo_text, nullptr, nullptr, spec_.include_usage, nullptr, c.index)));
      c.emitted_bytes += spec_.echo_text.size();
    }
  }
  LogprobsPart part{logprobs, c.emitted_bytes};
  const bool with_logprobs = spec_.logprobs && !logprobs.empty();
  // The reasoning of a piece comes before its content; the tokens' logprobs ride on the first chunk.
  if (!parts.reasoning.empty()) {
    send(sse_event(reasoning_chunk_json(id(), parts.reasoning, with_logprobs ? &part : nullptr, spec_.include_usage, c.index)));
    if (text.empty()) return;
    part.tokens.clear();
  } else if (text.empty() && logprobs.empty()) {
    // The first token's chunk goes out even without text (a chat stream's role chunk does the same),
    // so a client sees when generation started: a token may be part of a character, or have no text.
    if (!first || id().chat || !spec_.echo_text.empty()) return;
  }
  send(sse_event(chunk_json(id(), nullptr, text, nullptr, spec_.logprobs ? &part : nullptr, spec_.include_usage, nullptr, c.index)));
  c.emitted_bytes += text.size();
}

bool GenerationJob::on_token(const TokenEvent& event) {
  if (client_gone_ || failed_ || event.choice < 0 || event.choice >= static_cast<int>(choices_.size())) return false;
  Choice& c = choices_[static_cast<std::size_t>(event.choice)];
  if (spec_.logprobs) {
    TokenLogprob lp{c.text->piece(event.id), event.logprob, {}};
    for (int i = 0; i < spec_.top_logprobs && i < static_cast<int>(event.top_logprobs.size()); ++i)
      lp.top.emplace_back(c.text->piece(event.top_logprobs[i].id), event.top_logprobs[i].logprob);
    c.pending_logprobs.push_back(std::move(lp));
  }
  std::string piece;
  if (!c.text->is_control(event.id)) {
    piece = c.text->push(event.id);
  } else if (c.tools) {  // a call's markers may be special tokens: the parser needs their text
    std::string special = c.text->piece(event.id);
    if (c.tools->needs_special_text(special)) piece = std::move(special);
  }
  std::string safe = c.stop.push(piece);
  if (!safe.empty() || c.stop.stopped() || (spec_.stream && !c.role_sent)) {
    emit(c, safe, c.pending_logprobs);
    c.pending_logprobs.clear();
  }
  return !c.stop.stopped() && !client_gone_;
}

void GenerationJob::fail(const std::string& error) {
  failed_ = true;
  ApiError e = ApiError::server_error("generation failed: " + error);
  const bool streaming = spec_.stream && std::any_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.role_sent; });
  if (streaming) {
    send(sse_event(e.to_json()));
    send(sse_done());
    channel_->end_stream();
  } else {
    channel_->respond(e.status, e.to_json());
  }
}

void GenerationJob::on_done(const GenerationResult& result) {
  if (failed_ || result.choice < 0 || result.choice >= static_cast<int>(choices_.size())) return;
  if (result.finish == FinishReason::kError && result.retry_later) {  // never started: no KV room in time
    failed_ = true;
    ApiError error = ApiError::overloaded("the server is at its memory limit: " + result.error);
    error.code = "memory_limit";
    channel_->set_header("Retry-After", std::to_string(kRetryAfterSeconds));
    channel_->respond(error.status, error.to_json());
    return;
  }
  Choice& c = choices_[static_cast<std::size_t>(result.choice)];
  if (c.done) return;
  c.done = true;
  ++choices_done_;
  if (!c.stop.stopped()) {
    std::string rest = c.stop.push(c.text->flush());
    rest += c.stop.flush();
    if (!rest.empty() || !c.pending_logprobs.empty()) emit(c, rest, c.pending_logprobs);
    c.pending_logprobs.clear();
  }
  // What the splitter held back (a possible tag that never completed) is text after all.
  if (c.reasoning) {
    SplitText tail = c.reasoning->flush();
    if (!tail.empty()) emit_parts(c, tail, {});
  }
  if (c.tools) {  // what the parser still held: a cut-off call keeps its arguments, anything else is text
    toolcall::StreamDelta last = c.tools->finish();
    emit_text(c, SplitText{{}, last.content}, {});
    emit_calls(c, last.calls);
  }
  // One choice failing fails the request: the others, still running, stop at their next token.
  if (result.finish == FinishReason::kError) return fail(result.error);
  c.finish = c.stop.stopped() ? "stop" : finish_reason_name(result.finish);
  if (c.tools) c.finish = c.tools->finish_reason(c.finish);
  c.stats = result.stats;
  if (spec_.stream) {
    emit(c, "", {});  // role (and echo) if no token came
    send(sse_event(chunk_json(id(), nullptr, "", c.finish, nullptr, spec_.include_usage, c.stop.matched(), c.index)));
  }
  if (choices_done_ == static_cast<int>(choices_.size())) answer();
}

GenerationStats GenerationJob::usage() const {
  GenerationStats total = choices_.front().stats;  // the prompt, prefilled once (by choice 0)
  for (std::size_t i = 1; i < choices_.size(); ++i) {
    total.completion_tokens += choices_[i].stats.completion_tokens;
    total.decode_ms = std::max(total.decode_ms, choices_[i].stats.decode_ms);
  }
  return total;
}

void GenerationJob::answer() {
  const GenerationStats total = usage();
  if (!spec_.stream) {
    std::vector<std::string> bodies;
    for (Choice& c : choices_) {
      LogprobsPart part{c.all_logprobs, spec_.echo_text.size()};
      std::string body = completion_json(id(), spec_.echo_text + c.full_text, c.finish, c.index == 0 ? total : c.stats,
                                         spec_.logprobs ? &part : nullptr, c.reasoning ? &c.full_reasoning : nullptr,
                                         c.stop.matched());
      bodies.push_back(c.tools ? c.tools->completion_with_calls(body) : std::move(body));
    }
    channel_->respond(200, merge_choices_json(bodies));
    return;
  }
  if (spec_.include_usage) send(sse_event(usage_chunk_json(id(), total)));
  send(sse_done());
  channel_->end_stream();
}

}  // namespace sluice::server
