// SentencePiece-style BPE files (Llama-2/Mistral "legacy" normalizer form and the Metaspace
// pre-tokenizer form, both with byte fallback) against HF tokenizers' ids, tokens and decoded text.
#include <gtest/gtest.h>

#include "golden.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

class SentencePieceGolden : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return "golden/tokenizers/" + GetParam() + "/"; }
};

TEST_P(SentencePieceGolden, EncodeMatchesHfIdsAndTokens) {
  SLUICE_REQUIRE_REFERENCE(dir() + "tokenizer_golden.json");
  auto tok = Tokenizer::load(test::reference_path(dir() + "tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  auto cases = test::load_tokenizer_cases(dir() + "tokenizer_golden.json");
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    auto ids = tok->encode(c.text);
    EXPECT_EQ(ids, c.ids) << "text: " << test::label(c.text);
    std::vector<std::string> tokens;
    for (int32_t id : c.ids) tokens.push_back(tok->id_to_token(id));
    EXPECT_EQ(tokens, c.tokens) << "text: " << test::label(c.text);
  }
}

TEST_P(SentencePieceGolden, DecodeKeepingSpecialsMatchesHfText) {
  SLUICE_REQUIRE_REFERENCE(dir() + "tokenizer_golden.json");
  auto tok = Tokenizer::load(test::reference_path(dir() + "tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  for (const auto& c : test::load_tokenizer_cases(dir() + "tokenizer_golden.json"))
    EXPECT_EQ(tok->decode(c.ids), c.decoded) << "text: " << test::label(c.text);
}

TEST_P(SentencePieceGolden, TokenToIdInvertsIdToToken) {
  SLUICE_REQUIRE_REFERENCE(dir() + "tokenizer_golden.json");
  auto tok = Tokenizer::load(test::reference_path(dir() + "tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  for (const auto& c : test::load_tokenizer_cases(dir() + "tokenizer_golden.json"))
    for (std::size_t i = 0; i < c.ids.size(); ++i) EXPECT_EQ(tok->token_to_id(c.tokens[i]), c.ids[i]);
}

INSTANTIATE_TEST_SUITE_P(Files, SentencePieceGolden, ::testing::Values("sp-legacy", "sp-metaspace"),
                         [](const auto& info) { return info.param == "sp-legacy" ? std::string("Legacy") : std::string("Metaspace"); });

}  // namespace
}  // namespace sluice
