#include "server/reasoning_split.h"

#include <random>

#include <gtest/gtest.h>

using namespace sluice::server;

namespace {

SplitText whole(std::string_view text, bool opened) {
  ReasoningSplitter s(opened);
  SplitText a = s.push(text), b = s.flush();
  return {a.reasoning + b.reasoning, a.content + b.content};
}

// Feeds `text` in pieces cut at `cuts` (ascending byte offsets), concatenating what comes out, and
// checks that nothing is emitted into the content while the reasoning is still open.
SplitText in_pieces(std::string_view text, bool opened, const std::vector<std::size_t>& cuts) {
  ReasoningSplitter s(opened);
  SplitText all;
  std::size_t from = 0;
  auto take = [&](SplitText part) {
    if (!part.reasoning.empty()) EXPECT_TRUE(all.content.empty()) << "reasoning after content in: " << text;
    all.reasoning += part.reasoning;
    all.content += part.content;
  };
  for (std::size_t cut : cuts) {
    take(s.push(text.substr(from, cut - from)));
    from = cut;
  }
  take(s.push(text.substr(from)));
  take(s.flush());
  return all;
}

struct Case {
  const char* text;
  bool opened;
  const char* reasoning;
  const char* content;
};

const Case kCases[] = {
    {"<think>\nLet me see.\n</think>\n\nThe answer is 4.", false, "Let me see.\n", "The answer is 4."},
    {"  <think>a</think>b", false, "a", "b"},
    {"Just an answer, no <think> here.", false, "", "Just an answer, no <think> here."},
    {"\n  indented answer", false, "", "\n  indented answer"},
    {"<thinking is not the tag", false, "", "<thinking is not the tag"},
    {"<thin", false, "", "<thin"},                                 // ends while it could still open
    {"<think>never closed </thin", false, "never closed </thin", ""},  // missing closing tag: all reasoning
    {"prompt opened it</think>then content", true, "prompt opened it", "then content"},
    {"\nall reasoning, no close", true, "all reasoning, no close", ""},
    {"a</think>b<think>c</think>d", true, "a", "b<think>c</think>d"},  // one block; later tags are content
    {"x<</think>y", true, "x<", "y"},
    {"<think></think>", false, "", ""},
    {"日本<think>語</think>", true, "日本<think>語", ""},         // multi-byte text around a tag
};

}  // namespace

TEST(ReasoningSplitter, SplitsWholeAnswers) {
  for (const auto& c : kCases) {
    SplitText got = whole(c.text, c.opened);
    EXPECT_EQ(got.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(got.content, c.content) << c.text;
  }
}

TEST(ReasoningSplitter, TagsSplitAtEveryBytePositionGiveTheSameSplit) {
  for (const auto& c : kCases) {
    const std::string_view text(c.text);
    for (std::size_t cut = 0; cut <= text.size(); ++cut) {
      SplitText got = in_pieces(text, c.opened, {cut});
      EXPECT_EQ(got.reasoning, c.reasoning) << c.text << " cut at " << cut;
      EXPECT_EQ(got.content, c.content) << c.text << " cut at " << cut;
    }
    std::vector<std::size_t> every_byte;
    for (std::size_t i = 1; i < text.size(); ++i) every_byte.push_back(i);
    SplitText bytewise = in_pieces(text, c.opened, every_byte);
    EXPECT_EQ(bytewise.reasoning, c.reasoning) << c.text << " byte by byte";
    EXPECT_EQ(bytewise.content, c.content) << c.text << " byte by byte";
  }
}

TEST(ReasoningSplitter, RandomPiecesOfGeneratedAnswersMatchTheWholeSplit) {
  std::mt19937 rng(1234);
  const std::string alphabet[] = {"<", "/", "think", ">", "</think>", "<think>", " ", "\n", "a", "é", "t"};
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    for (int i = 0, n = static_cast<int>(rng() % 12); i < n; ++i) text += alphabet[rng() % std::size(alphabet)];
    const bool opened = rng() % 2;
    SplitText expected = whole(text, opened);
    std::vector<std::size_t> cuts;
    for (std::size_t i = 1; i < text.size(); ++i)
      if (rng() % 3 == 0) cuts.push_back(i);
    SplitText got = in_pieces(text, opened, cuts);
    EXPECT_EQ(got.reasoning, expected.reasoning) << text;
    EXPECT_EQ(got.content, expected.content) << text;
  }
}

TEST(ReasoningSplitter, PromptOpensThinkOnlyWhenItEndsInsideTheBlock) {
  EXPECT_TRUE(prompt_opens_think("<｜Assistant｜><think>\n"));
  EXPECT_TRUE(prompt_opens_think("<|im_start|>assistant\n<think>"));
  EXPECT_FALSE(prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n"));  // Qwen3, thinking off
  EXPECT_FALSE(prompt_opens_think("<|im_start|>user\nwhat is <think>?<|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_think("no tags"));
}
