// The matcher: its masks equal a brute-force check of every token against the grammar, taking a
// token moves the state, stop tokens come only when the output is complete, and a small budget
// closes the output in time.
#include <gtest/gtest.h>

#include <random>

#include "constrain_helpers.h"
#include "reference.h"
#include "tokenizer/tokenizer.h"

namespace sluice::constrain {
namespace {

constexpr const char* kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"age":{"type":"integer","minimum":0,"maximum":130},
        "tags":{"type":"array","items":{"enum":["a","b","ab"]},"maxItems":3},"ok":{"type":"boolean"}},"required":["name","age"]})",
    R"({"anyOf":[{"type":"object","properties":{"k":{"const":"x"},"v":{"type":"number"}},"required":["k","v"]},
                 {"type":"object","properties":{"k":{"const":"y"},"w":{"type":["string","null"]}},"required":["k"]}]})",
    R"({"$ref":"#/$defs/n","$defs":{"n":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["v"]}}})",
    R"({"type":"object"})",
    // Optional items whose shortest form is long: one comma moves the end far away.
    R"({"type":"array","items":{"type":"object","properties":{"name":{"const":"a-rather-long-literal-name"}},"required":["name"]},"maxItems":6})",
    R"({"type":"integer"})",  // complete early, yet may go on
};

// Short JSON-ish pieces (and every single byte), so a walk meets tokens that span rule ends.
std::shared_ptr<const VocabIndex> random_vocab(uint32_t seed) {
  std::mt19937 rng(seed);
  const std::string alphabet = "{}[]\":, \nabkvxynmetruflsgid0123456789-.\\";
  std::vector<std::string> tokens;
  for (int b = 1; b < 128; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (int i = 0; i < 1500; ++i) {
    std::string t;
    const int len = 2 + static_cast<int>(rng() % 5);
    for (int k = 0; k < len; ++k) t += alphabet[rng() % alphabet.size()];
    tokens.push_back(t);
  }
  for (const char* t : {"\"name\"", "\":", "\",", "\"}", "},", "}]", "]}", "null", "true", "false", "\": \"", "\"k\":"}) tokens.emplace_back(t);
  tokens.emplace_back("");  // an id that never matches
  tokens.emplace_back("<eos>");
  const int32_t eos = static_cast<int32_t>(tokens.size() - 1);
  return std::make_shared<VocabIndex>(std::move(tokens), std::vector<int32_t>{eos});
}

// Every token checked on its own: the reference the cached, trie-walked mask must equal.
// A token must also leave no more bytes to write than tokens left after it.
TokenMask brute_force(const Matcher& m, const VocabIndex& v, int remaining) {
  TokenMask mask(v.size());
  for (std::size_t id = 0; id < v.size(); ++id) {
    const auto t = static_cast<int32_t>(id);
    if (std::find(v.stop_ids().begin(), v.stop_ids().end(), t) != v.stop_ids().end()) {
      if (m.complete()) mask.set(t);
      continue;
    }
    if (v.bytes(t).empty()) continue;
    Matcher copy = m;
    if (copy.accept(t) && copy.distance() + 1 <= static_cast<uint32_t>(remaining)) mask.set(t);
  }
  return mask;
}

// Walks random allowed tokens, checking each mask against brute force; returns the text.
std::string walk(std::shared_ptr<const CompiledGrammar> g, uint32_t seed, int max_tokens, bool check) {
  std::mt19937 rng(seed);
  Matcher m(g);
  const VocabIndex& v = g->vocab();
  TokenMask mask(v.size());
  std::string text;
  for (int step = 0; step < max_tokens; ++step) {
    m.fill_mask(mask, max_tokens - step);
    if (check) {
      EXPECT_EQ(mask.words(), brute_force(m, v, max_tokens - step).words()) << "step " << step << " after: " << text;
    }
    std::vector<int32_t> allowed;
    for (std::size_t id = 0; id < v.size(); ++id)
      if (mask.test(static_cast<int32_t>(id))) allowed.push_back(static_cast<int32_t>(id));
    EXPECT_FALSE(allowed.empty()) << "dead end after: " << text;
    if (allowed.empty()) break;
    const int32_t t = allowed[rng() % allowed.size()];
    if (std::find(v.stop_ids().begin(), v.stop_ids().end(), t) != v.stop_ids().end()) {
      EXPECT_TRUE(m.complete());
      return text;
    }
    EXPECT_TRUE(m.accept(t).ok());
    text += v.bytes(t);
    if (m.must_stop()) return text;
  }
  return text + "<cut>";
}

TEST(Matcher, MasksEqualBruteForceOnARandomVocabulary) {
  auto vocab = random_vocab(7);
  for (const char* schema : kSchemas) {
    auto g = testing::grammar_from(schema);
    ASSERT_TRUE(g.ok()) << g.message();
    // A roomy budget and a tight one (where it decides most steps).
    auto compiled = std::make_shared<CompiledGrammar>(std::move(*g), vocab);
    for (uint32_t seed = 1; seed <= 6; ++seed) walk(compiled, seed, 400, true);
    for (uint32_t seed = 1; seed <= 6; ++seed) walk(compiled, seed, 40, true);
  }
}

TEST(Matcher, ABudgetClosesEveryOutput) {
  auto vocab = random_vocab(11);
  for (const char* schema : kSchemas) {
    auto g = testing::grammar_from(schema);
    ASSERT_TRUE(g.ok()) << g.message();
    const Grammar grammar = *g;
    auto compiled = std::make_shared<CompiledGrammar>(std::move(*g), vocab);
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      const std::string text = walk(compiled, seed, 80, false);
      EXPECT_TRUE(testing::accepts(grammar, text)) << schema << "\n" << text;
    }
  }
}

