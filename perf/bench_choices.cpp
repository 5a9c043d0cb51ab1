// bench_choices: what sharing the prompt buys a request for n choices (GenerationRequest::n), against
// the same n sequences sent as n separate requests at once (what a client does without `n`).
// Per n: time until every sequence has its first token and until all are done, the prompt tokens the
// model ran (EngineMetrics::prefilled_tokens_total) and the most KV pages held at once. Each case
// uses a prompt of its own, so nothing comes from the prefix cache of an earlier case.
//
//   bench_choices --model DIR [--backend cpu] [--threads N] [--prompt 1000] [--gen 32] [--n 1,2,4,8] [--json]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <mutex>
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

struct Run {
  double first_token_ms = 0;  // until every sequence had its first token
  double total_ms = 0;
  uint64_t prefilled = 0;
  uint32_t peak_pages = 0;
};

// Submits `requests` (each with its n) at once; waits until every sequence of each has ended.
Run run(Engine& engine, std::vector<GenerationRequest> requests) {
  int sequences = 0;
  for (const auto& r : requests) sequences += r.n;
  std::mutex mu;
  std::vector<bool> started;
  int first_tokens = 0, done = 0;
  Clock::time_point first_all{}, end_all{};
  std::promise<void> finished;
  std::atomic<uint32_t> peak{0};
  const uint64_t prefilled_before = engine.metrics().prefilled_tokens_total;
  const auto t0 = Clock::now();
  int base = 0;
  for (auto& r : requests) {
    const int offset = base;
    base += r.n;
    started.resize(static_cast<std::size_t>(base), false);
    auto req = std::make_shared<GenerationRequest>(std::move(r));
    req->on_token = [&, offset](const TokenEvent& e) {
      std::lock_guard lock(mu);
      auto slot = started[static_cast<std::size_t>(offset + e.choice)];
      if (!slot) {
        started[static_cast<std::size_t>(offset + e.choice)] = true;
        if (++first_tokens == sequences) first_all = Clock::now();
      }
      peak = std::max(peak.load(), engine.metrics().kv_pages_in_use);
      return true;
    };
    req->on_done = [&](const GenerationResult&) {
      std::lock_guard lock(mu);
      if (++done == sequences) {
        end_all = Clock::now();
        finished.set_value();
      }
    };
    if (auto st = engine.submit(req); !st) {
      std::fprintf(stderr, "bench_choices: %s\n", st.message().c_str());
      std::exit(1);
    }
  }
  finished.get_future().wait();
  Run out;
  out.first_token_ms = std::chrono::duration<double, std::milli>(first_all - t0).count();
  out.total_ms = std::chrono::duration<double, std::milli>(end_all - t0).count();
  out.prefilled = engine.metrics().prefilled_tokens_total - prefilled_before;
  out.peak_pages = peak.load();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  EngineOptions o;
  o.backend = "cpu";
  int prompt = 1000, gen = 32;
  std::vector<int> ns = {1, 2, 4, 8};
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (perf::engine_option(a, next, o)) continue;
    if (a == "--prompt") prompt = std::stoi(next());
    else if (a == "--gen") gen = std::stoi(next());
    else if (a == "--n") ns = perf::int_list(next());
    else if (a == "--json") json = true;
    else {
      std::fprintf(stderr, "bench_choices: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (o.model_dir.empty()) {
    std::fprintf(stderr, "usage: bench_choices --model DIR [--backend B] [--threads N] [--prompt N] [--gen N] [--n 1,2,4] [--json]\n");
    return 2;
  }
  o.parallel = *std::max_element(ns.begin(), ns.end());
  o.ctx_size = prompt + gen + 64;
  auto engine = Engine::create(o);
  if (!engine) {
    std::fprintf(stderr, "bench_choices: %s\n", engine.message().c_str());
    return 1;
  }
  const int vocab = (*engine)->model_config().vocab_size;
  auto request = [&](int seed) {
    GenerationRequest r;
    r.prompt_ids = prompt_of(seed, prompt, vocab);
    r.max_tokens = gen;
    r.sampling.temperature = 0.8f;
    r.sampling.seed = 1;
    r.ignore_eos = true;
    return r;
  };
  (void)run(**engine, {request(999)});  // warm-up
  if (!json) {
    std::printf("%s, %s; prompt %d tokens, %d generated per sequence\n", (*engine)->model_name().c_str(),
                (*engine)->backend_name().c_str(), prompt, gen);
    std::printf("%3s | %-12s | %14s | %10s | %14s | %10s\n", "n", "sent as", "all first ms", "total ms", "prompt run", "peak pages");
  } else {
    std::printf("[");
  }
  int seed = 0;
  bool first_row = true;
  for (int n : ns) {
    GenerationRequest one = request(++seed);
    one.n = n;
    const Run shared = run(**engine, {one});
    std::vector<GenerationRequest> separate;
    const int separate_seed = ++seed;
    for (int i = 0; i < n; ++i) separate.push_back(request(separate_seed));
    const Run apart = run(**engine, separate);
    for (const auto& [label, r] : {std::pair<const char*, const Run&>{"n choices", shared}, {"n requests", apart}}) {
      if (json) {
        std::printf("%s{\"n\":%d,\"sent_as\":\"%s\",\"all_first_token_ms\":%.1f,\"total_ms\":%.1f,\"prompt_tokens_run\":%llu,"
                    "\"peak_kv_pages\":%u}",
                    first_row ? "" : ",", n, label, r.first_token_ms, r.total_ms, static_cast<unsigned long long>(r.prefilled),
                    r.peak_pages);
        first_row = false;
      } else {
        std::printf("%3d | %-12s | %14.1f | %10.1f | %14llu | %10u\n", n, label, r.first_token_ms, r.total_ms,
                    static_cast<unsigned long long>(r.prefilled), r.peak_pages);
      }
    }
  }
  if (json) std::printf("]\n");
  return 0;
}
