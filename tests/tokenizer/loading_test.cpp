// Loading: every shipped tokenizer.json loads, and the two spellings of merges mean the same thing.
#include <gtest/gtest.h>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "golden.h"
#include "tokenizer/tokenizer.h"
#include "util/file_io.h"

namespace sluice {
namespace {

TEST(TokenizerLoading, EveryZooModelTokenizerLoads) {
  SLUICE_REQUIRE_REFERENCE("models/zoo");
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::reference_path("models/zoo"))) {
    if (!std::filesystem::exists(entry.path() / "tokenizer.json")) continue;
    auto tok = Tokenizer::load_from_model_dir(entry.path());
    EXPECT_TRUE(tok.ok()) << entry.path() << ": " << (tok.ok() ? "" : tok.message());
    if (tok.ok()) {
      EXPECT_GT(tok->vocab_size(), 0u);
    }
    ++loaded;
  }
  EXPECT_GT(loaded, 0);
}

TEST(TokenizerLoading, MissingFileIsAnErrorNotACrash) {
  auto tok = Tokenizer::load("/nonexistent/tokenizer.json");
  EXPECT_FALSE(tok.ok());
}

TEST(TokenizerLoading, UnsupportedModelTypeIsReported) {
  auto tok = Tokenizer::from_json_text(R"({"model": {"type": "Unigram", "vocab": []}})");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.message().find("Unigram"), std::string::npos);
}

// The Qwen2 file stores merges as ["a", "b"]; rewritten as "a b" strings it must encode identically.
TEST(TokenizerLoading, StringFormMergesEncodeLikeArrayFormMerges) {
  SLUICE_REQUIRE_REFERENCE("golden/tokenizer_golden.json");
  auto text = read_text_file(test::reference_path("models/tiny-code-qwen2/tokenizer.json"));
  ASSERT_TRUE(text.ok());
  rapidjson::Document doc;
  doc.Parse(text->data(), text->size());
  ASSERT_FALSE(doc.HasParseError());
  auto& merges = doc["model"]["merges"];
  for (auto& merge : merges.GetArray()) {
    if (!merge.IsArray()) continue;
    std::string joined = std::string(merge[0].GetString()) + " " + merge[1].GetString();
    merge.SetString(joined.data(), static_cast<rapidjson::SizeType>(joined.size()), doc.GetAllocator());
  }
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  doc.Accept(writer);
  auto tok = Tokenizer::from_json_text(std::string_view(buffer.GetString(), buffer.GetSize()));
  ASSERT_TRUE(tok.ok()) << tok.message();
  for (const auto& c : test::load_tokenizer_cases("golden/tokenizer_golden.json")) EXPECT_EQ(tok->encode(c.text), c.ids);
}

TEST(TokenizerLoading, VocabSizeCoversEveryGoldenId) {
  SLUICE_REQUIRE_REFERENCE("golden/tokenizer_golden.json");
  auto tok = Tokenizer::load(test::reference_path("models/tiny-code-qwen2/tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  for (const auto& c : test::load_tokenizer_cases("golden/tokenizer_golden.json"))
    for (int32_t id : c.ids) {
      EXPECT_LT(static_cast<std::size_t>(id), tok->vocab_size());
      EXPECT_FALSE(tok->id_to_token(id).empty());
    }
}

}  // namespace
}  // namespace sluice
