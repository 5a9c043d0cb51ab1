// Constrained requests through the engine with the bundled model: the mask applies per sequence
// (a free request batched beside a constrained one answers as it does alone), a lone greedy
// constrained request does not take the decode-ahead path (whose choice is made on the device,
// where no mask applies) nor make speculative guesses, and its output is a whole value of its
// grammar, within max_tokens.
#include <algorithm>
#include <future>
#include <set>

#include <gtest/gtest.h>

#include "constrain/grammar_constraint.h"
#include "constrain/json_schema.h"
#include "engine/engine.h"
#include "choice_results.h"
#include "greedy_requests.h"
#include "reference.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

namespace sluice::constrain {
namespace {

std::unique_ptr<Engine> make_engine(int parallel, const std::string& draft = "") {
  EngineOptions o;
  o.draft = draft;
  o.model_dir = test::source_path("models/tiny-code-qwen2").string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = "cpu";
  o.threads = 2;
  o.ctx_size = 512;
  o.parallel = parallel;
  o.decode_ahead = "on";  // would take a lone greedy request, were it not constrained
  auto e = Engine::create(o);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(*e) : nullptr;
}

std::shared_ptr<const CompiledGrammar> grammar(const Engine& engine, const char* schema) {
  auto doc = json::parse(schema, "schema");
  EXPECT_TRUE(doc.ok());
  auto g = compile_json_schema(*doc);
  EXPECT_TRUE(g.ok()) << g.message();
  return std::make_shared<CompiledGrammar>(std::move(*g), VocabIndex::from_tokenizer(engine.tokenizer(), engine.eos_ids()));
}

// Whether the generated ids are a whole value of the grammar.
bool whole_value(const std::shared_ptr<const CompiledGrammar>& g, const std::vector<int32_t>& ids) {
  Matcher m(g);
  for (int32_t id : ids)
    if (!m.accept(id)) return false;
  return m.complete();
}

constexpr const char* kSchema =
    R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]}}},
        "required":["name","n","tags"],"additionalProperties":false})";

TEST(ConstrainedEngine, LoneGreedyRequestFollowsItsGrammarWithinMaxTokens) {
  auto engine = make_engine(1);
  ASSERT_TRUE(engine);
  auto g = grammar(*engine, kSchema);
  // The shortest value, {"name":"","n":0,"tags":[]}, is 27 bytes: from 27 tokens on it always fits.
  for (int max_tokens : {27, 40, 96}) {
    GenerationRequest req = test::greedy(engine->tokenizer().encode("def main():\n    config = "), max_tokens);
    req.constraint = std::make_shared<GrammarConstraint>(g);
    const GenerationResult r = engine->generate(std::move(req));
    EXPECT_EQ(r.finish, FinishReason::kStop) << r.error;
    EXPECT_LE(r.ids.size(), static_cast<std::size_t>(max_tokens));
    EXPECT_TRUE(whole_value(g, r.ids)) << engine->tokenizer().decode(r.ids);
    auto parsed = json::parse(engine->tokenizer().decode(r.ids), "output");
    EXPECT_TRUE(parsed.ok() && parsed->IsObject()) << engine->tokenizer().decode(r.ids);
  }
}

TEST(ConstrainedEngine, IgnoreEosStillEndsAConstrainedOutputAtItsEnd) {
  auto engine = make_engine(1);
  ASSERT_TRUE(engine);
  // After "1" the value is complete yet may go on ("12"): the end-of-sequence token is one of two
  // choices, and a high temperature makes it come up in some of the seeds.
  auto g = grammar(*engine, R"({"enum":[1,12]})");
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    GenerationRequest req = test::greedy(engine->tokenizer().encode("n = "), 20);
    req.ignore_eos = true;
    req.sampling.temperature = 50.0f;
    req.sampling.seed = seed;
    req.constraint = std::make_shared<GrammarConstraint>(g);
    const GenerationResult r = engine->generate(std::move(req));
    EXPECT_NE(r.finish, FinishReason::kError) << r.error;
    EXPECT_TRUE(whole_value(g, r.ids)) << engine->tokenizer().decode(r.ids);
  }
}

TEST(ConstrainedEngine, ABudgetBelowTheShortestValueStillShortensTheWay) {
  auto engine = make_engine(1);
  ASSERT_TRUE(engine);
  auto g = grammar(*engine, kSchema);
  GenerationRequest req = test::greedy(engine->tokenizer().encode("x = "), 12);
  req.constraint = std::make_shared<GrammarConstraint>(g);
  const GenerationResult r = engine->generate(std::move(req));
  EXPECT_NE(r.finish, FinishReason::kError) << r.error;
  Matcher m(g);
  for (int32_t id : r.ids) EXPECT_TRUE(m.accept(id).ok());  // what it wrote is a prefix of a value
}

