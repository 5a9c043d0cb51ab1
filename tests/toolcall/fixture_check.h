#pragma once
// Parses one output whole, byte by byte and in token-sized pieces, and checks the three agree and
// that the stream is well formed (each call's first delta names it; indexes count up from 0).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "toolcall/tool_call.h"

namespace sluice::toolcall::testing {

inline ParsedOutput parse_in_pieces(Format format, std::string_view text, std::size_t piece) {
  StreamParser parser(format);
  ParsedOutput out;
  int next_index = 0;
  auto take = [&](const StreamDelta& d) {
    for (const auto& c : d.calls) {
      if (c.index == next_index) {
        EXPECT_FALSE(c.name.empty()) << "call " << c.index << " first delta has no name";
        ++next_index;
      } else {
        EXPECT_LT(c.index, next_index) << "call index skipped";
        EXPECT_TRUE(c.name.empty()) << "a later delta of call " << c.index << " repeats the name";
      }
    }
    accumulate(out, d);
  };
  for (std::size_t i = 0; i < text.size(); i += piece) take(parser.push(text.substr(i, piece)));
  take(parser.finish());
  return out;
}

inline void expect_same(const ParsedOutput& a, const ParsedOutput& b, const std::string& how) {
  EXPECT_EQ(a.content, b.content) << how;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << how;
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << how << " call " << i;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << how << " call " << i;
  }
}

// The result whole; asserts every split gives the same.
inline ParsedOutput parse_every_way(Format format, std::string_view text) {
  ParsedOutput whole = parse_tool_calls(format, text);
  for (std::size_t piece : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{5}, std::size_t{8}})
    expect_same(whole, parse_in_pieces(format, text, piece), "pieces of " + std::to_string(piece));
  return whole;
}

struct Expected {
  std::string content;
  std::vector<ToolCall> calls;
};

inline void expect_parse(Format format, std::string_view text, const Expected& expected) {
  SCOPED_TRACE(std::string(format_name(format)) + ": " + std::string(text));
  ParsedOutput got = parse_every_way(format, text);
  expect_same(got, ParsedOutput{expected.content, expected.calls}, "expected");
}

}  // namespace sluice::toolcall::testing
