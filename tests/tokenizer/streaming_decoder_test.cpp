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


// A stream of bytes that never form a character (a model pushed onto one byte token, by logit_bias
// say) is emitted as it becomes final, one U+FFFD per byte but the last, which could still start a
// character; the window is cut back meanwhile, so each push decodes a few ids, not the whole stream.
TEST(StreamingDecoder, InvalidBytesAreEmittedAsTheyBecomeFinal) {
  struct Case {
    const char* tokenizer;
    const char* byte_token;  // a token for byte 0xFF, which never occurs in UTF-8
  };
  const Case cases[] = {{"models/tiny-code-qwen2/tokenizer.json", "\xC3\xBF"},  // byte-level: U+00FF stands for 0xFF
                        {"golden/tokenizers/sp-legacy/tokenizer.json", "<0xFF>"}};
  for (const auto& c : cases) {
    SLUICE_REQUIRE_REFERENCE(c.tokenizer);
    auto tok = Tokenizer::load(test::reference_path(c.tokenizer));
    ASSERT_TRUE(tok.ok()) << tok.message();
    auto id = tok->token_to_id(c.byte_token);
    ASSERT_TRUE(id.has_value()) << c.tokenizer;
    const std::vector<int32_t> ids(300, *id);
    const std::string expected = tok->decode(ids);
    StreamingDecoder stream(*tok);
    std::string streamed;
    for (int32_t i : ids) streamed += stream.push(i);
    const std::string r(tokenizer::kReplacementChar);
    if (std::string(c.byte_token) == "<0xFF>") {
      // SentencePiece byte fallback decodes a run of byte tokens as one unit: nothing is final
      // until a different token closes the run.
      EXPECT_EQ(streamed, "") << c.tokenizer;
    } else {
      EXPECT_EQ(streamed.size(), 299 * r.size()) << c.tokenizer;
    }
    streamed += stream.flush();
    EXPECT_EQ(streamed, expected) << c.tokenizer;
  }
}

// Mixtures of characters, characters cut short, lone continuation bytes, byte tokens and special
// tokens, pushed one id at a time, concatenate to decode() whatever cuts the window takes.
TEST(StreamingDecoder, LongMixedStreamsConcatenateToDecode) {
  for (const auto& source : kSources) {
    SLUICE_REQUIRE_REFERENCE(source.tokenizer);
    auto tok = Tokenizer::load(test::reference_path(source.tokenizer));
    ASSERT_TRUE(tok.ok()) << tok.message();
    const std::string pieces[] = {"a", " the", "\xE2\x96\x81", "\xF0\x9F\x98\x80", "\xE6\x97\xA5", "\n", "\xC3", "\xA9", "\xFF", "\x80", "\xF0\x9F"};
    std::vector<int32_t> palette;
    for (const auto& piece : pieces)
      for (int32_t id : tok->encode(piece, false)) palette.push_back(id);
    for (const char* name : {"<0xE2>", "<0x96>", "<0x81>", "<0xFF>", "<0xC3>", "<0xA9>", "\xC3\xBF", "\xC3\xA2", "\xC2\x96"})
      if (auto id = tok->token_to_id(name)) palette.push_back(*id);
    for (std::size_t id = 0; id < tok->vocab_size(); ++id)
      if (tok->is_special(static_cast<int32_t>(id))) {
        palette.push_back(static_cast<int32_t>(id));
        break;
      }
    for (bool skip : {false, true})
      for (uint32_t seed = 1; seed <= 20; ++seed) {
        std::vector<int32_t> ids;
        uint32_t state = seed * 2654435761u;
        for (int i = 0; i < 400; ++i) {
          state = state * 1664525u + 1013904223u;
          // Runs of one id now and then, so invalid stretches outlast the window's cut-back length.
          const int32_t id = palette[(state >> 8) % palette.size()];
          const int repeat = (state >> 28) == 0 ? 20 : 1;
          for (int r = 0; r < repeat; ++r) ids.push_back(id);
        }
        StreamingDecoder stream(*tok, skip);
        std::string streamed;
        for (int32_t id : ids) {
          std::string chunk = stream.push(id);
          ASSERT_TRUE(tokenizer::is_valid_utf8(chunk)) << source.tokenizer << " seed " << seed;
          streamed += chunk;
        }
        streamed += stream.flush();
        EXPECT_EQ(streamed, tok->decode(ids, skip)) << source.tokenizer << " seed " << seed << " skip " << skip;
      }
  }
}

}  // namespace
}  // namespace sluice
