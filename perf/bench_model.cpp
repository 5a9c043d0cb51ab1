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
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "engine/runtime.h"
#include "model/safetensors.h"
#include "util/vec.h"

using namespace sluice;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Bytes of weights one decode step reads: every tensor but the embedding table, of which a lookup reads
// one row — unless the output projection is tied to it, when it is read whole.
uint64_t weight_bytes_per_token(const std::string& dir, bool tied) {
  auto set = SafetensorsSet::open_dir(dir);
  if (!set) return 0;
  uint64_t bytes = 0;
  for (const auto& [name, t] : set->tensors())
    if (tied || name.rfind("model.embed_tokens.", 0) != 0) bytes += t.bytes;
  return bytes;
}

// Memory bandwidth on n threads (best of 5): streaming reads of a 512 MiB array (the decode access
// pattern) and memcpy (bytes read + written).
struct Bandwidth {
  double read_gbs = 0, copy_gbs = 0;
};
Bandwidth measure_bandwidth(unsigned n_threads) {
  const std::size_t n = (512u << 20) / 4;
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  std::vector<float> sums(n_threads);
  Bandwidth bw;
  for (int rep = 0; rep < 5; ++rep) {
    auto t = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (unsigned k = 0; k < n_threads; ++k)
      threads.emplace_back([&, k] {
        const std::size_t lo = n * k / n_threads, hi = n * (k + 1) / n_threads;
        sums[k] = cpu::dot_f32(a.data() + lo, a.data() + lo, hi - lo);  // one vector stream
      });
    for (auto& th : threads) th.join();
    bw.read_gbs = std::max(bw.read_gbs, n * 4 / seconds_since(t) / 1e9);
    threads.clear();
    t = std::chrono::steady_clock::now();
    for (unsigned k = 0; k < n_threads; ++k)
      threads.emplace_back([&, k] {
        const std::size_t lo = n * k / n_threads, hi = n * (k + 1) / n_threads;
        std::memcpy(b.data() + lo, a.data() + lo, (hi - lo) * 4);
      });
    for (auto& th : threads) th.join();
    bw.copy_gbs = std::max(bw.copy_gbs, 2.0 * n * 4 / seconds_since(t) / 1e9);
  }
  if (sums[0] == 42.0f) std::printf(" ");  // keep the reads
  return bw;
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
  const double token_mb = weight_bytes_per_token(o.model_dir, (*rt)->config().tie_word_embeddings) / 1e6;
  const double decode_gbs = token_mb * median(tg_tps) / 1e3;
  const Bandwidth bw = membw ? measure_bandwidth(o.threads > 0 ? o.threads : std::thread::hardware_concurrency()) : Bandwidth{};
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
