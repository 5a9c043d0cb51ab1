// bench_moe_stream: a Mixture-of-Experts model with its experts resident, and streamed from the
// model files through the uring store at several cache budgets; beside it, the disk's ceiling for
// the same request size measured in the same run (O_DIRECT random reads through io_uring, QD 32).
//
//   bench_moe_stream --model DIR [--backend cpu] [--threads N] [--budgets 0,25,50] [--tg 32] [--cold-prompt 16]
//                    [--ceiling-seconds 3]
//
// Budget 0 means resident. For each: decode tokens/s, expert hit rate (beside the uniform
// expectation for random routing, the budget's share of the experts), bytes read per token, and
// the store's miss bandwidth (bytes read / time with reads in flight) against the ceiling.
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.h"
#include "engine/runtime.h"

using namespace sluice;
using Clock = std::chrono::steady_clock;

namespace {

// Random O_DIRECT reads of `request` bytes over the files, queue depth 32, for `seconds`.
double disk_ceiling_gbs(const std::vector<std::filesystem::path>& files, uint64_t request, double seconds) {
  request = (request + 4095) / 4096 * 4096;
  std::vector<int> fds;
  std::vector<uint64_t> sizes;
  for (const auto& f : files) {
    int fd = ::open(f.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) continue;
    const uint64_t size = std::filesystem::file_size(f);
    if (size < request) {
      ::close(fd);
      continue;
    }
    fds.push_back(fd);
    sizes.push_back(size);
  }
  if (fds.empty()) return 0;
  io_uring ring;
  if (io_uring_queue_init(64, &ring, 0) != 0) return 0;
  constexpr int kDepth = 32;
  std::vector<void*> buffers(kDepth);
  for (auto& b : buffers)
    if (posix_memalign(&b, 4096, request) != 0) return 0;
  std::mt19937_64 rng(42);
  auto submit = [&](int slot) {
    const std::size_t f = rng() % fds.size();
    const uint64_t offset = (rng() % ((sizes[f] - request) / 4096 + 1)) * 4096;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_read(sqe, fds[f], buffers[slot], static_cast<unsigned>(request), offset);
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
  };
  for (int i = 0; i < kDepth; ++i) submit(i);
  io_uring_submit(&ring);
  uint64_t bytes = 0;
  const auto start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    io_uring_cqe* cqe;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) break;
    if (cqe->res > 0) bytes += static_cast<uint64_t>(cqe->res);
    const int slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
    io_uring_cqe_seen(&ring, cqe);
    submit(slot);
    io_uring_submit(&ring);
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  // Drain the reads still in flight before freeing their buffers: the device may still be writing.
  for (int pending = kDepth; pending > 0; --pending) {
    io_uring_cqe* cqe;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) break;
    io_uring_cqe_seen(&ring, cqe);
  }
  io_uring_queue_exit(&ring);
  for (auto b : buffers) std::free(b);
  for (int fd : fds) ::close(fd);
  return bytes / elapsed / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  EngineOptions o;
  o.backend = "cpu";
  o.kv_codec = "f16";
  std::vector<int> budgets = {0, 25, 50};
  int tg = 32;
  double ceiling_seconds = 3;
  std::string store = "uring";
  int cold_prompt = 16;
  std::string cold_rows;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (perf::engine_option(a, next, o)) continue;
    if (a == "--tg") tg = std::stoi(next());
    else if (a == "--store") store = next();
    else if (a == "--cold-prompt") cold_prompt = std::max(1, std::stoi(next()));
    else if (a == "--ceiling-seconds") ceiling_seconds = std::stod(next());
    else if (a == "--budgets") {
      budgets = perf::int_list(next());
    } else {
      std::fprintf(stderr, "bench_moe_stream: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (o.model_dir.empty()) {
    std::fprintf(stderr, "usage: bench_moe_stream --model DIR [--backend B] [--threads N] [--budgets 0,25,50] [--tg N]\n");
    return 2;
  }
  o.ctx_size = 256;
  o.prefill_size = 512;
  std::printf("| budget | decode tok/s | hit rate (uniform) | expert MB read/token | store miss GB/s | requests | p50/p99 read µs |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  double expert_mb = 0, mean_request = 0, best_store_gbs = 0;
  std::vector<std::filesystem::path> files;
  for (int pct : budgets) {
    EngineOptions eo = o;
    if (pct > 0) {
      eo.expert_store = store;
      eo.expert_cache_mb = 1;  // replaced below once the experts' size is known
    }
    // First open tells the experts' total size; the budget is a share of it.
    o.ctx_size = std::max(256, cold_prompt + tg + 16);
    auto probe = Runtime::open(o, static_cast<uint32_t>(o.ctx_size));
    if (!probe) {
      std::fprintf(stderr, "bench_moe_stream: %s\n", probe.message().c_str());
      return 1;
    }
    const auto& layout = (*probe)->model().expert_layout();
    if (!layout) {
      std::fprintf(stderr, "bench_moe_stream: %s is not a MoE model\n", o.model_dir.c_str());
      return 1;
    }
    const uint64_t total = layout->total_bytes();
    expert_mb = total / 1e6;
    const uint64_t per_expert = layout->expert_bytes(0);
    mean_request = static_cast<double>(per_expert) / (layout->n_parts() / 3.0) / 3.0;
    probe->reset();
    if (pct > 0) eo.expert_cache_mb = static_cast<int>(std::max<uint64_t>(1, total * pct / 100 >> 20));
    eo.ctx_size = o.ctx_size;
    auto rt = Runtime::open(eo, static_cast<uint32_t>(o.ctx_size));
    if (!rt) {
      std::fprintf(stderr, "bench_moe_stream: %s\n", rt.message().c_str());
      return 1;
    }
    files = std::vector<std::filesystem::path>();
    {
      auto set = SafetensorsSet::open_dir(o.model_dir);
      if (set) files = set->files();
    }
    const int vocab = (*rt)->config().vocab_size;
    std::vector<int32_t> prompt(cold_prompt);
    for (int i = 0; i < cold_prompt; ++i) prompt[i] = (i * 7919 + 13) % vocab;
    SequenceState seq;
    std::vector<float> logits;
    if (auto s = (*rt)->run(seq, prompt, false, logits); !s) {
      std::fprintf(stderr, "bench_moe_stream: %s\n", s.message().c_str());
      return 1;
    }
    auto* st = (*rt)->expert_store();
    // The prompt above ran from a cold cache: nearly every expert of every layer was missed at once,
    // so its reads show what the store gets from the disk when it has enough requests to keep in flight.
    const auto cold = st ? st->stats() : sl_expertstore_stats{};
    const double cold_gbs = cold.read_seconds > 0 ? cold.bytes_read / cold.read_seconds / 1e9 : 0;
    best_store_gbs = std::max(best_store_gbs, cold_gbs);
    if (st)
      std::fprintf(stderr, "budget %d%%: cold prompt of %d tokens read %.1f MB in %llu requests at %.2f GB/s\n", pct, cold_prompt,
                   cold.bytes_read / 1e6, static_cast<unsigned long long>(cold.read_requests), cold_gbs);
    cold_rows += st && pct > 0 ? "| " + std::to_string(pct) + "% | " + std::to_string(cold_prompt) + " | " + std::to_string(cold.bytes_read / 1000000) +
                          " | " + std::to_string(cold.read_requests) + " | " + std::to_string(cold_gbs).substr(0, 4) + " |\n"
                    : "";
    const auto before = cold;
    int32_t token = 1;
    const auto t0 = Clock::now();
    for (int i = 0; i < tg; ++i) {
      if (auto s = (*rt)->run(seq, std::span<const int32_t>(&token, 1), false, logits); !s) {
        std::fprintf(stderr, "bench_moe_stream: %s\n", s.message().c_str());
        return 1;
      }
      // Random-weight models repeat their argmax token, and a repeated token is routed the same way
      // every time: feed pseudo-random tokens instead, so routing is as varied as real text's.
      token = static_cast<int32_t>((static_cast<uint64_t>(i + 1) * 2654435761ull) % static_cast<uint64_t>(vocab));
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto after = st ? st->stats() : sl_expertstore_stats{};
    const double hits = static_cast<double>(after.hits - before.hits), misses = static_cast<double>(after.misses - before.misses);
    const double bytes = static_cast<double>(after.bytes_read - before.bytes_read);
    const double busy = after.read_seconds - before.read_seconds;
    const double store_gbs = busy > 0 ? bytes / busy / 1e9 : 0;
    best_store_gbs = std::max(best_store_gbs, store_gbs);
    if (pct == 0)
      std::printf("| resident | %.2f | 1.00 (1.00) | 0 | – | – | – |\n", tg / seconds);
    else
      std::printf("| %d%% | %.2f | %.3f (%.2f) | %.1f | %.2f | %llu | %.0f / %.0f |\n", pct, tg / seconds, hits / std::max(1.0, hits + misses),
                  pct / 100.0, bytes / tg / 1e6, store_gbs, static_cast<unsigned long long>(after.read_requests - before.read_requests),
                  after.read_p50_us, after.read_p99_us);
    std::fflush(stdout);
  }
  if (!cold_rows.empty())
    std::printf("\nCold prompt (every expert missed at once):\n\n| budget | prompt tokens | MB read | requests | store GB/s |\n| --- | --- | --- | --- | --- |\n%s",
                cold_rows.c_str());
  const double ceiling = disk_ceiling_gbs(files, static_cast<uint64_t>(mean_request), ceiling_seconds);
  std::printf("\nexperts %.1f MB; disk ceiling (O_DIRECT random reads of %.0f KB, io_uring QD 32): %.2f GB/s; best store miss bandwidth %.2f GB/s = %.0f%%\n",
              expert_mb, mean_request / 1e3, ceiling, best_store_gbs, ceiling > 0 ? 100 * best_store_gbs / ceiling : 0);
  return 0;
}
