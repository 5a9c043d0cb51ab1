// Hostile tokenizer.json / tokenizer_config.json: deep JSON, ids out of range, merges naming unknown
// tokens are clear errors, never a crash or a table sized by a huge id.
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

std::string bpe_tokenizer(const std::string& vocab, const std::string& merges = "[]", const std::string& extra = "") {
  return R"({"model":{"type":"BPE","vocab":)" + vocab + R"(,"merges":)" + merges + "}" + extra + "}";
}

std::string load_error(const std::string& json) {
  auto tok = Tokenizer::from_json_text(json, "tokenizer.json");
  EXPECT_FALSE(tok.ok()) << json.substr(0, 200);
  return tok.ok() ? std::string() : tok.message();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(TokenizerLimits, DeepJsonIsAnErrorNotACrash) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const std::string msg = load_error(bpe_tokenizer(R"({"a":0})", "[]", R"(,"normalizer":)" + deep));
  EXPECT_TRUE(contains(msg, "tokenizer.json")) << msg;
  EXPECT_TRUE(contains(msg, "max_depth")) << msg;
}

TEST(TokenizerLimits, VocabIdsOutOfRangeAreRefused) {
  // An id of 2^31 - 1 used to size the id -> token table (64 GB).
  std::string msg = load_error(bpe_tokenizer(R"({"a":0,"b":2147483647})"));
  EXPECT_TRUE(contains(msg, "vocab entry 'b'")) << msg;
  EXPECT_TRUE(contains(msg, "an integer from 0 to 4194303")) << msg;
  EXPECT_TRUE(contains(load_error(bpe_tokenizer(R"({"a":0,"b":4194304})")), "vocab entry 'b'"));
  EXPECT_TRUE(contains(load_error(bpe_tokenizer(R"({"a":-1})")), "vocab entry 'a'"));
  EXPECT_TRUE(contains(load_error(bpe_tokenizer(R"({"a":1.5})")), "vocab entry 'a'"));
  auto ok = Tokenizer::from_json_text(bpe_tokenizer(R"({"a":0,"b":300000})"), "tokenizer.json");  // sparse ids are fine
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->id_to_token(300000), "b");
}

TEST(TokenizerLimits, AddedTokenAndPostProcessorIdsOutOfRangeAreRefused) {
  EXPECT_TRUE(contains(load_error(bpe_tokenizer(R"({"a":0})", "[]", R"(,"added_tokens":[{"id":2147483647,"content":"<s>"}])")),
                       "an added token needs an id"));
  EXPECT_TRUE(contains(load_error(bpe_tokenizer(R"({"a":0})", "[]", R"(,"added_tokens":[{"id":-5,"content":"<s>"}])")),
                       "an added token needs an id"));
  const std::string post =
      R"(,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}},{"Sequence":{"id":"A"}}],)"
      R"("special_tokens":{"<s>":{"id":"<s>","ids":[-7],"tokens":["<s>"]}}})";
  EXPECT_TRUE(contains(load_error(bpe_tokenizer(R"({"a":0})", "[]", post)), "special token '<s>' has an id that is not"));
  const std::string bert = R"(,"post_processor":{"type":"BertProcessing","cls":["[CLS]",-1],"sep":["[SEP]",2]})";
  EXPECT_TRUE(contains(load_error(bpe_tokenizer(R"({"a":0})", "[]", bert)), "without cls/sep ids"));
}

TEST(TokenizerLimits, MergesNamingUnknownTokensAreRefused) {
  EXPECT_TRUE(contains(load_error(bpe_tokenizer(R"({"a":0,"b":1})", R"(["a c"])")), "uses a token not in the vocab"));
  EXPECT_TRUE(contains(load_error(bpe_tokenizer(R"({"a":0,"b":1})", R"([["a","b"]])")), "makes a token not in the vocab"));
  EXPECT_TRUE(contains(load_error(bpe_tokenizer(R"({"a":0,"b":1})", R"([["a"]])")), "a merge must be"));
}

TEST(TokenizerLimits, OversizedOrDeepTokenizerConfigIsAnError) {
  std::random_device rd;
  const auto dir = std::filesystem::temp_directory_path() / ("sluice_tok_limits_" + std::to_string(rd()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << bpe_tokenizer(R"({"a":0})");
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token":)" << std::string(200000, '[') << "}";
  auto tok = Tokenizer::load_from_model_dir(dir);
  ASSERT_FALSE(tok.ok());
  EXPECT_TRUE(contains(tok.message(), "tokenizer_config.json")) << tok.message();
  EXPECT_TRUE(contains(tok.message(), "max_depth")) << tok.message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
