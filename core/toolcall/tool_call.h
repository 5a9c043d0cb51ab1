#pragma once
// Tool calls in model output: the model writes a call in its family's own syntax (Hermes
// `<tool_call>{…}</tool_call>`, Mistral `[TOOL_CALLS]…`, gpt-oss harmony channels, …); this library
// finds those calls in the generated text and returns them in OpenAI's shape — the plain text around
// them as content, each call as a name and its arguments as a JSON string.
//
// One incremental parser serves both the whole answer and a stream: it is fed text as tokens arrive
// and hands back content as soon as that text cannot be the start of a call, and each call as its name
// first, then pieces of its arguments. Feeding the same text in any split gives the same result.
// Malformed calls degrade to content (a call is only recognised once its name has been read); a call
// cut off by the end of the output keeps the arguments it has (as OpenAI does at max_tokens).
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "toolcall/argument_types.h"

namespace sluice::toolcall {

// The syntax families. kNone: the template does not describe a format we parse; text stays text.
enum class Format {
  kNone,
  kHermes,    // <tool_call>{"name": …, "arguments": {…}}</tool_call> (Qwen2.5/3, Hermes, Granite 4, …)
  kQwenXml,   // <tool_call><function=NAME><parameter=K>V</parameter></function></tool_call> (Qwen3-Coder, Qwen3.5)
  kSeedXml,   // the same inside <seed:tool_call>…</seed:tool_call> (ByteDance Seed-OSS)
  kGlm,       // <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call> (GLM 4.5+)
  kLlama3,    // {"name": …, "parameters": {…}} opening the answer, or after <|python_tag|>
  kMistral,   // [TOOL_CALLS][{…}, …] and [TOOL_CALLS]NAME[ARGS]{…}
  kGranite,   // <|tool_call|>[{"name": …, "arguments": {…}}, …] (Granite 3.x)
  kApriel,    // <tool_calls>[{"name": …, "arguments": {…}}, …]</tool_calls> (Apriel 1.5/1.6)
  kNemotron,  // <TOOLCALL>[{"name": …, "arguments": {…}}, …]</TOOLCALL> (Nemotron Nano 2)
  kDeepSeek,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>…<｜tool▁sep｜>…<｜tool▁call▁end｜>…
  kKimi,      // <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:i<|tool_call_argument_begin|>{…}…
  kHarmony,   // gpt-oss: <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>
  kGemma4,    // <|tool_call>call:NAME{key:<|"|>text<|"|>,…}<tool_call|>
};

std::string_view format_name(Format format);

// The format a chat template teaches its model, recognised by the markers the template writes.
Format detect_format(std::string_view chat_template_source);

// Texts of special tokens the parser must see for this format. A server normally hides special
// tokens from the answer; these must reach the parser (it removes them from the content it returns).
std::vector<std::string> format_markers(Format format);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of the arguments object, as the model wrote it (or converted to JSON)
};

struct ParsedOutput {
  std::string content;
  std::vector<ToolCall> calls;
};

// One piece of a call in a stream: the first delta of a call carries its name, the rest argument text.
struct CallDelta {
  int index = 0;
  std::string name;       // non-empty on the first delta of a call only
  std::string arguments;  // a fragment; the fragments of one index concatenate to the arguments
};

struct StreamDelta {
  std::string content;
  std::vector<CallDelta> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

// Bounds on what the parser holds for untrusted model output.
struct ParserLimits {
  std::size_t max_header_bytes = 4096;          // a call's opening (markers and name) before its arguments
  std::size_t max_argument_bytes = 4u << 20;    // one call's arguments
  int max_calls = 256;                          // calls in one answer; later ones stay text
};

class Syntax;

class StreamParser {
 public:
  explicit StreamParser(Format format, ParserLimits limits = {}, ArgumentTypes types = {});
  StreamParser(StreamParser&&) noexcept;
  StreamParser& operator=(StreamParser&&) noexcept;
  ~StreamParser();

  StreamDelta push(std::string_view text);
  // The end of the output: whatever was held back is decided now.
  StreamDelta finish();

  int calls_started() const { return calls_; }

 private:
  enum class Mode { kContent, kHeader, kArgsJson, kArgsRaw, kTrailer };
  void run(bool at_end, StreamDelta& out);
  bool step_content(bool at_end, StreamDelta& out);
  bool step_header(bool at_end, StreamDelta& out);
  bool step_args_json(bool at_end, StreamDelta& out);
  bool step_args_raw(bool at_end, StreamDelta& out);
  bool step_trailer(bool at_end);
  void emit_content(std::string_view text, StreamDelta& out);
  void emit_arguments(std::string_view text, StreamDelta& out);

  std::unique_ptr<Syntax> syntax_;
  std::vector<std::string> triggers_;
  std::vector<std::string> anchored_;
  ParserLimits limits_;
  Mode mode_ = Mode::kContent;
  std::string buf_;                // text received and not yet decided
  bool saw_text_ = false;          // non-whitespace content has been emitted (ends anchored triggers)
  bool continuation_ = false;      // the header being read follows a call in the same block
  int calls_ = 0;
  std::size_t args_bytes_ = 0;     // of the current call
  ArgumentTypes types_;
  std::string call_name_;          // of the current call
  std::string end_marker_;         // kArgsRaw: where the arguments end
  std::string raw_args_;           // kArgsRaw: the arguments so far (converted at the end)
  int json_depth_ = 0;             // kArgsJson: the scanner's state
  bool json_in_string_ = false;
  bool json_escape_ = false;
  bool json_started_ = false;
};

// Parses a whole answer (the same parser, fed once).
ParsedOutput parse_tool_calls(Format format, std::string_view text, ParserLimits limits = {},
                              ArgumentTypes types = {});

// Adds a stream delta to an assembled answer (how a client reassembles the stream).
void accumulate(ParsedOutput& into, const StreamDelta& delta);

}  // namespace sluice::toolcall
