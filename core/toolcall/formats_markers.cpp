// Families that frame calls with special tokens and write the arguments as JSON between them:
// DeepSeek V3/R1/V3.1, Kimi K2, and gpt-oss's harmony message headers.
#include "toolcall/syntax.h"

namespace sluice::toolcall {
namespace {

using R = Cursor::Result;

HeaderStep from_failure(R r, std::size_t marker_bytes) {
  return r == Cursor::kMore ? need_more() : no_call(marker_bytes);
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return std::string(s);
}

// A header that opens a block (`section`) of calls, each opened by `call_open`. Continuations either
// start the next call or close the block with `section_close`.
R open_call_in_section(Cursor& c, bool continuation, std::string_view section, std::string_view call_open,
                       std::string_view section_close, HeaderStep& ended) {
  c.skip_space();
  if (continuation) {
    if (c.done()) return c.at_end ? Cursor::kFail : Cursor::kMore;
    std::size_t which = 0;
    R r = c.one_of({section_close, call_open}, &which);
    if (r == Cursor::kOk && which == 0) ended = end_region(c.pos);
    return r;
  }
  if (c.rest().starts_with(section) || (!c.at_end && section.starts_with(c.rest()))) {
    if (R r = c.literal(section); r != Cursor::kOk) return r;
    c.skip_space();
  }
  return c.literal(call_open);
}

class DeepSeek final : public Syntax {
 public:
  static constexpr std::string_view kSection = "<｜tool▁calls▁begin｜>";
  static constexpr std::string_view kSectionEnd = "<｜tool▁calls▁end｜>";
  static constexpr std::string_view kCall = "<｜tool▁call▁begin｜>";
  static constexpr std::string_view kSep = "<｜tool▁sep｜>";
  static constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
  std::vector<std::string> triggers() const override { return {std::string(kSection), std::string(kCall)}; }
  std::vector<std::string> markers() const override {
    return {std::string(kSection), std::string(kSectionEnd), std::string(kCall), std::string(kSep),
            std::string(kCallEnd)};
  }
  HeaderStep header(std::string_view text, bool continuation, bool at_end) const override {
    Cursor c{text, at_end};
    HeaderStep ended;
    R r = open_call_in_section(c, continuation, kSection, kCall, kSectionEnd, ended);
    if (ended.kind == HeaderStep::kEndRegion) return ended;
    if (r != Cursor::kOk) return continuation ? (r == Cursor::kMore ? need_more() : end_region(0)) : from_failure(r, 1);
    const std::size_t marker = c.pos;
    std::string first;
    if (R r2 = c.until(kSep, first, 256); r2 != Cursor::kOk) return from_failure(r2, marker);
    std::string name = trim(first);
    if (name == "function") {  // V3 / R1: function<sep>NAME\n```json\n{…}\n```
      std::string line;
      if (R r2 = c.until("\n", line, 256); r2 != Cursor::kOk) return from_failure(r2, marker);
      name = trim(line);
      c.skip_space();
      if (R r2 = c.literal("```json"); r2 != Cursor::kOk) return from_failure(r2, marker);
    }
    if (name.empty()) return no_call(marker);
    if (R r2 = expect_object_start(c); r2 != Cursor::kOk) return from_failure(r2, marker);
    return call(c.pos, std::move(name));
  }
  TrailerStep trailer(std::string_view text, bool at_end) const override {
    Cursor c{text, at_end};
    c.skip_space();
    R r = c.rest().starts_with("`") || (!at_end && c.done()) ? c.literal("```") : Cursor::kOk;
    if (r == Cursor::kOk) {
      c.skip_space();
      r = c.literal(kCallEnd);
    }
    if (r == Cursor::kMore) return TrailerStep{true, 0, false};
    return TrailerStep{false, c.pos, r == Cursor::kOk};
  }
};

class Kimi final : public Syntax {
 public:
  static constexpr std::string_view kSection = "<|tool_calls_section_begin|>";
  static constexpr std::string_view kSectionEnd = "<|tool_calls_section_end|>";
  static constexpr std::string_view kCall = "<|tool_call_begin|>";
  static constexpr std::string_view kArgs = "<|tool_call_argument_begin|>";
  static constexpr std::string_view kCallEnd = "<|tool_call_end|>";
  std::vector<std::string> triggers() const override { return {std::string(kSection), std::string(kCall)}; }
  std::vector<std::string> markers() const override {
    return {std::string(kSection), std::string(kSectionEnd), std::string(kCall), std::string(kArgs),
            std::string(kCallEnd)};
  }
  HeaderStep header(std::string_view text, bool continuation, bool at_end) const override {
    Cursor c{text, at_end};
    HeaderStep ended;
    R r = open_call_in_section(c, continuation, kSection, kCall, kSectionEnd, ended);
    if (ended.kind == HeaderStep::kEndRegion) return ended;
    if (r != Cursor::kOk) return continuation ? (r == Cursor::kMore ? need_more() : end_region(0)) : from_failure(r, 1);
    const std::size_t marker = c.pos;
    // The call's id names the function: functions.NAME:INDEX.
    std::string id;
    if (R r2 = c.until(kArgs, id, 256); r2 != Cursor::kOk) return from_failure(r2, marker);
    std::string name = trim(id);
    if (name.starts_with("functions.")) name.erase(0, 10);
    if (auto colon = name.rfind(':'); colon != std::string::npos) name.erase(colon);
    if (name.empty()) return no_call(marker);
    if (R r2 = expect_object_start(c); r2 != Cursor::kOk) return from_failure(r2, marker);
    return call(c.pos, std::move(name));
  }
  TrailerStep trailer(std::string_view text, bool at_end) const override {
    Cursor c{text, at_end};
    c.skip_space();
    R r = c.literal(kCallEnd);
    if (r == Cursor::kMore) return TrailerStep{true, 0, false};
    return TrailerStep{false, c.pos, r == Cursor::kOk};
  }
};

// Harmony (gpt-oss): the answer is a run of messages, each `<|channel|>NAME [to=RECIPIENT]
// [<|constrain|>TYPE]<|message|>BODY` ended by <|end|>, <|return|> or <|call|> (later ones opened by
// <|start|>assistant, where the recipient may also stand). A message to functions.NAME is a call;
// the headers and ends of the others are dropped and their bodies are content (splitting analysis
// from final text is the reasoning parser's work).
class Harmony final : public Syntax {
 public:
  std::vector<std::string> triggers() const override {
    return {"<|start|>", "<|channel|>", "<|end|>", "<|return|>", "<|call|>"};
  }
  std::vector<std::string> markers() const override {
    return {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|return|>", "<|call|>"};
  }
  std::vector<std::string> anchored_triggers() const override { return {"to="}; }
  HeaderStep header(std::string_view text, bool /*continuation*/, bool at_end) const override {
    Cursor c{text, at_end};
    std::size_t which = 0;
    std::string recipient;
    if (text.starts_with("to=")) {  // the answer goes on the prompt's <|start|>assistant: RECIPIENT<|channel|>…
      if (R r = read_recipient(c, recipient); r != Cursor::kOk) return from_failure(r, 1);
      if (R r = c.literal("<|channel|>"); r != Cursor::kOk) return from_failure(r, 1);
      return channel_header(c, recipient, 1);
    }
    if (R r = c.one_of({"<|start|>", "<|channel|>", "<|end|>", "<|return|>", "<|call|>"}, &which); r != Cursor::kOk)
      return from_failure(r, 1);
    const std::size_t marker = c.pos;
    if (which >= 2) {
      HeaderStep s;
      s.kind = HeaderStep::kSkip;
      s.consumed = c.pos;
      return s;
    }
    if (which == 0) {  // <|start|>ROLE [to=RECIPIENT]
      std::string role;
      if (R r = c.word("abcdefghijklmnopqrstuvwxyz", role); r != Cursor::kOk) return from_failure(r, marker);
      if (R r = read_recipient(c, recipient); r != Cursor::kOk) return from_failure(r, marker);
      if (R r = c.one_of({"<|channel|>", "<|message|>"}, &which); r != Cursor::kOk) return from_failure(r, marker);
      if (which == 1) return skip_or_call(c, recipient, marker);
    }
    return channel_header(c, recipient, marker);
  }
  TrailerStep trailer(std::string_view text, bool at_end) const override {
    Cursor c{text, at_end};
    R r = c.literal("<|call|>");
    if (r == Cursor::kMore || (!at_end && text.empty())) return TrailerStep{true, 0, false};
    return TrailerStep{false, r == Cursor::kOk ? c.pos : 0, false};
  }

 private:
  // After <|channel|>: NAME [to=RECIPIENT] [<|constrain|>TYPE | TYPE] <|message|>.
  static HeaderStep channel_header(Cursor& c, std::string recipient, std::size_t marker) {
    std::string channel;
    if (R r = c.word("abcdefghijklmnopqrstuvwxyz", channel); r != Cursor::kOk) return from_failure(r, marker);
    if (R r = read_recipient(c, recipient); r != Cursor::kOk) return from_failure(r, marker);
    c.skip_space();
    if (R r = c.literal("<|constrain|>"); r == Cursor::kMore) return need_more();
    if (!c.done() && c.text[c.pos] != '<') {
      std::string type;
      if (R r = c.word("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", type); r != Cursor::kOk)
        return from_failure(r, marker);
    }
    if (R r = c.literal("<|message|>"); r != Cursor::kOk) return from_failure(r, marker);
    return skip_or_call(c, recipient, marker);
  }
  static R read_recipient(Cursor& c, std::string& recipient) {
    std::size_t save = c.pos;
    c.skip_space();
    R r = c.literal("to=");
    if (r != Cursor::kOk) {
      if (r == Cursor::kMore) return r;
      c.pos = save;
      return Cursor::kOk;
    }
    if (R w = c.word(kNameChars, recipient); w != Cursor::kOk) return w;
    c.skip_space();
    return Cursor::kOk;
  }
  static HeaderStep skip_or_call(Cursor& c, const std::string& recipient, std::size_t marker) {
    if (recipient.starts_with("functions.") && recipient.size() > 10) {
      if (R r = expect_object_start(c); r != Cursor::kOk) return from_failure(r, marker);
      return call(c.pos, recipient.substr(10));
    }
    HeaderStep s;
    s.kind = HeaderStep::kSkip;
    s.consumed = c.pos;
    return s;
  }
};

}  // namespace

std::unique_ptr<Syntax> make_marker_family_syntax(Format format) {
  switch (format) {
    case Format::kDeepSeek: return std::make_unique<DeepSeek>();
    case Format::kKimi: return std::make_unique<Kimi>();
    case Format::kHarmony: return std::make_unique<Harmony>();
    default: return nullptr;
  }
}

}  // namespace sluice::toolcall
