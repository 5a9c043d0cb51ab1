#include "server/stop_matcher.h"

#include <gtest/gtest.h>


using sluice::server::StopMatcher;

namespace {

// Feeds pieces one by one; returns everything emitted (including the final flush).
std::string run(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += m.push(p);
  return out + m.flush();
}

}  // namespace

TEST(StopMatcher, PassesTextThroughWithoutStops) {
  StopMatcher m({});
  EXPECT_EQ(m.push("hello "), "hello ");
  EXPECT_EQ(m.push("world"), "world");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, StopInsideOnePieceCutsBeforeIt) {
  StopMatcher m({"\n\n"});
  EXPECT_EQ(m.push("def f():\n\nx"), "def f():");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, StopSplitAcrossTokensIsFoundAndNeverEmitted) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("abc E"), "abc ");  // "E" might start END: held back
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("Dtail"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, HeldBackTextIsReleasedWhenItIsNotAStop) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("xE"), "x");
  EXPECT_EQ(m.push("Nx"), "ENx");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("EN"), "");
  EXPECT_EQ(m.flush(), "EN");  // generation ended: the held-back text is real output
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo"});
  EXPECT_EQ(run(m, {"hel", "lo world"}), "hel");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, OverlappingPrefixesHoldTheLongestCandidate) {
  StopMatcher m({"abab", "b!"});
  EXPECT_EQ(m.push("xaba"), "x");    // "aba" may become "abab"
  EXPECT_EQ(m.push("b"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, OneCharacterPerPieceStillMatches) {
  StopMatcher m({"<|im_end|>"});
  std::string text = "ok<|im_end|>junk";
  std::string out;
  for (char c : text) out += m.push(std::string(1, c));
  EXPECT_EQ(out, "ok");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, MultibyteTextIsNeverSplit) {
  StopMatcher m({"é!"});
  // "café" then "?" : é (2 bytes) is held as a possible stop start, then released whole.
  EXPECT_EQ(m.push("caf\xC3\xA9"), "caf");
  EXPECT_EQ(m.push("?"), "\xC3\xA9?");
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) {
  StopMatcher m({"", "x"});
  EXPECT_EQ(m.push("abc"), "abc");
}

// Stop strings come from requests: the work per pushed byte must not grow with their length. A 1 MB
// stop string fed its own prefix one byte at a time took time quadratic in the prefix (minutes) when
// each push re-compared the held-back text against every prefix; it is linear now.
TEST(StopMatcher, LongStopStringFedByteByByteStaysLinear) {
  const std::size_t n = 1 << 20;
  std::string stop(n - 1, 'a');
  stop += 'b';
  StopMatcher m({stop});
  // No clock (speed belongs to benchmarks): the quadratic matcher took hours here, past the test's timeout.
  std::string out;
  for (std::size_t i = 0; i + 1 < n; ++i) out += m.push("a");  // all of it may still become the stop
  EXPECT_EQ(out, "");
  EXPECT_EQ(m.push("c"), std::string(n - 1, 'a') + "c");  // now it cannot: everything is released
  out.clear();
  for (std::size_t i = 0; i + 1 < n; ++i) out += m.push("a");
  EXPECT_EQ(out, "");
  EXPECT_EQ(m.push("b"), "");
  EXPECT_TRUE(m.stopped());
}

// Knuth-Morris-Pratt fallbacks: after a partial match fails, a shorter prefix of the stop string that the
// text still ends with must be kept, or a stop string overlapping itself is missed.
TEST(StopMatcher, SelfOverlappingStopIsFoundAfterAPartialMatch) {
  StopMatcher m({"aab"});
  EXPECT_EQ(m.push("xaa"), "x");
  EXPECT_EQ(m.push("a"), "a");  // "aaa": the last "aa" may still start the stop
  EXPECT_EQ(m.push("b!"), "");
  EXPECT_TRUE(m.stopped());

  StopMatcher abc({"abcabd"});
  EXPECT_EQ(run(abc, {"zabcab", "cabd tail"}), "zabc");
}