TEST(Matcher, StopOnlyWhenCompleteAndNothingAfterTheEnd) {
  auto g = testing::grammar_from(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})");
  ASSERT_TRUE(g.ok());
  auto compiled = std::make_shared<CompiledGrammar>(std::move(*g), testing::byte_vocab());
  Matcher m(compiled);
  TokenMask mask(257);
  m.fill_mask(mask, 100);
  EXPECT_FALSE(mask.test(256));
  EXPECT_TRUE(mask.test('{'));
  EXPECT_EQ(mask.count(), 1u);
  ASSERT_TRUE(m.accept_bytes(R"({"a":12)").ok());
  m.fill_mask(mask, 100);
  EXPECT_TRUE(mask.test('3') && mask.test('}') && mask.test(' ') && !mask.test(256) && !mask.test('"'));
  EXPECT_FALSE(m.accept_bytes("x").ok());
  ASSERT_TRUE(m.accept_bytes("}").ok());  // a refused byte left the state as it was
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.must_stop());
  m.fill_mask(mask, 100);
  EXPECT_TRUE(mask.test(256));
  EXPECT_EQ(mask.count(), 1u);
}

TEST(Matcher, RealTokenizerMasksEqualBruteForce) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/tokenizer.json");
  auto tok = Tokenizer::load(test::reference_path("models/tiny-code-qwen2/tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  auto vocab = VocabIndex::from_tokenizer(*tok, {*tok->token_to_id("<|endoftext|>")});
  EXPECT_EQ(vocab->bytes(*tok->token_to_id("Ġ{")), " {");
  for (const char* schema : {kSchemas[0], kSchemas[3], kSchemas[4]}) {
    auto g = testing::grammar_from(schema);
    ASSERT_TRUE(g.ok()) << g.message();
    auto compiled = std::make_shared<CompiledGrammar>(std::move(*g), vocab);
    for (uint32_t seed = 1; seed <= 2; ++seed) walk(compiled, seed, 25, true);
  }
}

}  // namespace
}  // namespace sluice::constrain

namespace sluice::constrain {
namespace {

// The bytes a token adds mid-text, for the decoder chains SentencePiece-style vocabularies use:
// byte-fallback tokens are raw bytes (half a character stays half), the word marker is a space even
// on what would be a first token (these vocabularies mark their byte tokens special: added tokens take
// the decoder too, as in decode()).
TEST(TokenBytes, SentencePieceVocabulariesGiveRawMidTextBytes) {
  for (const char* name : {"golden/tokenizers/sp-legacy/tokenizer.json", "golden/tokenizers/sp-metaspace/tokenizer.json"}) {
    SLUICE_REQUIRE_REFERENCE(name);
    auto tok = Tokenizer::load(test::reference_path(name));
    ASSERT_TRUE(tok.ok()) << tok.message();
    EXPECT_EQ(tok->token_bytes(*tok->token_to_id("<0x0A>")), "\n") << name;
    EXPECT_EQ(tok->token_bytes(*tok->token_to_id("<0xC3>")), "\xC3") << name;
    EXPECT_EQ(tok->token_bytes(*tok->token_to_id("\xE2\x96\x81SMALL")), " SMALL") << name;
  }
}

}  // namespace
}  // namespace sluice::constrain
