#pragma once
// What one format family tells the generic stream parser (stream_parser.cpp): which markers open a
// block of calls in plain text, how a call's opening reads (up to its name and the start of its
// arguments), and what closes it. Each decision is made on a prefix of the text and answers "need
// more" while more text could change it — that is what makes any split of the input parse alike.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "toolcall/argument_types.h"
#include "toolcall/tool_call.h"

namespace sluice::toolcall {

// How a call's arguments are written.
enum class ArgsForm {
  kJson,       // a JSON object, streamed as it is written
  kConverted,  // the family's own notation up to an end marker, turned into JSON once complete
};

struct HeaderStep {
  enum Kind {
    kNeedMore,   // the text so far could still go either way
    kNoCall,     // not a call: `consumed` bytes (the marker) are plain text after all
    kCall,       // a call: `consumed` bytes of opening read; arguments follow
    kSkip,       // framing to drop, not a call (harmony's non-tool message headers)
    kEndRegion,  // (continuation) the block of calls ends here; `consumed` bytes of closing dropped
  } kind = kNeedMore;
  std::size_t consumed = 0;
  std::string name;
  ArgsForm form = ArgsForm::kJson;
  std::string end_marker;  // kConverted: the text that ends the arguments
};

struct TrailerStep {
  bool need_more = false;
  std::size_t consumed = 0;  // closing text to drop
  bool more_calls = false;   // another call may follow in the same block (read with continuation)
};

class Syntax {
 public:
  virtual ~Syntax() = default;
  // Markers that open a block of calls anywhere in the text.
  virtual std::vector<std::string> triggers() const = 0;
  // Markers that open a call only at the very start of the answer (after whitespace): Llama 3's bare
  // JSON object "{", harmony's recipient " to=functions.…" right after the prompt's <|start|>assistant.
  virtual std::vector<std::string> anchored_triggers() const { return {}; }
  // `text` starts at a trigger (continuation false) or right after a call's closing (true).
  virtual HeaderStep header(std::string_view text, bool continuation, bool at_end) const = 0;
  // `text` starts right after the arguments.
  virtual TrailerStep trailer(std::string_view text, bool at_end) const = 0;
  // kConverted arguments of `function` → JSON object text (`types`: what its schema declares).
  virtual std::string convert(std::string_view raw, std::string_view /*function*/,
                              const ArgumentTypes& /*types*/) const {
    return std::string(raw);
  }
  // Special-token texts the format needs to see.
  virtual std::vector<std::string> markers() const { return triggers(); }
};

std::unique_ptr<Syntax> make_json_family_syntax(Format format);       // Hermes, Llama 3, Mistral, Granite
std::unique_ptr<Syntax> make_marker_family_syntax(Format format);     // DeepSeek, Kimi, harmony
std::unique_ptr<Syntax> make_converted_family_syntax(Format format);  // Qwen XML, GLM, Gemma 4

// A read position over a prefix of the output, for the headers and trailers above. Each reader
// answers kOk (and advances), kMore (the prefix ends inside what it reads) or kFail.
struct Cursor {
  enum Result { kOk, kMore, kFail };
  std::string_view text;
  bool at_end = false;
  std::size_t pos = 0;

  bool done() const { return pos >= text.size(); }
  std::string_view rest() const { return text.substr(pos); }
  void skip_space();
  Result literal(std::string_view expected);
  // Any one of the literals (the first that matches); kMore if one could still match.
  Result one_of(const std::vector<std::string_view>& options, std::size_t* which = nullptr);
  // A JSON string literal, unescaped into `out`.
  Result json_string(std::string& out);
  // Characters of `allowed` (at least one), ended by any other character.
  Result word(std::string_view allowed, std::string& out);
  // Text up to `delimiter` (delimiter consumed), at most `max_bytes`.
  Result until(std::string_view delimiter, std::string& out, std::size_t max_bytes);
  // One JSON value of any type, skipped.
  Result skip_json_value();
};

inline constexpr std::string_view kNameChars =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:";

// Step helpers: turn a cursor result into the header answer.
inline HeaderStep need_more() { return {}; }
inline HeaderStep no_call(std::size_t marker_bytes) {
  HeaderStep s;
  s.kind = HeaderStep::kNoCall;
  s.consumed = marker_bytes > 0 ? marker_bytes : 1;
  return s;
}
inline HeaderStep end_region(std::size_t consumed) {
  HeaderStep s;
  s.kind = HeaderStep::kEndRegion;
  s.consumed = consumed;
  return s;
}
inline HeaderStep call(std::size_t consumed, std::string name, ArgsForm form = ArgsForm::kJson,
                       std::string end_marker = {}) {
  HeaderStep s;
  s.kind = HeaderStep::kCall;
  s.consumed = consumed;
  s.name = std::move(name);
  s.form = form;
  s.end_marker = std::move(end_marker);
  return s;
}

// Whether the arguments start here (after optional whitespace): kOk leaves the cursor on the `{`.
Cursor::Result expect_object_start(Cursor& c);

}  // namespace sluice::toolcall
