// Fuzzes the constrained-decoding compiler and matcher (core/constrain) on JSON Schemas, which a
// request sends (response_format, tools' parameters): the input is the schema's JSON text. Small
// limits put the bounds on every path. Checks: nothing crashes or hangs; a grammar that compiles is
// walked with a one-byte-a-token vocabulary under a budget its shortest value fits, always taking the
// first allowed token, and the walk must end in a complete value the grammar accepts whole.
#include <memory>
#include <string>
#include <vector>

#include "constrain/json_schema.h"
#include "constrain/matcher.h"
#include "fuzz_support.h"
#include "util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  using namespace sluice::constrain;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  json::JsonLimits jl;
  jl.max_depth = 64;
  jl.max_object_members = 1000;
  auto doc = json::parse(text, "schema", jl);
  if (!doc) return 0;
  GrammarLimits limits;
  limits.max_positions = 20000;
  limits.max_nfa_states = 40000;
  limits.max_rules = 256;
  limits.max_work = 400000;
  JsonGrammarOptions options;
  options.max_string_length = 64;
  options.max_items = 16;
  auto grammar = compile_json_schema(*doc, options, limits);
  if (!grammar) {
    FUZZ_CHECK(!grammar.message().empty(), "an error without a message");
    return 0;
  }
  static const auto vocab = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
    bytes.emplace_back("<eos>");
    return std::make_shared<const VocabIndex>(std::move(bytes), std::vector<int32_t>{256});
  }();
  auto compiled = std::make_shared<const CompiledGrammar>(std::move(*grammar), vocab);
  Matcher m(compiled);
  const uint32_t shortest = m.distance();
  if (shortest > 2000) return 0;
  const int budget = static_cast<int>(shortest) + 1 + static_cast<int>(size % 32);
  TokenMask mask(vocab->size());
  for (int left = budget; left > 0; --left) {
    m.fill_mask(mask, left);
    int32_t pick = -1;
    for (int32_t id = 0; id < 257 && pick < 0; ++id)
      if (mask.test(id)) pick = id;
    FUZZ_CHECK(pick >= 0, "no token allowed with %d tokens left", left);
    if (pick == 256) break;
    FUZZ_CHECK(m.accept(pick).ok(), "an allowed token was refused");
    if (m.must_stop()) break;
  }
  FUZZ_CHECK(m.complete(), "the budget (%d tokens, shortest value %u bytes) did not close the value", budget, shortest);
  return 0;
}
