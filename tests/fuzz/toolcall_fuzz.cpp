// Fuzzes the tool-call parser (core/toolcall) on model output, which a user's prompt can steer: the
// first byte picks the format, the second the size of the pieces a stream feeds, the rest is the text.
// Small limits put the bounds on every path. Checks: nothing crashes or grows past its limits; a call
// has a name; the stream, reassembled as a client does, is the whole answer parsed at once.
#include <algorithm>
#include <string>

#include "fuzz_support.h"
#include "toolcall/tool_call.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice::toolcall;
  if (size < 2) return 0;
  constexpr int kFormats = static_cast<int>(Format::kGemma4) + 1;
  const Format format = static_cast<Format>(data[0] % kFormats);
  const std::size_t piece = 1 + data[1] % 16;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  ParserLimits limits;
  limits.max_header_bytes = 128;
  limits.max_argument_bytes = 256;
  limits.max_calls = 4;

  const ParsedOutput whole = parse_tool_calls(format, text, limits);
  FUZZ_CHECK(static_cast<int>(whole.calls.size()) <= limits.max_calls, "%zu calls", whole.calls.size());
  for (const auto& c : whole.calls) {
    FUZZ_CHECK(!c.name.empty(), "a call without a name");
    // Converted notations (XML, GLM, Gemma 4) write what they read as JSON: a control byte becomes a
    // six-byte \u escape, and quotes and braces come around it.
    FUZZ_CHECK(c.arguments.size() <= 6 * limits.max_argument_bytes + 64, "arguments of %zu bytes", c.arguments.size());
  }

  StreamParser parser(format, limits);
  ParsedOutput streamed;
  for (std::size_t at = 0; at < text.size(); at += piece) accumulate(streamed, parser.push(text.substr(at, piece)));
  accumulate(streamed, parser.finish());
  FUZZ_CHECK(streamed.content == whole.content, "streamed content differs from the whole answer's");
  FUZZ_CHECK(streamed.calls.size() == whole.calls.size(), "streamed %zu calls, whole %zu", streamed.calls.size(),
             whole.calls.size());
  for (std::size_t i = 0; i < whole.calls.size(); ++i) {
    FUZZ_CHECK(streamed.calls[i].name == whole.calls[i].name, "call %zu's name differs", i);
    FUZZ_CHECK(streamed.calls[i].arguments == whole.calls[i].arguments, "call %zu's arguments differ", i);
  }
  return 0;
}
