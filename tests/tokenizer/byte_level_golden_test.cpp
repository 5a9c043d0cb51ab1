// The byte-level BPE tokenizer of the bundled Qwen2-style model against HF tokenizers' output.
#include <gtest/gtest.h>

#include <thread>

#include "golden.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

constexpr const char* kGolden = "golden/tokenizer_golden.json";
constexpr const char* kTokenizer = "models/tiny-code-qwen2/tokenizer.json";

TEST(ByteLevelGolden, EncodeWithoutSpecialTokensMatchesHfIds) {
  SLUICE_REQUIRE_REFERENCE(kGolden);
  SLUICE_REQUIRE_REFERENCE(kTokenizer);
  auto tok = Tokenizer::load(test::reference_path(kTokenizer));
  ASSERT_TRUE(tok.ok()) << tok.message();
  auto cases = test::load_tokenizer_cases(kGolden);
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) EXPECT_EQ(tok->encode(c.text), c.ids) << "text: " << test::label(c.text);
}

TEST(ByteLevelGolden, DecodeOfGoldenIdsMatchesHfText) {
  SLUICE_REQUIRE_REFERENCE(kGolden);
  SLUICE_REQUIRE_REFERENCE(kTokenizer);
  auto tok = Tokenizer::load(test::reference_path(kTokenizer));
  ASSERT_TRUE(tok.ok()) << tok.message();
  for (const auto& c : test::load_tokenizer_cases(kGolden)) EXPECT_EQ(tok->decode(c.ids), c.decoded) << "text: " << test::label(c.text);
}

TEST(ByteLevelGolden, RepeatedEncodeIsServedIdenticallyFromTheWordCache) {
  SLUICE_REQUIRE_REFERENCE(kGolden);
  SLUICE_REQUIRE_REFERENCE(kTokenizer);
  auto tok = Tokenizer::load(test::reference_path(kTokenizer));
  ASSERT_TRUE(tok.ok()) << tok.message();
  for (int round = 0; round < 2; ++round)
    for (const auto& c : test::load_tokenizer_cases(kGolden)) EXPECT_EQ(tok->encode(c.text), c.ids) << "round " << round;
}

// One Tokenizer shared by several threads (as the server shares it): the word cache must not mix
// results up.
TEST(ByteLevelGolden, ConcurrentEncodesFromOneTokenizerMatchHfIds) {
  SLUICE_REQUIRE_REFERENCE(kGolden);
  SLUICE_REQUIRE_REFERENCE(kTokenizer);
  auto tok = Tokenizer::load(test::reference_path(kTokenizer));
  ASSERT_TRUE(tok.ok()) << tok.message();
  const Tokenizer& shared = *tok;
  auto cases = test::load_tokenizer_cases(kGolden);
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round)
        for (std::size_t i = 0; i < cases.size(); ++i) {
          const auto& c = cases[(i + static_cast<std::size_t>(t) * 5) % cases.size()];
          if (shared.encode(c.text) != c.ids) ++mismatches[static_cast<std::size_t>(t)];
        }
    });
  for (auto& thread : threads) thread.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// A megabyte of the golden texts back to back: the fast path for big inputs still round-trips.
TEST(ByteLevelGolden, MegabyteOfTextRoundTrips) {
  SLUICE_REQUIRE_REFERENCE(kGolden);
  SLUICE_REQUIRE_REFERENCE(kTokenizer);
  auto tok = Tokenizer::load(test::reference_path(kTokenizer));
  ASSERT_TRUE(tok.ok()) << tok.message();
  std::string big;
  auto cases = test::load_tokenizer_cases(kGolden);
  while (big.size() < (1u << 20))
    for (const auto& c : cases) big += c.text;
  auto ids = tok->encode(big);
  EXPECT_GT(ids.size(), big.size() / 8);
  EXPECT_EQ(tok->decode(ids), big);
}

TEST(ByteLevelGolden, SkipSpecialTokensDropsImMarkers) {
  SLUICE_REQUIRE_REFERENCE(kTokenizer);
  auto tok = Tokenizer::load(test::reference_path(kTokenizer));
  ASSERT_TRUE(tok.ok()) << tok.message();
  auto ids = tok->encode("<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/true), tok->decode(tok->encode("user\nhi\n")));
}

}  // namespace
}  // namespace sluice
