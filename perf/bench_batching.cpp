// bench_batching: what continuous batching and prefix reuse buy.
//  1. Aggregate decode tokens/s with 1, 2, 4, 8 and 16 concurrent greedy streams (each its own prompt).
//  2. Time to first token of a 2000-token prompt, cold and with its first 1900 tokens cached.
//
//   bench_batching --model DIR [--backend cpu] [--threads N] [--gen 64] [--streams 1,2,4,8,16] [--json] [--no-prefix]
// (--no-prefix: only part 1)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.h"
#include "engine/engine.h"
#include "model/model_config.h"

using namespace sluice;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<int32_t> prompt_of(int seed, int length, int vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < length; ++i) ids.push_back(100 + (seed * 977 + i * 131) % (vocab - 200));
  return ids;
}

GenerationRequest greedy(std::vector<int32_t> prompt, int n) {
  GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = n;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  EngineOptions o;
  o.backend = "cpu";
  int gen = 64;
  std::vector<int> streams = {1, 2, 4, 8, 16};
  bool json = false, prefix = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (perf::engine_option(a, next, o)) continue;
    if (a == "--gen") gen = std::stoi(next());
    else if (a == "--json") json = true;
    else if (a == "--no-prefix") prefix = false;
    else if (a == "--streams") {
      streams = perf::int_list(next());
    } else {
      std::fprintf(stderr, "bench_batching: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (o.model_dir.empty()) {
    std::fprintf(stderr, "usage: bench_batching --model DIR [--backend B] [--threads N] [--gen N] [--streams 1,2,4] [--json]\n");
    return 2;
  }

  std::printf("| streams | aggregate decode tok/s | per stream tok/s |\n| --- | --- | --- |\n");
  std::string rows;
  for (int n : streams) {
    EngineOptions eo = o;
    eo.parallel = n;
    eo.ctx_size = 512;
    auto engine = Engine::create(eo);
    if (!engine) {
      std::fprintf(stderr, "bench_batching: %s\n", engine.message().c_str());
      return 1;
    }
    const int vocab = (*engine)->model_config().vocab_size;
    (*engine)->generate(greedy(prompt_of(999, 32, vocab), 8));  // warm-up
    std::vector<std::future<GenerationResult>> futures;
    const auto t0 = Clock::now();
    for (int s = 0; s < n; ++s)
      futures.push_back(std::async(std::launch::async, [&, s] { return (*engine)->generate(greedy(prompt_of(s, 32, vocab), gen)); }));
    int tokens = 0;
    double decode_ms_max = 0;
    for (auto& f : futures) {
      auto r = f.get();
      tokens += static_cast<int>(r.ids.size());
      decode_ms_max = std::max(decode_ms_max, r.stats.decode_ms);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const double aggregate = tokens / seconds;
    std::printf("| %d | %.1f | %.1f |\n", n, aggregate, aggregate / n);
    rows += (rows.empty() ? "" : ",") + std::string("{\"streams\":") + std::to_string(n) + ",\"aggregate_tps\":" + std::to_string(aggregate) + "}";
  }

  if (!prefix) return 0;
  // Prefix reuse: 1900 shared tokens, then 100 of each request's own.
  EngineOptions eo = o;
  eo.ctx_size = 2048;
  eo.parallel = 1;
  auto engine = Engine::create(eo);
  if (!engine) return 1;
  const int vocab = (*engine)->model_config().vocab_size;
  const auto shared = prompt_of(7, 1900, vocab);
  double cold_ms = 0, warm_ms = 0;
  int cached = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto make = [&](int tail_seed) {
      auto p = shared;
      p[0] = 100 + rep;  // a different first token per repetition: the cold run really is cold
      auto tail = prompt_of(tail_seed, 100, vocab);
      p.insert(p.end(), tail.begin(), tail.end());
      return p;
    };
    auto t = Clock::now();
    (*engine)->generate(greedy(make(rep * 2 + 1), 1));
    cold_ms += std::chrono::duration<double, std::milli>(Clock::now() - t).count();
    t = Clock::now();
    auto warm = (*engine)->generate(greedy(make(rep * 2 + 2), 1));
    warm_ms += std::chrono::duration<double, std::milli>(Clock::now() - t).count();
    cached = warm.stats.cached_tokens;
  }
  std::printf("\nTTFT, 2000-token prompt: cold %.1f ms, 1900 cached %.1f ms (%d tokens reused), %.1fx faster\n", cold_ms / 3,
              warm_ms / 3, cached, cold_ms / warm_ms);
  if (json)
    std::printf("{\"streams\":[%s],\"ttft_cold_ms\":%.2f,\"ttft_cached_ms\":%.2f,\"cached_tokens\":%d}\n", rows.c_str(), cold_ms / 3,
                warm_ms / 3, cached);
  return 0;
}
