// bench_speculative: what speculative decoding buys on a code-completion workload.
// Prompts are windows of held-out Python (../shared/golden/eval_code_ids.json, token ids of the
// bundled model's tokenizer: decoded to text with --prompt-tokenizer and encoded again with the
// model's own, so any model folder runs the same text). Each configuration — plain decoding, n-gram
// drafting at each --draft-tokens value, a draft model (--draft-model) at each — generates --gen
// greedy tokens for every prompt, --streams at once; rounds interleave the configurations (the
// machine's load drifts alike for all; --sequential loads one configuration's engine at a time, for
// models too large to hold several copies) and the median round is reported: decode tokens/s (generated
// tokens after each request's first over its decode time, summed over the round's requests), the
// speed-up over plain decoding, the acceptance rate and the tokens per target pass — and the
// process's CPU time per generated token (user + system, every thread; the round's prompts come from
// the prefix cache after the warm-up round), which other people's load on a shared machine disturbs
// far less than wall time. Greedy output
// is checked to be plain decoding's, token for token. First it prints what one target pass costs by
// its number of tokens (a prompt's worth of context cached, then 1..12 tokens, rolled back after
// each): the price of verifying guesses, which decides how many are worth drafting.
//
//   bench_speculative --model DIR [--backend cpu] [--threads N] [--kv-codec f16] [--draft-model DIR]
//                     [--draft-tokens 2,3,4,6,8] [--prompts 8] [--prompt-len 256] [--gen 128]
//                     [--streams 1] [--rounds 3] [--prompt-ids FILE] [--prompt-tokenizer DIR] [--sequential] [--json]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "bench_args.h"
#include "engine/engine.h"
#include "engine/runtime.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

using namespace sluice;

