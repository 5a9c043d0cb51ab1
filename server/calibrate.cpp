#include "server/calibrate.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "engine/engine.h"
#include "model/model_config.h"
#include "server/disk_read.h"
#include "server/options.h"

namespace sluice::server {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Random prompt tokens (ids 100.. below the vocabulary), different for every seed: no two measured
// prompts share a cached prefix.
std::vector<int32_t> prompt_tokens(std::size_t n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(std::min(100, vocab - 1), vocab - 1);
  std::vector<int32_t> out(n);
  for (auto& t : out) t = id(rng);
  return out;
}

GenerationRequest fixed_length(std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

// Prompt tokens per second of one long prompt, prefilled in chunks of `chunk` (best of two: the
// first also warms the backend's buffers and kernels).
Result<double> prefill_rate(const ServerOptions& base, int chunk, uint32_t seed) {
  EngineOptions e = to_engine_options(base);
  e.prefill_size = chunk;
  e.parallel = 1;
  auto engine = Engine::create(e);
  if (!engine) return engine.error();
  const int length = std::min(2048, (*engine)->context_size() / 2);
  double best = 0;
  for (uint32_t run = 0; run < 2; ++run) {
    auto r = (*engine)->generate(fixed_length(prompt_tokens(static_cast<std::size_t>(length), (*engine)->model_config().vocab_size, seed + run), 1));
    if (r.finish == FinishReason::kError) return make_error("prefill at chunk " + std::to_string(chunk) + ": " + r.error);
    best = std::max(best, r.stats.prefill_tps());
  }
  return best;
}

}  // namespace

double measure_host_read_gbps(std::size_t buffer_bytes, int passes) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<uint64_t> data(buffer_bytes / sizeof(uint64_t), 1);  // written: every page resident before timing
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = Clock::now();
    std::vector<std::thread> workers;
    const std::size_t per = data.size() / threads;
    for (unsigned t = 0; t < threads; ++t)
      workers.emplace_back([&, t] {
        const uint64_t* p = data.data() + t * per;
        uint64_t a = 0, b = 0, c = 0, d = 0;  // four chains: the loads, not one adder, set the pace
        for (std::size_t i = 0; i + 4 <= per; i += 4) a += p[i], b += p[i + 1], c += p[i + 2], d += p[i + 3];
        sink += a + b + c + d;
      });
    for (auto& w : workers) w.join();
    const double s = seconds_since(t0);
    if (s > 0) best = std::max(best, static_cast<double>(per * threads * sizeof(uint64_t)) / s / 1e9);
  }
  return sink.load() ? best : 0;
}

