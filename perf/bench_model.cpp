// bench_model: prefill and decode throughput of a model on a backend, measured the way llama-bench
// measures (pp: a prompt of N tokens from an empty cache; tg: N tokens decoded one at a time from an
// empty cache), median of --reps runs. Prints a markdown row and, with --json, one JSON line.
// Decode streams every weight matrix once per token, so it also prints the weight bytes read per token,
// the bandwidth that makes at the measured decode rate, and this machine's memory bandwidth measured
// in the same run (--no-membw skips it) — the ceiling decode can approach.
//
//   bench_model --model DIR [--backend cpu] [--threads 2] [--kv-codec f16] [--pp 512] [--tg 128] [--reps 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_args.h"
#include "engine/runtime.h"
#include "util/memory_bandwidth.h"

using namespace sluice;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  EngineOptions o;
  o.backend = "cpu";
  o.kv_codec = "f16";
  int pp = 512, tg = 128, reps = 3;
  bool json = false, membw = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (perf::engine_option(a, next, o)) continue;
    if (a == "--pp") pp = std::stoi(next());
    else if (a == "--tg") tg = std::stoi(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--json") json = true;
    else if (a == "--no-membw") membw = false;
    else {
      std::fprintf(stderr, "bench_model: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (o.model_dir.empty()) {
    std::fprintf(stderr, "usage: bench_model --model DIR [--backend B] [--threads N] [--kv-codec C] [--pp N] [--tg N] [--reps R] [--json]\n");
    return 2;
  }
  o.prefill_size = std::max(pp, 1);
  o.ctx_size = pp + tg + 16;
  auto rt = Runtime::open(o, static_cast<uint32_t>(o.ctx_size));
  if (!rt) {
    std::fprintf(stderr, "bench_model: %s\n", rt.message().c_str());
    return 1;
  }
  const int vocab = (*rt)->config().vocab_size;
  std::vector<int32_t> prompt(pp);
  for (int i = 0; i < pp; ++i) prompt[i] = (i * 7919 + 13) % vocab;
  std::vector<float> logits;

  // One warm-up of each, then the measured repetitions.
  std::vector<double> pp_tps, tg_tps;
  for (int r = 0; r <= reps; ++r) {
    SequenceState seq;
    auto t = std::chrono::steady_clock::now();
    if (auto s = (*rt)->run(seq, prompt, false, logits); !s) {
      std::fprintf(stderr, "bench_model: %s\n", s.message().c_str());
      return 1;
    }
    const double pp_s = seconds_since(t);
    (*rt)->release(seq);
    int32_t token = 1;
    t = std::chrono::steady_clock::now();
    for (int i = 0; i < tg; ++i) {
      if (auto s = (*rt)->run(seq, std::span<const int32_t>(&token, 1), false, logits); !s) {
        std::fprintf(stderr, "bench_model: %s\n", s.message().c_str());
        return 1;
      }
      token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    const double tg_s = seconds_since(t);
    (*rt)->release(seq);
    if (r == 0) continue;
    pp_tps.push_back(pp / pp_s);
    tg_tps.push_back(tg / tg_s);
  }
  const double weight_mb = static_cast<double>((*rt)->model().weight_bytes()) / 1e6;
  const double token_mb = static_cast<double>((*rt)->model().decode_bytes_per_token()) / 1e6;
  const double decode_gbs = token_mb * median(tg_tps) / 1e3;
  const MemoryBandwidth bw = membw ? measure_memory_bandwidth(o.threads > 0 ? o.threads : 0) : MemoryBandwidth{};
  std::printf("| %s | %s | %s | pp%d | %.1f (%.1f–%.1f) | tg%d | %.1f (%.1f–%.1f) |\n", (*rt)->model_name().c_str(),
              (*rt)->backend().description().c_str(), (*rt)->kv().codec_description().c_str(), pp, median(pp_tps),
              *std::min_element(pp_tps.begin(), pp_tps.end()), *std::max_element(pp_tps.begin(), pp_tps.end()), tg,
              median(tg_tps), *std::min_element(tg_tps.begin(), tg_tps.end()), *std::max_element(tg_tps.begin(), tg_tps.end()));
  std::printf("weights %.1f MB; decode reads %.1f MB/token = %.2f GB/s at %.1f tokens/s", weight_mb, token_mb, decode_gbs,
              median(tg_tps));
  if (membw)
    std::printf("; memory: read %.2f GB/s, copy %.2f GB/s (decode at %.0f%% of read)", bw.read_gbs, bw.copy_gbs,
                100.0 * decode_gbs / bw.read_gbs);
  std::printf("\n");
  if (json)
    std::printf("{\"model\":\"%s\",\"backend\":\"%s\",\"kv_codec\":\"%s\",\"pp\":%d,\"prefill_tps\":%.2f,\"tg\":%d,\"decode_tps\":%.2f,"
                "\"weight_mb\":%.2f,\"decode_mb_per_token\":%.2f,\"decode_gbs\":%.3f,\"mem_read_gbs\":%.3f,\"mem_copy_gbs\":%.3f,"
                "\"reps\":%d}\n",
                (*rt)->model_name().c_str(), (*rt)->backend().description().c_str(), (*rt)->kv().codec_description().c_str(), pp,
                median(pp_tps), tg, median(tg_tps), weight_mb, token_mb, decode_gbs, bw.read_gbs, bw.copy_gbs, reps);
  return 0;
}
