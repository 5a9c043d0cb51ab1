// bench_depth: prefill (pp) and decode (tg) throughput at several context depths, as llama-bench's
// `-d` measures them: the cache is first filled with `depth` tokens (untimed), then `tg` single-token
// forward passes are timed from there, then the sequence is rewound to `depth` and a `pp`-token
// forward pass is timed. Prints one markdown row per depth and, with --json, one JSON line each.
// --reps N times each N times (the sequence rewound to `depth` before each) and reports their mean and
// sample standard deviation, as llama-bench's -r does (the anchors' figures are such means).
//   bench_depth --model DIR [--backend opencl] [--backend-options OPTS] [--kv-codec f16] [--depths 0,8192,32768] [--pp 512]
//               [--tg 64] [--reps 5]
// The fill writes random K/V into the cache directly (--fill random, the default: decode speed does
// not depend on the values) or runs the model over random tokens (--fill forward).
// Decode runs as the engine runs a greedy request: where the backend queues its ops, a token ahead
// (engine/greedy_ahead.h: each step's token is the step before's choice, left on the device, and the
// host issues the next step before it reads that choice back); elsewhere, or with --decode-ahead off,
// each step's logits come to the host before the next step (its token then random, as llama-bench's).
// --ahead-steps N (1 or 2; default the engine's, GreedyAhead::kStepsAhead) keeps N steps queued behind
// the one being read back: a measure of whether the host's pauses between tokens reach the device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.h"
#include "graph/step_graph.h"
#include "engine/greedy_ahead.h"
#include "engine/runtime.h"

using namespace sluice;

namespace {

// Fills positions [0, depth) of `seq` with random K/V written straight into every layer of the
// cache, without forward passes: decode speed depends on how much KV there is, not on its values,
// and filling 32768 positions through prefill takes minutes on a backend with quadratic prefill
// attention. The recent window's pages are assigned as a real prefill would.
Status fill_random(Runtime& rt, SequenceState& seq, int depth, std::mt19937& rng) {
  const auto& cfg = rt.config();
  const BackendHandle& be = rt.backend();
  const int chunk = std::max(1, rt.options().prefill_size);  // the recent pool is sized for one such batch
  const std::size_t row = static_cast<std::size_t>(cfg.num_kv_heads) * cfg.head_dim;
  std::normal_distribution<float> n01;
  std::vector<float> k(chunk * row), v(chunk * row);
  for (auto& x : k) x = n01(rng);
  for (auto& x : v) x = n01(rng);
  auto dk = be.alloc(k.size() * 4), dv = be.alloc(v.size() * 4);
  if (!dk) return dk.error();
  if (!dv) return dv.error();
  if (auto s = be.upload(*dk, 0, k.data(), k.size() * 4); !s) return s;
  if (auto s = be.upload(*dv, 0, v.data(), v.size() * 4); !s) return s;
  for (int start = 0; start < depth; start += chunk) {
    const int n = std::min(chunk, depth - start);
    if (auto s = rt.ensure_pages(seq, start + n); !s) return s;
    if (auto s = rt.kv().update_recent(seq.recent, 0, start, start + n); !s) return s;
    ForwardBatch tables;  // the page, window and recent tables as a real pass has them
    const SequenceKv* one[] = {&seq};
    rt.kv().fill_batch(one, tables);
    std::vector<int32_t> positions(n), slots(n, 0);
    for (int i = 0; i < n; ++i) positions[i] = start + i;
    sl_batch b{};
    b.struct_size = sizeof(b);
    b.n_tokens = static_cast<uint32_t>(n);
    b.positions = positions.data();
    b.seq_slots = slots.data();
    b.n_seqs = 1;
    b.max_pages = tables.max_pages;
    b.page_table = tables.page_table.data();
    b.recent_table = tables.recent_table.empty() ? nullptr : tables.recent_table.data();
    b.window_table = tables.window_table.empty() ? nullptr : tables.window_table.data();
    b.state_slots = tables.state_slots.empty() ? nullptr : tables.state_slots.data();
    // One graph of a KV_WRITE per layer that keeps K and V.
    StepGraph g;
    const StepGraph::Id kt = g.buffer(dk->get(), static_cast<uint32_t>(n), static_cast<uint32_t>(row));
    const StepGraph::Id vt = g.buffer(dv->get(), static_cast<uint32_t>(n), static_cast<uint32_t>(row));
    for (uint32_t layer = 0; layer < static_cast<uint32_t>(cfg.num_layers); ++layer)
      if (rt.kv().layer_kind(layer) != SL_KV_STATE) g.kv_write(kt, vt, layer, "kv_write");
    sl_step step{};
    step.struct_size = sizeof(step);
    step.batch = &b;
    step.cache = rt.kv().raw();
    if (auto s = be.compute(g.view(), step); !s) return s;
    seq.n_past = start + n;
    if (auto s = rt.kv().passed(seq, seq.n_past); !s) return s;
    rt.kv().trim_window(seq);
  }
  return be.synchronize();
}

// Tokens a second of each timed run: their mean and sample standard deviation (0 for one run).
struct Rate {
  double mean = 0, sd = 0;
  std::string text() const {  // "312.4" or "312.4 ± 1.8"
    char b[64];
    if (sd > 0) std::snprintf(b, sizeof b, "%.1f ± %.1f", mean, sd);
    else std::snprintf(b, sizeof b, "%.1f", mean);
    return b;
  }
};

Rate rate_of(const std::vector<double>& tps) {
  Rate r;
  for (double v : tps) r.mean += v;
  r.mean /= static_cast<double>(tps.size());
  if (tps.size() > 1) {
    double ss = 0;
    for (double v : tps) ss += (v - r.mean) * (v - r.mean);
    r.sd = std::sqrt(ss / static_cast<double>(tps.size() - 1));
  }
  return r;
}

std::string json_list(const std::vector<double>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    char b[32];
    std::snprintf(b, sizeof b, "%s%.2f", i ? "," : "", v[i]);
    out += b;
  }
  return out + "]";
}

}  // namespace

