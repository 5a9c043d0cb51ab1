// Constrained decoding's cost per token: the mask (which tokens may come next) and applying it to a
// row of logits, for vocabularies of 8K, ~150K and ~200K tokens over a few schemas.
//
// Vocabularies: the given tokenizer's own tokens; larger sizes add tokens made by joining two
// existing ones (as BPE merges grow a vocabulary: words with their leading space, code and JSON
// fragments), so the trie has the shared prefixes of a real large vocabulary. A generation is a walk
// that takes a random allowed token each step (a stand-in for a model), under a budget of --steps.
// "cold" is the first walk over a freshly compiled grammar (per-position masks built as positions
// are met); "warm" is a second walk over the same grammar (a server reusing a schema).
//
// Usage: bench_constrain [--tokenizer models/tiny-code-qwen2/tokenizer.json] [--sizes 8192,151646,201088]
//                        [--steps 256] [--walks 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_args.h"
#include "constrain/grammar_constraint.h"
#include "constrain/json_schema.h"
#include "constrain/tool_call_grammar.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

using namespace sluice;
using namespace sluice::constrain;
using Clock = std::chrono::steady_clock;

namespace {

struct Schema {
  const char* name;
  const char* text;  // nullptr: any JSON object
  bool tools = false;
};

const Schema kSchemas[] = {
    {"product (flat object, enums, bounded numbers)",
     R"({"type":"object","properties":{"sku":{"type":"string","maxLength":12},"name":{"type":"string"},"price":{"type":"number","minimum":0,"maximum":10000},
        "currency":{"enum":["USD","EUR","GBP"]},"in_stock":{"type":"boolean"},"tags":{"type":"array","items":{"type":"string"},"maxItems":4}},
        "required":["sku","name","price","currency","in_stock","tags"],"additionalProperties":false})"},
    {"github issue (nested arrays, nullable, $ref)",
     R"({"type":"object","properties":{"title":{"type":"string"},"body":{"type":"string"},"labels":{"type":"array","items":{"enum":["bug","docs","question"]}},
        "author":{"$ref":"#/$defs/user"},"assignees":{"type":"array","items":{"$ref":"#/$defs/user"},"maxItems":3},"milestone":{"type":["integer","null"]}},
        "required":["title","body","labels","author"],"additionalProperties":false,
        "$defs":{"user":{"type":"object","properties":{"login":{"type":"string"},"id":{"type":"integer","minimum":1}},"required":["login","id"],"additionalProperties":false}}})"},
    {"tool call (Hermes, two functions)",
     R"([{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}},
        {"name":"search","parameters":{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer","minimum":1,"maximum":50}},"required":["query"]}}])",
     true},
    {"json_object (any object)", nullptr},
};

std::vector<std::string> vocabulary(const Tokenizer& tok, std::size_t size, uint32_t seed) {
  std::vector<std::string> bytes;
  for (std::size_t id = 0; id < tok.vocab_size(); ++id)
    bytes.push_back(tok.is_special(static_cast<int32_t>(id)) ? std::string() : tok.token_bytes(static_cast<int32_t>(id)));
  std::vector<std::string> base;
  for (const auto& b : bytes)
    if (!b.empty() && b.size() <= 8) base.push_back(b);
  std::mt19937 rng(seed);
  std::sort(bytes.begin(), bytes.end());  // ids are arbitrary here: only the set of strings matters
  std::vector<std::string> out(bytes.begin(), bytes.end());
  while (out.size() < size) {
    std::string t = base[rng() % base.size()] + base[rng() % base.size()];
    if (t.size() > 24) continue;
    out.push_back(std::move(t));
  }
  out.resize(std::max(size, out.size()));
  // Duplicates (a joined string already in the vocabulary) are harmless: they share one trie node.
  std::shuffle(out.begin() + static_cast<std::ptrdiff_t>(bytes.size()), out.end(), rng);
  return out;
}

Result<Grammar> grammar_for(const Schema& s) {
  if (!s.text) return compile_any_json_object();
  auto doc = json::parse(s.text, s.name);
  if (!doc) return doc.error();
  if (!s.tools) return compile_json_schema(*doc);
  std::vector<ToolSchema> tools;
  for (const auto& t : doc->GetArray()) tools.push_back({t["name"].GetString(), &t["parameters"]});
  // The schema is only read while compiling: the grammar keeps no pointer into it.
  auto g = compile_tool_calls(toolcall::Format::kHermes, tools, true);
  if (!g) return g.error();
  return std::move(g->grammar);
}

struct Stats {
  std::vector<double> us;
  void add(double v) { us.push_back(v); }
  double mean() const {
    double s = 0;
    for (double v : us) s += v;
    return us.empty() ? 0 : s / static_cast<double>(us.size());
  }
  double pct(double p) const {
    if (us.empty()) return 0;
    std::vector<double> v = us;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
  }
};

// One generation: fill_mask and applying it to a row of logits, timed apart.
void walk(std::shared_ptr<const CompiledGrammar> g, uint32_t seed, int steps, Stats& mask_us, Stats& apply_us, int& tokens, bool& completed) {
  Matcher matcher(g);
  TokenMask mask(g->vocab().size());
  std::vector<float> logits(g->vocab().size());
  std::mt19937 rng(seed);
  completed = false;
  tokens = 0;
  for (int left = steps; left > 0; --left) {
    // The "model": random logits (cheap to draw: a hash of the step), the best allowed one taken,
    // as greedy sampling would.
    const uint64_t salt = rng();
    for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(((i + 1) * 0x9E3779B97F4A7C15ull ^ salt) >> 40);
    const auto t0 = Clock::now();
    matcher.fill_mask(mask, left);
    const auto t1 = Clock::now();
    apply_mask(mask, logits);
    const auto t2 = Clock::now();
    mask_us.add(std::chrono::duration<double, std::micro>(t1 - t0).count());
    apply_us.add(std::chrono::duration<double, std::micro>(t2 - t1).count());
    const auto best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const auto stops = g->vocab().stop_ids();
    if (std::find(stops.begin(), stops.end(), best) != stops.end()) {
      completed = matcher.complete();
      return;
    }
    if (!matcher.accept(best)) return;
    ++tokens;
    if (matcher.must_stop()) {
      completed = true;
      return;
    }
  }
  completed = matcher.complete();
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path = "models/tiny-code-qwen2/tokenizer.json";
  std::vector<int> sizes = {8192, 151646, 201088};
  int steps = 256, walks = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--tokenizer") tokenizer_path = next();
    else if (a == "--sizes") sizes = perf::int_list(next());
    else if (a == "--steps") steps = std::stoi(next());
    else if (a == "--walks") walks = std::stoi(next());
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  auto tok = Tokenizer::load(tokenizer_path);
  if (!tok) {
    std::fprintf(stderr, "%s\n", tok.message().c_str());
    return 1;
  }
  std::printf("| vocab | schema | grammar positions | compile ms | walk | tokens | complete | mask mean µs | mask p50 | mask p99 | mask max | apply mean µs |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int size : sizes) {
    auto bytes = vocabulary(*tok, static_cast<std::size_t>(size), 42);
    bytes.push_back("");  // the stop token's id
    const auto stop = static_cast<int32_t>(bytes.size() - 1);
    const auto t0 = Clock::now();
    auto vocab = std::make_shared<VocabIndex>(std::move(bytes), std::vector<int32_t>{stop});
    const double index_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::fprintf(stderr, "vocab %d: index %.1f ms, %zu trie nodes\n", size, index_ms, vocab->trie().nodes().size());
    for (const Schema& s : kSchemas) {
      const auto c0 = Clock::now();
      auto g = grammar_for(s);
      if (!g) {
        std::fprintf(stderr, "%s: %s\n", s.name, g.message().c_str());
        return 1;
      }
      const std::size_t positions = g->positions.size();
      auto compiled = std::make_shared<const CompiledGrammar>(std::move(*g), vocab);
      const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - c0).count();
      for (int w = 0; w < walks; ++w) {
        Stats mask_us, apply_us;
        int tokens = 0;
        bool done = false;
        walk(compiled, static_cast<uint32_t>(w + 1), steps, mask_us, apply_us, tokens, done);
        std::printf("| %d | %s | %zu | %.1f | %s | %d | %s | %.1f | %.1f | %.1f | %.1f | %.1f |\n", size, s.name, positions, compile_ms,
                    w == 0 ? "cold" : "warm", tokens, done ? "yes" : "no", mask_us.mean(), mask_us.pct(0.5), mask_us.pct(0.99),
                    mask_us.pct(1.0), apply_us.mean());
      }
    }
  }
  return 0;
}
