// The generic incremental parser: plain text until a format's trigger, then the format's header,
// arguments (a JSON object scanned byte by byte, or converted notation up to an end marker) and
// trailer. Text is held back only while it could still be part of a call, and never more than the
// limits allow.
#include <algorithm>

#include "toolcall/syntax.h"
#include "toolcall/tool_call.h"

namespace sluice::toolcall {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Length of the longest suffix of `text` that is a proper prefix of some trigger: that much may be
// the start of a marker still arriving.
std::size_t partial_trigger_suffix(std::string_view text, const std::vector<std::string>& triggers) {
  std::size_t best = 0;
  for (const auto& t : triggers) {
    for (std::size_t n = std::min(text.size(), t.size() - 1); n > best; --n) {
      if (text.substr(text.size() - n) == std::string_view(t).substr(0, n)) {
        best = n;
        break;
      }
    }
  }
  return best;
}

std::unique_ptr<Syntax> make_syntax(Format format) {
  if (auto s = make_json_family_syntax(format)) return s;
  if (auto s = make_marker_family_syntax(format)) return s;
  return make_converted_family_syntax(format);
}

// Formats with nothing to parse: no triggers, text passes through.
class PlainText final : public Syntax {
 public:
  std::vector<std::string> triggers() const override { return {}; }
  HeaderStep header(std::string_view, bool, bool) const override { return no_call(1); }
  TrailerStep trailer(std::string_view, bool) const override { return {}; }
};

}  // namespace

StreamParser::StreamParser(Format format, ParserLimits limits, ArgumentTypes types)
    : syntax_(make_syntax(format)), limits_(limits), types_(std::move(types)) {
  if (!syntax_) syntax_ = std::make_unique<PlainText>();
  triggers_ = syntax_->triggers();
  anchored_ = syntax_->anchored_triggers();
}
StreamParser::StreamParser(StreamParser&&) noexcept = default;
StreamParser& StreamParser::operator=(StreamParser&&) noexcept = default;
StreamParser::~StreamParser() = default;

StreamDelta StreamParser::push(std::string_view text) {
  StreamDelta out;
  buf_.append(text);
  run(/*at_end=*/false, out);
  return out;
}

StreamDelta StreamParser::finish() {
  StreamDelta out;
  run(/*at_end=*/true, out);
  // Whatever a mode could not place is text (the steps leave nothing behind at the end but this guard).
  if (!buf_.empty()) {
    emit_content(buf_, out);
    buf_.clear();
  }
  mode_ = Mode::kContent;
  return out;
}

void StreamParser::emit_content(std::string_view text, StreamDelta& out) {
  if (text.empty()) return;
  if (!saw_text_ && std::any_of(text.begin(), text.end(), [](char c) { return !is_space(c); })) saw_text_ = true;
  out.content.append(text);
}

void StreamParser::emit_arguments(std::string_view text, StreamDelta& out) {
  if (text.empty()) return;
  if (!out.calls.empty() && out.calls.back().index == calls_ - 1) {
    out.calls.back().arguments.append(text);
  } else {
    out.calls.push_back(CallDelta{calls_ - 1, {}, std::string(text)});
  }
}

void StreamParser::run(bool at_end, StreamDelta& out) {
  for (;;) {
    bool progressed = false;
    switch (mode_) {
      case Mode::kContent: progressed = step_content(at_end, out); break;
      case Mode::kHeader: progressed = step_header(at_end, out); break;
      case Mode::kArgsJson: progressed = step_args_json(at_end, out); break;
      case Mode::kArgsRaw: progressed = step_args_raw(at_end, out); break;
      case Mode::kTrailer: progressed = step_trailer(at_end); break;
    }
    if (!progressed) return;
  }
}

