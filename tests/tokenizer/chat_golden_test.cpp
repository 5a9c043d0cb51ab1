// Rendered chat prompts: every special marker is one id and the text survives a round trip.
//
// The golden's "ids" field is broken: transformers returned a BatchEncoding and the generator saved
// its keys ("input_ids", "attention_mask") instead of the ids. So we assert what the ids must
// satisfy instead: the special tokens come out as single ids, and decode(encode(rendered)) == rendered.
#include <gtest/gtest.h>

#include <algorithm>

#include "reference.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

namespace sluice {
namespace {

std::vector<std::string> rendered_prompts() {
  std::vector<std::string> out;
  auto doc = json::parse_file(test::reference_path("golden/chat_golden.json"));
  EXPECT_TRUE(doc.ok()) << (doc.ok() ? "" : doc.message());
  if (doc.ok() && doc->IsArray())
    for (const auto& entry : doc->GetArray()) out.emplace_back(entry["rendered"].GetString());
  return out;
}

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + needle.size())) ++n;
  return n;
}

TEST(ChatGolden, SpecialMarkersEncodeAsSingleIds) {
  SLUICE_REQUIRE_REFERENCE("golden/chat_golden.json");
  auto tok = Tokenizer::load_from_model_dir(test::reference_path("models/tiny-code-qwen2"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  auto start = tok->token_to_id("<|im_start|>"), end = tok->token_to_id("<|im_end|>");
  ASSERT_TRUE(start && end);
  EXPECT_TRUE(tok->is_special(*start));
  auto prompts = rendered_prompts();
  ASSERT_FALSE(prompts.empty());
  for (const auto& rendered : prompts) {
    auto ids = tok->encode(rendered);
    EXPECT_EQ(ids.front(), *start);
    EXPECT_EQ(static_cast<std::size_t>(std::count(ids.begin(), ids.end(), *start)), count_of(rendered, "<|im_start|>"));
    EXPECT_EQ(static_cast<std::size_t>(std::count(ids.begin(), ids.end(), *end)), count_of(rendered, "<|im_end|>"));
  }
}

TEST(ChatGolden, RenderedPromptRoundTrips) {
  SLUICE_REQUIRE_REFERENCE("golden/chat_golden.json");
  auto tok = Tokenizer::load_from_model_dir(test::reference_path("models/tiny-code-qwen2"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  for (const auto& rendered : rendered_prompts()) EXPECT_EQ(tok->decode(tok->encode(rendered)), rendered);
}

TEST(ChatGolden, EosNameFromTokenizerConfigResolvesToImEnd) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/tokenizer_config.json");
  auto tok = Tokenizer::load_from_model_dir(test::reference_path("models/tiny-code-qwen2"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(tok->eos_token_id(), tok->token_to_id("<|im_end|>"));
  EXPECT_FALSE(tok->bos_token_id().has_value());  // the config's bos_token is null
}

}  // namespace
}  // namespace sluice