Result<CalibratedPlan> calibrate(const ServerOptions& options, const std::function<void(const std::string&)>& progress) {
  CalibratedPlan plan;
  plan.model_key = model_key(options.model);
  plan.machine_key = machine_key(options);
  plan.machine = machine_description();
  plan.model = fs::path(options.model).filename().string();

  plan.host_read_gbps = measure_host_read_gbps(256u << 20, 5);
  progress(fmt::format("host memory read: {:.1f} GB/s ({} threads)", plan.host_read_gbps, std::thread::hardware_concurrency()));
  DiskReadOptions disk_options;
  if (options.ssd_prefetch > 0) disk_options.queue_depth = static_cast<unsigned>(options.ssd_prefetch);
  const DiskRead disk = measure_disk_read(options.model, disk_options);
  plan.disk_read_gbps = disk.gbps;
  plan.disk_direct = disk.direct;
  progress(fmt::format("model files read: {:.2f} GB/s ({}, {})", disk.gbps, disk.direct ? "O_DIRECT" : "buffered: the file system refuses O_DIRECT",
                       disk.uring ? fmt::format("io_uring, {} reads in flight", disk.queue_depth) : std::string("pread, one read at a time: no io_uring")));

  // Prefill in chunks of a few sizes; the smallest within 10% of the fastest is chosen: a smaller
  // chunk lets the other sequences' decode steps in sooner.
  uint32_t seed = 1;
  double best_prefill = 0;
  for (int chunk : {128, 256, 512}) {
    auto rate = prefill_rate(options, chunk, seed += 2);
    if (!rate) return rate.error();
    plan.prefill.push_back({chunk, *rate});
    best_prefill = std::max(best_prefill, *rate);
    progress(fmt::format("prefill, chunks of {}: {:.0f} tokens/s", chunk, *rate));
  }
  for (const auto& p : plan.prefill)
    if (p.prefill_tps >= 0.9 * best_prefill) {
      plan.prefill_size = p.chunk;
      break;
    }

  // Decode at batches of 1..8 sequences: every sequence's tokens over the slowest one's decode time.
  EngineOptions e = to_engine_options(options);
  e.parallel = 8;
  e.prefill_size = plan.prefill_size;
  auto engine = Engine::create(e);
  if (!engine) return engine.error();
  plan.device = (*engine)->backend_name();
  const int vocab = (*engine)->model_config().vocab_size;
  const uint64_t weight_bytes = (*engine)->metrics().weight_bytes;
  // A first request warms what a backend sets up on first use (buffers, kernels, thread pool).
  if (auto r = (*engine)->generate(fixed_length(prompt_tokens(32, vocab, seed + 50), 8)); r.finish == FinishReason::kError)
    return make_error("decode: " + r.error);
  for (int batch : {1, 2, 4, 8}) {
    std::vector<std::future<GenerationResult>> runs;
    for (int i = 0; i < batch; ++i)
      runs.push_back(std::async(std::launch::async, [&, i] {
        return (*engine)->generate(fixed_length(prompt_tokens(32, vocab, seed + 100 + static_cast<uint32_t>(i)), 48));
      }));
    seed += 16;
    int tokens = 0;
    double slowest_ms = 0;
    for (auto& run : runs) {
      GenerationResult r = run.get();
      if (r.finish == FinishReason::kError) return make_error("decode at batch " + std::to_string(batch) + ": " + r.error);
      tokens += std::max(0, r.stats.completion_tokens - 1);
      slowest_ms = std::max(slowest_ms, r.stats.decode_ms);
    }
    const double tps = slowest_ms > 0 ? tokens * 1000.0 / slowest_ms : 0;
    plan.decode.push_back({batch, tps});
    progress(fmt::format("decode, {} sequence{}: {:.0f} tokens/s together", batch, batch > 1 ? "s" : "", tps));
  }
  (*engine)->shutdown();
  engine->reset();
  // --gpu-layers auto: what fits the device against no layer there, decoding one sequence.
  if (options.gpu_layers == "auto") {
    auto decode_rate = [&](const std::string& layers, int& offloaded) -> Result<double> {
      EngineOptions g = to_engine_options(options);
      g.gpu_layers = layers;
      g.parallel = 1;
      auto one = Engine::create(g);
      if (!one) return one.error();
      offloaded = static_cast<int>((*one)->metrics().offloaded_layers);
      (*one)->generate(fixed_length(prompt_tokens(32, vocab, seed + 200), 8));  // warm-up
      auto r = (*one)->generate(fixed_length(prompt_tokens(32, vocab, seed + 201), 48));
      if (r.finish == FinishReason::kError) return make_error("decode with --gpu-layers " + layers + ": " + r.error);
      return r.stats.decode_tps();
    };
    int fitted = 0, none = 0;
    auto offloaded = decode_rate("auto", fitted);
    if (!offloaded) return offloaded.error();
    auto cpu_only = decode_rate("0", none);
    if (!cpu_only) return cpu_only.error();
    plan.gpu_layers_decode_tps = *offloaded;
    plan.cpu_only_decode_tps = *cpu_only;
    plan.gpu_layers = *offloaded >= *cpu_only ? fitted : 0;
    progress(fmt::format("decode with {} layers offloaded (what fits): {:.0f} tokens/s; with none: {:.0f} tokens/s", fitted,
                         *offloaded, *cpu_only));
  }
  // A step at batch 1 reads every weight once: its rate is the backend's effective read bandwidth.
  if (!plan.decode.empty() && plan.decode.front().decode_tps > 0)
    plan.weight_read_gbps = static_cast<double>(weight_bytes) * plan.decode.front().decode_tps / 1e9;
  // More slots while a doubling still gives at least a quarter more tokens a second.
  plan.parallel = 1;
  double chosen_tps = plan.decode.empty() ? 0 : plan.decode.front().decode_tps;
  for (const auto& d : plan.decode)
    if (d.batch > plan.parallel && d.decode_tps >= 1.25 * chosen_tps) {
      plan.parallel = d.batch;
      chosen_tps = d.decode_tps;
    }
  // Streamed experts: the cache may take half of the memory available now (as --stream-experts
  // derives it), recorded so later starts need not guess.
  if (options.stream_experts && options.expert_cache_mb == 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) plan.expert_cache_mb = static_cast<int>(std::min<uint64_t>((uint64_t(pages) * uint64_t(page) / 2) >> 20, 1 << 24));
  }
  return plan;
}

}  // namespace sluice::server