bool StreamParser::step_content(bool at_end, StreamDelta& out) {
  if (buf_.empty()) return false;
  const auto& triggers = triggers_;
  // A call that opens the answer (Llama 3's bare JSON, harmony's recipient after the prompt).
  if (!saw_text_ && !anchored_.empty() && calls_ < limits_.max_calls) {
    std::size_t first = 0;
    while (first < buf_.size() && is_space(buf_[first])) ++first;
    if (first == buf_.size() && !at_end) return false;  // only whitespace so far: wait
    std::string_view rest = std::string_view(buf_).substr(first);
    for (const auto& t : anchored_) {
      if (rest.starts_with(t)) {
        buf_.erase(0, first);  // whitespace before a call is not content
        mode_ = Mode::kHeader;
        continuation_ = false;
        return true;
      }
      if (!at_end && rest.size() < t.size() && std::string_view(t).starts_with(rest)) return false;
    }
  }
  std::size_t found = std::string::npos;
  if (calls_ < limits_.max_calls) {
    for (const auto& t : triggers) found = std::min(found, buf_.find(t));
  }
  if (found != std::string::npos) {
    emit_content(std::string_view(buf_).substr(0, found), out);
    buf_.erase(0, found);
    mode_ = Mode::kHeader;
    continuation_ = false;
    return true;
  }
  std::size_t hold = (at_end || calls_ >= limits_.max_calls) ? 0 : partial_trigger_suffix(buf_, triggers);
  if (hold == buf_.size()) return false;
  emit_content(std::string_view(buf_).substr(0, buf_.size() - hold), out);
  buf_.erase(0, buf_.size() - hold);
  return false;
}

// A call's opening (and the trailer after it) may not pass max_header_bytes, decided the same way
// whatever the pieces the text came in (found by tests/fuzz/toolcall_fuzz.cpp: fed whole, a long
// opening was a call, or was judged no call further on than a stream could hold; fed in pieces it was
// given up): the syntax judges it on a window of max_header_bytes plus the look-ahead it may need to
// see where it ends — the same bytes whole or streamed — and a complete one longer than the bound is
// no call.
constexpr std::size_t kOpeningLookahead = 64;

bool StreamParser::step_header(bool at_end, StreamDelta& out) {
  const std::size_t window = limits_.max_header_bytes + kOpeningLookahead;
  const bool cut = buf_.size() > window;
  HeaderStep step = syntax_->header(cut ? std::string_view(buf_).substr(0, window) : std::string_view(buf_), continuation_,
                                    at_end && !cut);
  if (step.kind == HeaderStep::kNeedMore) {
    if (at_end || cut) {
      step = continuation_ ? end_region(0) : no_call(1);
    } else {
      return false;
    }
  }
  if (step.kind == HeaderStep::kCall && (calls_ >= limits_.max_calls || step.consumed > limits_.max_header_bytes))
    step = continuation_ ? end_region(0) : no_call(1);
  std::size_t n = std::min(step.consumed, buf_.size());
  switch (step.kind) {
    case HeaderStep::kNeedMore: return false;
    case HeaderStep::kNoCall:
      if (continuation_) {  // not another call after all: the block is over, the text is content
        mode_ = Mode::kContent;
        return true;
      }
      emit_content(std::string_view(buf_).substr(0, n), out);
      buf_.erase(0, n);
      mode_ = Mode::kContent;
      return true;
    case HeaderStep::kSkip:
    case HeaderStep::kEndRegion:
      buf_.erase(0, n);
      mode_ = Mode::kContent;
      return true;
    case HeaderStep::kCall:
      buf_.erase(0, n);
      ++calls_;
      call_name_ = step.name;
      out.calls.push_back(CallDelta{calls_ - 1, std::move(step.name), {}});
      args_bytes_ = 0;
      if (step.form == ArgsForm::kJson) {
        mode_ = Mode::kArgsJson;
        json_depth_ = 0;
        json_in_string_ = json_escape_ = json_started_ = false;
      } else {
        mode_ = Mode::kArgsRaw;
        end_marker_ = std::move(step.end_marker);
        raw_args_.clear();
      }
      return true;
  }
  return false;
}

