// Forced tool calls: what the grammar writes, in each model family's syntax, is read back by that
// family's own parser as calls of the given tools with arguments their schemas accept.
#include <gtest/gtest.h>

#include <random>

#include "constrain/tool_call_grammar.h"
#include "constrain_helpers.h"

namespace sluice::constrain {
namespace {

using toolcall::Format;

constexpr const char* kTools = R"([
  {"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":12},
    "unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}},
  {"name":"add","parameters":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}},
  {"name":"ping"}])";

// Random text the grammar allows, over a vocabulary of every byte plus some longer pieces.
std::string random_output(const Grammar& g, uint32_t seed, int budget) {
  std::vector<std::string> tokens;
  for (int b = 1; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"<tool_call>", "\n</tool_call>", "{\"name\": \"", "\"arguments\": ", "[TOOL_CALLS]", "city", "\": \"", "\"}", "}\n"})
    tokens.emplace_back(t);
  tokens.emplace_back("<eos>");
  const int32_t eos = static_cast<int32_t>(tokens.size() - 1);
  auto vocab = std::make_shared<VocabIndex>(std::move(tokens), std::vector<int32_t>{eos});
  Matcher m(std::make_shared<CompiledGrammar>(g, vocab));
  std::mt19937 rng(seed);
  TokenMask mask(vocab->size());
  std::string text;
  for (int left = budget; left > 0; --left) {
    m.fill_mask(mask, left);
    std::vector<int32_t> allowed;
    for (std::size_t i = 0; i < vocab->size(); ++i)
      if (mask.test(static_cast<int32_t>(i))) allowed.push_back(static_cast<int32_t>(i));
    if (allowed.empty()) break;
    // Mostly the longer pieces, where allowed, so walks look like real calls.
    int32_t t = allowed[rng() % allowed.size()];
    for (int32_t a : allowed)
      if (a >= 255 && rng() % 2) t = a;
    if (t == eos) break;
    EXPECT_TRUE(m.accept(t).ok());
    text += vocab->bytes(t);
    if (m.must_stop()) break;
  }
  EXPECT_TRUE(m.complete()) << text;
  return text;
}

TEST(ToolCallGrammar, EveryFormatIsReadBackByItsOwnParser) {
  auto tools_doc = json::parse(kTools, "tools");
  ASSERT_TRUE(tools_doc.ok());
  std::vector<ToolSchema> tools;
  for (const auto& t : tools_doc->GetArray())
    tools.push_back({t["name"].GetString(), t.HasMember("parameters") ? &t["parameters"] : nullptr});
  for (Format f : {Format::kHermes, Format::kLlama3, Format::kMistral, Format::kGranite, Format::kApriel, Format::kNemotron,
                   Format::kQwenXml, Format::kHarmony, Format::kNone}) {
    for (bool parallel : {false, true}) {
      auto g = compile_tool_calls(f, tools, parallel);
      ASSERT_TRUE(g.ok()) << g.message();
      EXPECT_EQ(g->format, forced_call_format(f));
      for (uint32_t seed = 1; seed <= 8; ++seed) {
        const std::string text = random_output(g->grammar, seed, 120);
        const auto parsed = toolcall::parse_tool_calls(g->format, text);
        SCOPED_TRACE(std::string(toolcall::format_name(f)) + ": " + text);
        ASSERT_FALSE(parsed.calls.empty());
        EXPECT_EQ(parsed.content.find_first_not_of(" \n"), std::string::npos) << parsed.content;
        if (!parallel) {
          EXPECT_EQ(parsed.calls.size(), 1u);
        }
        for (const auto& call : parsed.calls) {
          auto args = json::parse(call.arguments, "arguments");
          ASSERT_TRUE(args.ok()) << call.arguments;
          EXPECT_TRUE(args->IsObject());
          const auto tool = std::find_if(tools.begin(), tools.end(), [&](const ToolSchema& t) { return t.name == call.name; });
          ASSERT_NE(tool, tools.end()) << call.name;
          if (tool->parameters) {
            auto pg = compile_json_schema(*tool->parameters);
            ASSERT_TRUE(pg.ok());
            EXPECT_TRUE(testing::accepts(*pg, call.arguments)) << call.arguments;
          }
        }
      }
    }
  }
}

TEST(ToolCallGrammar, ABadParametersSchemaNamesTheFunction) {
  auto doc = json::parse(R"({"type":"object","properties":{"x":{"not":{}}}})", "p");
  ASSERT_TRUE(doc.ok());
  auto g = compile_tool_calls(Format::kHermes, {{"f", &*doc}}, false);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("function f"), std::string::npos) << g.message();
  EXPECT_NE(g.message().find("'not'"), std::string::npos) << g.message();
}

}  // namespace
}  // namespace sluice::constrain