TEST(ConstrainedEngine, SpeculativeDecodingMakesNoGuessesForAConstrainedRequest) {
  auto engine = make_engine(1, "ngram");
  ASSERT_TRUE(engine);
  auto g = grammar(*engine, kSchema);
  // A prompt that repeats itself, so prompt lookup has guesses to make for a free request.
  const auto prompt = engine->tokenizer().encode("x = {\"name\": \"a\", \"n\": 1, \"tags\": []}\nx = {\"name\": \"a\", \"n\": 1, \"tags\": []}\nx = ");
  GenerationRequest free_req = test::greedy(prompt, 24);
  const GenerationResult free_run = engine->generate(std::move(free_req));
  GenerationRequest req = test::greedy(prompt, 48);
  req.constraint = std::make_shared<GrammarConstraint>(g);
  const GenerationResult r = engine->generate(std::move(req));
  EXPECT_EQ(r.stats.draft_tokens, 0);
  EXPECT_TRUE(whole_value(g, r.ids)) << engine->tokenizer().decode(r.ids);
  EXPECT_GT(free_run.stats.draft_tokens, 0) << "the drafter made no guesses at all: the check above says nothing";
}

TEST(ConstrainedEngine, MasksArePerSequenceInOneBatch) {
  auto engine = make_engine(2);
  ASSERT_TRUE(engine);
  auto g = grammar(*engine, kSchema);
  const auto free_prompt = engine->tokenizer().encode("def add(a, b):\n");
  const GenerationResult alone = engine->generate(test::greedy(free_prompt, 32));
  auto constrained = std::async(std::launch::async, [&] {
    GenerationRequest req = test::greedy(engine->tokenizer().encode("x = "), 64);
    req.constraint = std::make_shared<GrammarConstraint>(g);
    return engine->generate(std::move(req));
  });
  const GenerationResult beside = engine->generate(test::greedy(free_prompt, 32));
  const GenerationResult c = constrained.get();
  EXPECT_EQ(beside.ids, alone.ids);
  EXPECT_TRUE(whole_value(g, c.ids)) << engine->tokenizer().decode(c.ids);
}

// n choices: each follows the grammar on its own (a constraint per choice, TokenConstraint::restart),
// sampled apart; and a logit bias never overrides the mask — +100 on a token the grammar never allows
// here, -100 on the one that must open the value.
TEST(ConstrainedEngine, EveryChoiceFollowsItsOwnGrammarWhateverTheBias) {
  auto engine = make_engine(4);
  ASSERT_TRUE(engine);
  auto g = grammar(*engine, kSchema);
  const auto open = engine->tokenizer().encode("{");
  const auto print = engine->tokenizer().encode("print");
  ASSERT_EQ(open.size(), 1u);
  ASSERT_EQ(print.size(), 1u);
  GenerationRequest req = test::greedy(engine->tokenizer().encode("def main():\n    config = "), 60);
  req.sampling.temperature = 1.0f;
  req.sampling.seed = 21;
  req.n = 3;
  req.constraint = std::make_shared<GrammarConstraint>(g);
  req.sampling.logit_bias = {{open[0], -100.0f}};
  const auto got = test::run_choices(*engine, req);
  ASSERT_EQ(got.results.size(), 3u);
  std::set<std::vector<int32_t>> distinct;
  for (const auto& [c, r] : got.results) {
    EXPECT_EQ(r.finish, FinishReason::kStop) << r.error;
    EXPECT_TRUE(whole_value(g, r.ids)) << "choice " << c << ": " << engine->tokenizer().decode(r.ids);
    distinct.insert(r.ids);
  }
  EXPECT_GE(distinct.size(), 2u) << "the choices sampled alike";
  // +100 on "print": taken wherever the grammar allows it (inside strings), never where it does not.
  GenerationRequest forced = test::greedy(engine->tokenizer().encode("def main():\n    config = "), 60);
  forced.constraint = std::make_shared<GrammarConstraint>(g);
  forced.sampling.logit_bias = {{print[0], 100.0f}};
  const auto r = engine->generate(std::move(forced));
  EXPECT_EQ(r.finish, FinishReason::kStop) << r.error;
  EXPECT_TRUE(whole_value(g, r.ids)) << engine->tokenizer().decode(r.ids);
  EXPECT_NE(std::find(r.ids.begin(), r.ids.end(), print[0]), r.ids.end()) << engine->tokenizer().decode(r.ids);
}

}  // namespace
}  // namespace sluice::constrain
