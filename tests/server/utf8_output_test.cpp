#include "server/utf8_output.h"

#include <gtest/gtest.h>

#include "util/json.h"

using sluice::server::make_valid_utf8;

namespace {

std::string repaired(std::string s) {
  make_valid_utf8(s);
  return s;
}

const std::string kFffd = "\xEF\xBF\xBD";

}  // namespace

TEST(MakeValidUtf8, ValidTextIsUnchanged) {
  for (std::string s : {std::string(""), std::string("plain ascii, long enough to take the word-at-a-time path"),
                        std::string("h\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87")}) {
    EXPECT_EQ(repaired(s), s);
  }
}

// The tokenizer decoder's rule (from_utf8_lossy): each maximal invalid subsequence is one U+FFFD.
TEST(MakeValidUtf8, EachMaximalInvalidSubsequenceBecomesOneReplacement) {
  EXPECT_EQ(repaired("a\xFF" "b"), "a" + kFffd + "b");
  EXPECT_EQ(repaired("\xE2\x82"), kFffd);                        // a truncated 3-byte sequence: one
  EXPECT_EQ(repaired("\xE2\x82" "x"), kFffd + "x");
  EXPECT_EQ(repaired("\x80\x80"), kFffd + kFffd);                // stray continuation bytes: one each
  EXPECT_EQ(repaired("\xED\xA0\x80"), kFffd + kFffd + kFffd);    // a surrogate is not a prefix of anything valid
  EXPECT_EQ(repaired("\xC0\xAF"), kFffd + kFffd);                // overlong
  EXPECT_EQ(repaired("12345678\xF0\x9F\x98"), "12345678" + kFffd);  // invalid after an ASCII word
}

// Repairing a whole JSON text keeps its structure: quotes and escapes are ASCII and never swallowed.
TEST(MakeValidUtf8, JsonWithInvalidStringContentStaysWellFormed) {
  std::string json = std::string("{\"message\":\"stop at \xE2\x82\",\"echo\":\"\xFF\\\"x\"}");
  make_valid_utf8(json);
  auto doc = sluice::json::parse(json, "repaired");
  ASSERT_TRUE(doc) << doc.message();
  EXPECT_EQ(std::string((*doc)["message"].GetString()), "stop at " + kFffd);
  EXPECT_EQ(std::string((*doc)["echo"].GetString()), kFffd + "\"x");
}