bool StreamParser::step_args_json(bool at_end, StreamDelta& out) {
  std::size_t i = 0;
  bool complete = false;
  if (!json_started_) {  // the header left us on the '{' (whitespace allowed before it)
    while (i < buf_.size() && is_space(buf_[i])) ++i;
    buf_.erase(0, i);
    i = 0;
    if (buf_.empty()) {
      if (!at_end) return false;
      mode_ = Mode::kContent;
      return true;
    }
    json_started_ = true;
  }
  for (; i < buf_.size() && !complete; ++i) {
    char c = buf_[i];
    if (json_in_string_) {
      if (json_escape_) json_escape_ = false;
      else if (c == '\\') json_escape_ = true;
      else if (c == '"') json_in_string_ = false;
    } else if (c == '"') {
      json_in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++json_depth_;
    } else if (c == '}' || c == ']') {
      if (--json_depth_ <= 0) complete = true;
    }
  }
  std::size_t take = std::min(i, limits_.max_argument_bytes - args_bytes_);
  emit_arguments(std::string_view(buf_).substr(0, take), out);
  args_bytes_ += take;
  buf_.erase(0, take);
  if (complete && take == i) {
    mode_ = Mode::kTrailer;
    return true;
  }
  if (args_bytes_ >= limits_.max_argument_bytes) {  // cut: the rest of this call is text
    mode_ = Mode::kContent;
    return true;
  }
  if (at_end) mode_ = Mode::kContent;  // cut off by the end of the output: the call keeps what it has
  return false;
}

bool StreamParser::step_args_raw(bool at_end, StreamDelta& out) {
  std::size_t found = buf_.find(end_marker_);
  bool complete = found != std::string::npos;
  std::size_t take = complete ? found : buf_.size();
  if (!complete && !at_end) take -= partial_trigger_suffix(buf_, {end_marker_});
  take = std::min(take, limits_.max_argument_bytes - raw_args_.size());
  raw_args_.append(buf_, 0, take);
  buf_.erase(0, take);
  bool cut = raw_args_.size() >= limits_.max_argument_bytes;
  if (!complete && !at_end && !cut) return false;
  emit_arguments(syntax_->convert(raw_args_, call_name_, types_), out);
  raw_args_.clear();
  mode_ = (complete && !cut) ? Mode::kTrailer : Mode::kContent;
  return complete || cut;
}

bool StreamParser::step_trailer(bool at_end) {
  const std::size_t window = limits_.max_header_bytes + kOpeningLookahead;
  const bool cut = buf_.size() > window;
  TrailerStep step = syntax_->trailer(cut ? std::string_view(buf_).substr(0, window) : std::string_view(buf_), at_end && !cut);
  if (step.need_more && !at_end && !cut) return false;
  if (step.need_more || step.consumed > limits_.max_header_bytes) step = TrailerStep{};
  buf_.erase(0, std::min(step.consumed, buf_.size()));
  if (step.more_calls) {
    mode_ = Mode::kHeader;
    continuation_ = true;
  } else {
    mode_ = Mode::kContent;
  }
  return true;
}

ParsedOutput parse_tool_calls(Format format, std::string_view text, ParserLimits limits, ArgumentTypes types) {
  StreamParser parser(format, limits, std::move(types));
  ParsedOutput out;
  accumulate(out, parser.push(text));
  accumulate(out, parser.finish());
  return out;
}

void accumulate(ParsedOutput& into, const StreamDelta& delta) {
  into.content += delta.content;
  for (const auto& d : delta.calls) {
    if (d.index >= static_cast<int>(into.calls.size())) into.calls.resize(static_cast<std::size_t>(d.index) + 1);
    auto& call = into.calls[static_cast<std::size_t>(d.index)];
    if (!d.name.empty()) call.name = d.name;
    call.arguments += d.arguments;
  }
}

std::vector<std::string> format_markers(Format format) {
  auto syntax = make_syntax(format);
  return syntax ? syntax->markers() : std::vector<std::string>{};
}

}  // namespace sluice::toolcall
