// What the stream parser holds back, and its bounds on untrusted output.
#include "fixture_check.h"

namespace sluice::toolcall::testing {
namespace {

TEST(StreamParser, ContentFlowsUntilItCouldBeAMarker) {
  StreamParser p(Format::kHermes);
  EXPECT_EQ(p.push("Hello wor").content, "Hello wor");
  EXPECT_EQ(p.push("ld <tool").content, "ld ");  // "<tool" may open a call: held
  EXPECT_EQ(p.push("box>").content, "<toolbox>");
  EXPECT_EQ(p.finish().content, "");
}

TEST(StreamParser, CallNameComesFirstThenArgumentPieces) {
  StreamParser p(Format::kHermes);
  StreamDelta a = p.push("<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": ");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "f");
  EXPECT_EQ(a.calls[0].arguments, "{\"x\": ");
  StreamDelta b = p.push("12}}</tool_call>");
  ASSERT_EQ(b.calls.size(), 1u);
  EXPECT_TRUE(b.calls[0].name.empty());
  EXPECT_EQ(b.calls[0].arguments, "12}");
  EXPECT_TRUE(p.finish().empty());
}

TEST(StreamParser, HeldTextIsBounded) {
  ParserLimits limits;
  limits.max_header_bytes = 64;
  StreamParser p(Format::kHermes, limits);
  std::string out;
  out += p.push("<tool_call>{\"name\": \"").content;
  std::string long_name(1000, 'a');
  for (char c : long_name) out += p.push(std::string_view(&c, 1)).content;
  // Past the header bound the marker gives up being a call: the text has come out as content.
  EXPECT_GE(out.size(), 900u);
  out += p.finish().content;
  EXPECT_EQ(out, "<tool_call>{\"name\": \"" + long_name);
}

// The opening's bound is decided the same way whole and in pieces (the fuzzer's find: harmony's
// 75-byte opening under a 64-byte bound was a call whole and content in pieces). Under the bound it is
// a call either way; over it, content either way.
TEST(StreamParser, TheOpeningsBoundGivesOneAnswerWholeAndInPieces) {
  const std::string text =
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
  for (std::size_t bound : {64u, 80u}) {
    ParserLimits limits;
    limits.max_header_bytes = bound;
    const ParsedOutput whole = parse_tool_calls(Format::kHarmony, text, limits);
    EXPECT_EQ(whole.calls.size(), bound < 75 ? 0u : 1u) << bound;
    for (std::size_t piece : {1u, 3u, 7u}) {
      StreamParser p(Format::kHarmony, limits);
      ParsedOutput streamed;
      for (std::size_t at = 0; at < text.size(); at += piece) accumulate(streamed, p.push(std::string_view(text).substr(at, piece)));
      accumulate(streamed, p.finish());
      EXPECT_EQ(streamed.content, whole.content) << bound << " " << piece;
      EXPECT_EQ(streamed.calls.size(), whole.calls.size()) << bound << " " << piece;
    }
  }
}

TEST(StreamParser, ArgumentsAreCutAtTheirBound) {
  ParserLimits limits;
  limits.max_argument_bytes = 32;
  ParsedOutput got = parse_tool_calls(
      Format::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": \"" + std::string(100, 'z') + "\"}}</tool_call>",
      limits);
  ASSERT_EQ(got.calls.size(), 1u);
  EXPECT_EQ(got.calls[0].arguments.size(), 32u);
}

TEST(StreamParser, CallsBeyondTheLimitStayText) {
  ParserLimits limits;
  limits.max_calls = 1;
  ParsedOutput got = parse_tool_calls(
      Format::kHermes,
      "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>",
      limits);
  ASSERT_EQ(got.calls.size(), 1u);
  EXPECT_EQ(got.content, "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>");
}

// Random bytes and random cuts of real calls never crash, and any split parses as the whole does.
TEST(StreamParser, GarbageAndCutsAreSafe) {
  const std::string samples[] = {
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]}}</tool_call>tail",
      "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": {\"b\": 2}}]",
      "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"q\": 1}<|call|>",
      "<|tool_call>call:f{a:<|\"|>x<|\"|>}<tool_call|>",
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
  };
  const Format formats[] = {Format::kHermes, Format::kMistral, Format::kHarmony, Format::kGemma4, Format::kDeepSeek,
                            Format::kKimi, Format::kLlama3, Format::kGranite, Format::kQwenXml, Format::kGlm,
                            Format::kApriel, Format::kNemotron, Format::kSeedXml};
  uint32_t seed = 12345;
  auto rnd = [&seed] { return seed = seed * 1664525u + 1013904223u; };
  for (Format f : formats) {
    for (const auto& s : samples) {
      for (std::size_t cut = 0; cut <= s.size(); cut += 3) parse_every_way(f, std::string_view(s).substr(0, cut));
      std::string noisy = s;
      for (int i = 0; i < 8; ++i) noisy[rnd() % noisy.size()] = static_cast<char>(rnd() % 128);
      parse_every_way(f, noisy);
    }
  }
}

}  // namespace
}  // namespace sluice::toolcall::testing