namespace {

struct Config {
  std::string name;     // plain | ngram | draft model
  std::string draft;    // EngineOptions::draft
  std::string draft_model;
  int draft_tokens = 0;
};

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct RoundResult {
  double decode_tps = 0;  // summed generated-after-first tokens over summed decode seconds
  double cpu_ms_per_token = 0;
  double acceptance = 0, tokens_per_pass = 0;
  std::vector<std::vector<int32_t>> ids;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Milliseconds of one pass of n tokens after `context` (median of reps), for n = 1..max_rows.
Result<std::vector<double>> pass_costs(const EngineOptions& o, std::span<const int32_t> context, int max_rows, int reps) {
  auto rt = Runtime::open(o);
  if (!rt) return rt.error();
  SequenceState seq;
  std::vector<float> logits;
  if (auto s = (*rt)->run(seq, context, false, logits); !s) return s.error();
  const int32_t base = seq.n_past;
  std::vector<double> ms;
  for (int n = 1; n <= max_rows; ++n) {
    const std::vector<int32_t> tokens(context.end() - n, context.end());
    std::vector<double> times;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      if (auto s = (*rt)->run(seq, tokens, true, logits); !s) return s.error();
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (auto s = (*rt)->kv().rollback(seq, base); !s) return s.error();
    }
    ms.push_back(median(times));
  }
  (*rt)->release(seq);
  return ms;
}

Result<RoundResult> run_round(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, int gen, int streams) {
  RoundResult out;
  out.ids.resize(prompts.size());
  long tokens = 0, passes = 0, pass_tokens = 0, drafted = 0, accepted = 0;
  double seconds = 0;
  const double cpu0 = cpu_seconds();
  long generated = 0;
  for (std::size_t first = 0; first < prompts.size(); first += static_cast<std::size_t>(streams)) {
    std::vector<std::future<GenerationResult>> running;
    const std::size_t end = std::min(prompts.size(), first + static_cast<std::size_t>(streams));
    for (std::size_t i = first; i < end; ++i) {
      GenerationRequest r;
      r.prompt_ids = prompts[i];
      r.max_tokens = gen;
      r.sampling.temperature = 0;
      r.ignore_eos = true;
      running.push_back(std::async(std::launch::async, [&engine, r] { return engine.generate(r); }));
    }
    for (std::size_t i = first; i < end; ++i) {
      const GenerationResult g = running[i - first].get();
      if (g.finish == FinishReason::kError) return make_error(g.error);
      tokens += g.stats.completion_tokens - 1;
      generated += g.stats.completion_tokens;
      seconds += g.stats.decode_ms / 1000.0;
      passes += g.stats.decode_passes;
      pass_tokens += g.stats.decode_pass_tokens;
      drafted += g.stats.draft_tokens;
      accepted += g.stats.draft_accepted;
      out.ids[i] = g.ids;
    }
  }
  out.decode_tps = seconds > 0 ? tokens / seconds : 0;
  out.cpu_ms_per_token = generated > 0 ? (cpu_seconds() - cpu0) * 1000.0 / generated : 0;
  out.acceptance = drafted > 0 ? static_cast<double>(accepted) / drafted : 0;
  out.tokens_per_pass = passes > 0 ? static_cast<double>(pass_tokens) / passes : 0;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  EngineOptions o;
  o.backend = "cpu";
  std::string draft_model, prompt_ids_file = "../shared/golden/eval_code_ids.json", prompt_tokenizer = "models/tiny-code-qwen2";
  std::vector<int> draft_tokens = {2, 3, 4, 6, 8};
  int n_prompts = 8, prompt_len = 256, gen = 128, streams = 1, rounds = 3;
  bool json = false, sequential = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (perf::engine_option(a, next, o)) continue;
    if (a == "--draft-model") draft_model = next();
    else if (a == "--draft-tokens") draft_tokens = perf::int_list(next());
    else if (a == "--prompts") n_prompts = std::stoi(next());
    else if (a == "--prompt-len") prompt_len = std::stoi(next());
    else if (a == "--gen") gen = std::stoi(next());
    else if (a == "--streams") streams = std::stoi(next());
    else if (a == "--rounds") rounds = std::stoi(next());
    else if (a == "--prompt-ids") prompt_ids_file = next();
    else if (a == "--prompt-tokenizer") prompt_tokenizer = next();
    else if (a == "--json") json = true;
    else if (a == "--sequential") sequential = true;
    else {
      std::fprintf(stderr, "bench_speculative: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (o.model_dir.empty() || streams < 1 || rounds < 1 || n_prompts < 1) {
    std::fprintf(stderr, "usage: bench_speculative --model DIR [--draft-model DIR] [--draft-tokens 2,4,8] [--prompts N] "
                         "[--prompt-len N] [--gen N] [--streams N] [--rounds N] [--backend B] [--threads N] [--json]\n");
    return 2;
  }
  o.parallel = streams;
  o.ctx_size = prompt_len + gen + 64;
  o.decode_ahead = "off";  // plain decoding reads every step's logits, as verification does

  // The workload: windows of held-out code, as text, in the model's own tokens.
  auto doc = json::parse_file(prompt_ids_file);
  if (!doc) return std::fprintf(stderr, "bench_speculative: %s\n", doc.message().c_str()), 1;
  std::vector<int32_t> text_ids;
  for (const auto& v : doc->GetArray()) text_ids.push_back(v.GetInt());
  auto source = Tokenizer::load_from_model_dir(prompt_tokenizer);
  auto target = Tokenizer::load_from_model_dir(o.model_dir);
  if (!source || !target) return std::fprintf(stderr, "bench_speculative: cannot load the tokenizers\n"), 1;
  std::vector<std::vector<int32_t>> prompts;
  const std::size_t stride = text_ids.size() / static_cast<std::size_t>(n_prompts + 1);
  for (int p = 0; p < n_prompts; ++p) {
    const auto from = text_ids.begin() + static_cast<std::ptrdiff_t>(stride * static_cast<std::size_t>(p + 1));
    const std::string text = source->decode(std::vector<int32_t>(from, from + prompt_len));
    auto ids = target->encode(text, false);
    if (static_cast<int>(ids.size()) > prompt_len) ids.resize(static_cast<std::size_t>(prompt_len));
    prompts.push_back(std::move(ids));
  }

  auto costs = pass_costs(o, prompts.front(), 12, 15);
  if (!costs) return std::fprintf(stderr, "bench_speculative: %s\n", costs.message().c_str()), 1;
  std::printf("one target pass by tokens in it (ms, after %zu tokens of context):\n\n| tokens |", prompts.front().size());
  for (std::size_t n = 1; n <= costs->size(); ++n) std::printf(" %zu |", n);
  std::printf("\n|---|");
  for (std::size_t n = 1; n <= costs->size(); ++n) std::printf("---|");
  std::printf("\n| ms |");
  for (double ms : *costs) std::printf(" %.2f |", ms);
  std::printf("\n\n");

  std::vector<Config> configs{{"plain", "", "", 0}};
  for (int k : draft_tokens) configs.push_back({"ngram", "ngram", "", k});
  if (!draft_model.empty())
    for (int k : draft_tokens) configs.push_back({"draft " + std::filesystem::path(draft_model).filename().string(), "", draft_model, k});
  std::vector<std::unique_ptr<Engine>> engines(configs.size());
  auto open = [&](std::size_t c) -> bool {
    EngineOptions e = o;
    e.draft = configs[c].draft;
    e.draft_model = configs[c].draft_model;
    if (configs[c].draft_tokens > 0) e.num_draft_tokens = configs[c].draft_tokens;
    e.spec_max_batch = std::max(e.spec_max_batch, streams);  // this bench measures speculation at every batch size asked
    auto engine = Engine::create(e);
    if (!engine) return std::fprintf(stderr, "bench_speculative: %s: %s\n", configs[c].name.c_str(), engine.message().c_str()), false;
    engines[c] = std::move(*engine);
    return true;
  };
  std::string model_name, backend;
  std::vector<std::vector<RoundResult>> results(configs.size());
  auto measure = [&](std::size_t c, int r) -> bool {  // round 0 warms caches and is not counted
    auto round = run_round(*engines[c], prompts, gen, streams);
    if (!round) return std::fprintf(stderr, "bench_speculative: %s: %s\n", configs[c].name.c_str(), round.message().c_str()), false;
    if (r > 0) results[c].push_back(std::move(*round));
    model_name = engines[c]->model_name();
    backend = engines[c]->backend_name();
    return true;
  };
  if (sequential) {
    for (std::size_t c = 0; c < configs.size(); ++c) {
      if (!open(c)) return 1;
      for (int r = 0; r < rounds + 1; ++r)
        if (!measure(c, r)) return 1;
      engines[c].reset();
    }
  } else {
    for (std::size_t c = 0; c < configs.size(); ++c)
      if (!open(c)) return 1;
    for (int r = 0; r < rounds + 1; ++r)
      for (std::size_t c = 0; c < configs.size(); ++c)
        if (!measure(c, r)) return 1;
  }

  std::printf("model %s, backend %s, kv %s, %d prompts of %d tokens, %d generated each, %d stream(s), median of %d rounds\n\n",
              model_name.c_str(), backend.c_str(), o.kv_codec.c_str(), n_prompts, prompt_len, gen, streams, rounds);
  std::printf("| drafting | draft tokens | decode tok/s | speed-up | CPU ms/token | speed-up (CPU) | acceptance | tokens/pass | same ids |\n"
              "|---|---|---|---|---|---|---|---|---|\n");
  std::string json_rows;
  double plain_tps = 0, plain_cpu = 0;
  for (std::size_t c = 0; c < configs.size(); ++c) {
    std::vector<double> tps, cpu, acc, tpp;
    for (const auto& r : results[c])
      tps.push_back(r.decode_tps), cpu.push_back(r.cpu_ms_per_token), acc.push_back(r.acceptance), tpp.push_back(r.tokens_per_pass);
    const double t = median(tps), cpu_ms = median(cpu);
    if (c == 0) plain_tps = t, plain_cpu = cpu_ms;
    const bool same = results[c].front().ids == results[0].front().ids;
    std::printf("| %s | %s | %.1f | %.2fx | %.3f | %.2fx | %.2f | %.2f | %s |\n", configs[c].name.c_str(),
                configs[c].draft_tokens ? std::to_string(configs[c].draft_tokens).c_str() : "-", t, plain_tps > 0 ? t / plain_tps : 0,
                cpu_ms, cpu_ms > 0 ? plain_cpu / cpu_ms : 0, median(acc), median(tpp), same ? "yes" : "NO");
    json_rows += std::string(json_rows.empty() ? "" : ",") + "{\"drafting\":" + json::quote(configs[c].name) +
                 ",\"draft_tokens\":" + std::to_string(configs[c].draft_tokens) + ",\"decode_tps\":" + std::to_string(t) + ",\"cpu_ms_per_token\":" + std::to_string(cpu_ms) +
                 ",\"acceptance\":" + std::to_string(median(acc)) + ",\"tokens_per_pass\":" + std::to_string(median(tpp)) +
                 ",\"same_ids\":" + (same ? "true" : "false") + "}";
  }
  if (json)
    std::printf("{\"bench\":\"speculative\",\"model\":%s,\"backend\":%s,\"kv_codec\":%s,\"prompts\":%d,\"prompt_len\":%d,\"gen\":%d,"
                "\"streams\":%d,\"rounds\":%d,\"rows\":[%s]}\n",
                json::quote(model_name).c_str(), json::quote(backend).c_str(), json::quote(o.kv_codec).c_str(),
                n_prompts, prompt_len, gen, streams, rounds, json_rows.c_str());
  for (auto& e : engines)
    if (e) e->shutdown();
  return 0;
}
