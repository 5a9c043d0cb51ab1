// bench_depth: prefill (pp) and decode (tg) throughput at several context depths, as llama-bench's
// `-d` measures them: the cache is first filled with `depth` tokens (untimed), then `tg` single-token
// forward passes are timed from there, then the sequence is rewound to `depth` and a `pp`-token
// forward pass is timed. Prints one markdown row per depth and, with --json, one JSON line each.
//   bench_depth --model DIR [--backend opencl] [--kv-codec f16] [--depths 0,8192,32768] [--pp 512] [--tg 64]
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/runtime.h"

using namespace sluice;

int main(int argc, char** argv) {
  EngineOptions o;
  o.backend = "auto";
  o.kv_codec = "f16";
  std::vector<int> depths = {0};
  int pp = 512, tg = 64;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") o.model_dir = next();
    else if (a == "--backend") o.backend = next();
    else if (a == "--kv-codec") o.kv_codec = next();
    else if (a == "--plugin-dir") o.plugin_dir = next();
    else if (a == "--threads") o.threads = std::stoi(next());
    else if (a == "--pp") pp = std::stoi(next());
    else if (a == "--tg") tg = std::stoi(next());
    else if (a == "--json") json = true;
    else if (a == "--depths") {
      depths.clear();
      std::stringstream ss(next());
      for (std::string d; std::getline(ss, d, ',');) depths.push_back(std::stoi(d));
    } else {
      std::fprintf(stderr, "usage: bench_depth --model DIR [--backend B] [--kv-codec C] [--depths 0,8192] [--pp N] [--tg N] [--json]\n");
      return 2;
    }
  }
  int max_depth = 0;
  for (int d : depths) max_depth = std::max(max_depth, d);
  o.ctx_size = max_depth + std::max(pp, tg) + 16;
  o.prefill_size = pp;
  auto rt = Runtime::open(o);
  if (!rt) {
    std::fprintf(stderr, "bench_depth: %s\n", rt.message().c_str());
    return 1;
  }
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> id(0, (*rt)->config().vocab_size - 1);
  using Clock = std::chrono::steady_clock;
  std::printf("| model | backend | kv | depth | pp%d tokens/s | tg%d tokens/s |\n| --- | --- | --- | --- | --- | --- |\n", pp, tg);
  for (int depth : depths) {
    SequenceState seq;
    std::vector<float> logits;
    std::vector<int32_t> fill(static_cast<std::size_t>(depth));
    for (auto& t : fill) t = id(rng);
    if (depth > 0 && !(*rt)->run(seq, fill, false, logits)) {
      std::fprintf(stderr, "bench_depth: fill failed\n");
      return 1;
    }
    // Decode: tg single tokens from `depth`.
    std::vector<int32_t> one(1, id(rng));
    if (auto s = (*rt)->run(seq, one, false, logits); !s) {  // warm-up (programs built, buffers sized)
      std::fprintf(stderr, "bench_depth: %s\n", s.message().c_str());
      return 1;
    }
    seq.n_past = depth;
    auto t0 = Clock::now();
    for (int i = 0; i < tg; ++i) {
      one[0] = id(rng);
      if (auto s = (*rt)->run(seq, one, false, logits); !s) {
        std::fprintf(stderr, "bench_depth: decode failed: %s\n", s.message().c_str());
        return 1;
      }
    }
    const double tg_s = std::chrono::duration<double>(Clock::now() - t0).count();
    // Prefill: pp tokens at `depth` (one warm-up pass, then the timed one).
    std::vector<int32_t> prompt(static_cast<std::size_t>(pp));
    for (auto& t : prompt) t = id(rng);
    seq.n_past = depth;
    if (auto s = (*rt)->run(seq, prompt, false, logits); !s) {
      std::fprintf(stderr, "bench_depth: %s\n", s.message().c_str());
      return 1;
    }
    seq.n_past = depth;
    t0 = Clock::now();
    if (auto s = (*rt)->run(seq, prompt, false, logits); !s) {
      std::fprintf(stderr, "bench_depth: prefill failed: %s\n", s.message().c_str());
      return 1;
    }
    const double pp_s = std::chrono::duration<double>(Clock::now() - t0).count();
    (*rt)->release(seq);
    std::printf("| %s | %s | %s | %d | %.1f | %.1f |\n", (*rt)->model_name().c_str(), (*rt)->backend().description().c_str(),
                o.kv_codec.c_str(), depth, pp / pp_s, tg / tg_s);
    if (json)
      std::printf("{\"model\":\"%s\",\"depth\":%d,\"pp\":%d,\"prefill_tps\":%.2f,\"tg\":%d,\"decode_tps\":%.2f}\n",
                  (*rt)->model_name().c_str(), depth, pp, pp / pp_s, tg, tg / tg_s);
    std::fflush(stdout);
  }
  return 0;
}
