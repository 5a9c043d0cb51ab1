// bench_kv_decode: decode tokens/s at a given KV depth, per KV codec — the cost of attention over a
// long history, compressed or not. For each depth: a prompt of `depth` tokens is prefilled once,
// then --reps times `tg` tokens are decoded one at a time from that history (each attends to
// depth + i positions); prints the median (min–max) tokens/s and the KV KiB per token.
//
//   bench_kv_decode --model DIR [--kv-codec f16] [--depths 512,2048,8192] [--tg 64] [--threads 2] [--reps 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.h"
#include "engine/runtime.h"

using namespace sluice;

int main(int argc, char** argv) {
  EngineOptions o;
  o.backend = "cpu";
  o.kv_codec = "f16";
  std::vector<int> depths = {512, 2048, 8192};
  int tg = 64, reps = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (perf::engine_option(a, next, o)) continue;
    if (a == "--tg") tg = std::stoi(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--depths") {
      depths = perf::int_list(next());
    } else {
      std::fprintf(stderr, "bench_kv_decode: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (o.model_dir.empty() || depths.empty() || tg < 1 || reps < 1) {
    std::fprintf(stderr, "usage: bench_kv_decode --model DIR [--kv-codec C] [--depths 512,2048] [--tg N] [--threads N] [--reps R]\n");
    return 2;
  }
  const int max_depth = *std::max_element(depths.begin(), depths.end());
  o.ctx_size = max_depth + tg + 16;
  auto rt = Runtime::open(o, static_cast<uint32_t>(o.ctx_size));
  if (!rt) {
    std::fprintf(stderr, "bench_kv_decode: %s\n", rt.message().c_str());
    return 1;
  }
  const int vocab = (*rt)->config().vocab_size;
  std::vector<float> logits;
  for (int depth : depths) {
    std::vector<int32_t> prompt(static_cast<std::size_t>(depth));
    for (int i = 0; i < depth; ++i) prompt[static_cast<std::size_t>(i)] = (i * 7919 + 13) % vocab;
    std::vector<double> tps;
    SequenceState seq;
    if (auto s = (*rt)->run(seq, prompt, false, logits); !s) {
      std::fprintf(stderr, "bench_kv_decode: %s\n", s.message().c_str());
      return 1;
    }
    for (int r = 0; r < reps; ++r) {
      seq.n_past = depth;  // decode again from the same history (the positions past it are rewritten)
      int32_t token = 1;
      const auto t = std::chrono::steady_clock::now();
      for (int i = 0; i < tg; ++i) {
        if (auto s = (*rt)->run(seq, std::span<const int32_t>(&token, 1), false, logits); !s) {
          std::fprintf(stderr, "bench_kv_decode: %s\n", s.message().c_str());
          return 1;
        }
        token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
      tps.push_back(tg / std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
    }
    (*rt)->release(seq);
    std::sort(tps.begin(), tps.end());
    std::printf("| %s | %s | %.2f | %d | %d | %.1f (%.1f–%.1f) |\n", (*rt)->model_name().c_str(),
                (*rt)->kv().codec_description().c_str(), (*rt)->kv().bytes_per_token() / 1024.0, depth, tg,
                tps[tps.size() / 2], tps.front(), tps.back());
    std::fflush(stdout);
  }
  return 0;
}
