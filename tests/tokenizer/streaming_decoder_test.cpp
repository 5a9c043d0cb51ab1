// StreamingDecoder: pushing the golden ids one at a time yields exactly decode(ids), and no chunk
// ever carries part of a character (emoji, ZWJ sequences and CJK span several tokens).
#include <gtest/gtest.h>

#include "golden.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace sluice {
namespace {

struct Source {
  const char* tokenizer;
  const char* golden;
};

const Source kSources[] = {
    {"models/tiny-code-qwen2/tokenizer.json", "golden/tokenizer_golden.json"},
    {"golden/tokenizers/sp-legacy/tokenizer.json", "golden/tokenizers/sp-legacy/tokenizer_golden.json"},
    {"golden/tokenizers/sp-metaspace/tokenizer.json", "golden/tokenizers/sp-metaspace/tokenizer_golden.json"},
};

void expect_streaming_equals_decode(bool skip_special_tokens) {
  for (const auto& source : kSources) {
    if (!std::filesystem::exists(test::reference_path(source.golden))) GTEST_SKIP() << "reference data missing: " << source.golden;
    auto tok = Tokenizer::load(test::reference_path(source.tokenizer));
    ASSERT_TRUE(tok.ok()) << tok.message();
    for (const auto& c : test::load_tokenizer_cases(source.golden)) {
      StreamingDecoder stream(*tok, skip_special_tokens);
      std::string streamed;
      for (int32_t id : c.ids) {
        std::string chunk = stream.push(id);
        EXPECT_TRUE(tokenizer::is_valid_utf8(chunk)) << source.tokenizer << " text: " << test::label(c.text);
        EXPECT_EQ(chunk.find(tokenizer::kReplacementChar), std::string::npos) << "half a character emitted for " << test::label(c.text);
        streamed += chunk;
      }
      streamed += stream.flush();
      EXPECT_EQ(streamed, tok->decode(c.ids, skip_special_tokens)) << source.tokenizer << " text: " << test::label(c.text);
    }
  }
}

TEST(StreamingDecoder, PushesConcatenateToDecodeOfGoldenIds) { expect_streaming_equals_decode(false); }

TEST(StreamingDecoder, SkippingSpecialsConcatenatesToDecodeSkippingSpecials) { expect_streaming_equals_decode(true); }

// A character cut between tokens comes out whole only once its last byte arrives; an incomplete one
// left at the end is flushed as U+FFFD, the way decode() renders it.
TEST(StreamingDecoder, IncompleteCharacterIsHeldThenFlushedAsReplacement) {
  SLUICE_REQUIRE_REFERENCE("golden/tokenizer_golden.json");
  auto tok = Tokenizer::load(test::reference_path("models/tiny-code-qwen2/tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  for (const auto& c : test::load_tokenizer_cases("golden/tokenizer_golden.json")) {
    if (c.ids.size() < 2) continue;
    std::vector<int32_t> prefix(c.ids.begin(), c.ids.end() - 1);
    StreamingDecoder stream(*tok);
    std::string streamed;
    for (int32_t id : prefix) streamed += stream.push(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, tok->decode(prefix)) << "text: " << test::label(c.text);
  }
}

TEST(StreamingDecoder, IsReusableAfterFlush) {
  SLUICE_REQUIRE_REFERENCE("golden/tokenizers/sp-legacy/tokenizer_golden.json");
  auto tok = Tokenizer::load(test::reference_path("golden/tokenizers/sp-legacy/tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  StreamingDecoder stream(*tok);
  for (const auto& c : test::load_tokenizer_cases("golden/tokenizers/sp-legacy/tokenizer_golden.json")) {
    std::string streamed;
    for (int32_t id : c.ids) streamed += stream.push(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, c.decoded);
  }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Found by the fuzz harness (tests/fuzz/tokenizer_fuzz.cpp): unknown ids between byte tokens are
// dropped by decode(), which joins the byte runs on either side; every chunk must stay valid UTF-8
// and the chunks must still add up to decode().
TEST(StreamingDecoder, UnknownIdsInsideAByteRunKeepChunksValid) {
  SLUICE_REQUIRE_REFERENCE("golden/tokenizers/sp-legacy/tokenizer.json");
  auto tok = Tokenizer::load(test::reference_path("golden/tokenizers/sp-legacy/tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  std::vector<int32_t> ids = {403, 3369, 458, 2567, 64, -8, -8};
  ids.insert(ids.end(), 16, 193);  // <0xBC>, a continuation byte
  ids.push_back(545);
  StreamingDecoder stream(*tok);
  std::string streamed;
  for (int32_t id : ids) {
    std::string chunk = stream.push(id);
    EXPECT_TRUE(tokenizer::is_valid_utf8(chunk)) << "after id " << id << ": " << test::label(chunk);
    streamed += chunk;
  }
  streamed += stream.flush();
  EXPECT_EQ(streamed, tok->decode(ids));
}

}  // namespace
}  // namespace sluice