int main(int argc, char** argv) {
  EngineOptions o;
  o.backend = "auto";
  o.kv_codec = "f16";
  std::vector<int> depths = {0};
  int pp = 512, tg = 64, reps = 1, ahead_steps = GreedyAhead::kStepsAhead;
  bool json = false, fill_forward = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (perf::engine_option(a, next, o)) continue;
    if (a == "--pp") pp = std::stoi(next());
    else if (a == "--tg") tg = std::stoi(next());
    else if (a == "--reps") reps = std::max(1, std::stoi(next()));
    else if (a == "--json") json = true;
    else if (a == "--ahead-steps") ahead_steps = std::clamp(std::stoi(next()), 1, 2);
    else if (a == "--fill") fill_forward = next() == "forward";
    else if (a == "--depths") {
      depths = perf::int_list(next());
    } else {
      std::fprintf(stderr,
                   "usage: bench_depth --model DIR [--backend B] [--backend-options OPTS] [--kv-codec C] [--kv-recent N] [--depths 0,8192]\n"
                   "                   [--pp N] [--tg N] [--reps N] [--fill random|forward] [--decode-ahead auto|on|off] [--ahead-steps 1|2] [--json]\n");
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
  const bool ahead = GreedyAhead::available(**rt);
  std::printf("| model | backend | kv | depth | pp%d tokens/s | tg%d tokens/s%s |\n| --- | --- | --- | --- | --- | --- |\n", pp, tg,
              ahead ? " (greedy, a token ahead)" : "");
  // tg steps from seq.n_past, each one's token known to the host before the loop goes on.
  auto decode = [&](SequenceState& seq, int steps) -> Status {
    if (!ahead) {
      std::vector<float> logits;
      std::vector<int32_t> one(1);
      for (int i = 0; i < steps; ++i) {
        one[0] = id(rng);
        if (auto s = (*rt)->run(seq, one, false, logits); !s) return s;
      }
      return {};
    }
    GreedyAhead greedy(**rt, seq, seq.n_past);
    if (auto s = greedy.issue(id(rng)); !s) return s;
    int issued = 1;
    for (int i = 0; i < steps; ++i) {
      while (issued < steps && greedy.in_flight() <= ahead_steps) {
        if (auto s = greedy.issue_next(); !s) return s;
        ++issued;
      }
      if (auto t = greedy.take(); !t) return t.error();
    }
    seq.n_past = greedy.next_position();
    return {};
  };
  for (int depth : depths) {
    SequenceState seq;
    std::vector<float> logits;
    std::vector<int32_t> fill(static_cast<std::size_t>(depth));
    for (auto& t : fill) t = id(rng);
    if (depth > 0) {
      auto filled = fill_forward ? (*rt)->run(seq, fill, false, logits) : fill_random(**rt, seq, depth, rng);
      if (!filled) {
        std::fprintf(stderr, "bench_depth: fill failed: %s\n", filled.message().c_str());
        return 1;
      }
    }
    // Decode: tg single tokens from `depth`.
    // Warm-up: programs built, buffers sized, and a GPU brought to its working clocks — after loading,
    // the device sat idle, and on the H100 one warm-up token left the first timed decode anywhere
    // between 191 and 259 tokens/s (perf/results/fused_decode_gpu/run10); 16 tokens of work steady it.
    if (auto s = decode(seq, 16); !s) {
      std::fprintf(stderr, "bench_depth: %s\n", s.message().c_str());
      return 1;
    }
    std::vector<double> tg_tps;
    for (int rep = 0; rep < reps; ++rep) {
      seq.n_past = depth;
      const auto t0 = Clock::now();
      if (auto s = decode(seq, tg); !s) {
        std::fprintf(stderr, "bench_depth: decode failed: %s\n", s.message().c_str());
        return 1;
      }
      tg_tps.push_back(tg / std::chrono::duration<double>(Clock::now() - t0).count());
    }
    // Prefill: pp tokens at `depth` (one warm-up pass, then the timed one).
    std::vector<int32_t> prompt(static_cast<std::size_t>(pp));
    for (auto& t : prompt) t = id(rng);
    seq.n_past = depth;
    if (auto s = (*rt)->run(seq, prompt, false, logits); !s) {
      std::fprintf(stderr, "bench_depth: %s\n", s.message().c_str());
      return 1;
    }
    std::vector<double> pp_tps;
    for (int rep = 0; rep < reps; ++rep) {
      seq.n_past = depth;
      const auto t0 = Clock::now();
      if (auto s = (*rt)->run(seq, prompt, false, logits); !s) {
        std::fprintf(stderr, "bench_depth: prefill failed: %s\n", s.message().c_str());
        return 1;
      }
      pp_tps.push_back(pp / std::chrono::duration<double>(Clock::now() - t0).count());
    }
    (*rt)->release(seq);
    const Rate pp_rate = rate_of(pp_tps), tg_rate = rate_of(tg_tps);
    std::printf("| %s | %s | %s (%u exact) | %d | %s | %s |\n", (*rt)->model_name().c_str(), (*rt)->backend().description().c_str(),
                o.kv_codec.c_str(), (*rt)->kv().recent_window(), depth, pp_rate.text().c_str(), tg_rate.text().c_str());
    if (json)
      std::printf("{\"model\":\"%s\",\"kv\":\"%s\",\"kv_recent\":%u,\"kv_bytes_per_token\":%.1f,\"depth\":%d,\"pp\":%d,"
                  "\"prefill_tps\":%.2f,\"prefill_tps_sd\":%.2f,\"tg\":%d,\"decode_tps\":%.2f,\"decode_tps_sd\":%.2f,"
                  "\"reps\":%d,\"decode_ahead\":%s,\"prefill_tps_each\":%s,\"decode_tps_each\":%s}\n",
                  (*rt)->model_name().c_str(), o.kv_codec.c_str(), (*rt)->kv().recent_window(), (*rt)->kv().bytes_per_token(), depth,
                  pp, pp_rate.mean, pp_rate.sd, tg, tg_rate.mean, tg_rate.sd, reps, ahead ? "true" : "false", json_list(pp_tps).c_str(),
                  json_list(tg_tps).c_str());
    std::fflush(stdout);
  }
  return 0;
}
