#include "util/memory_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "util/vec.h"

namespace sluice {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Runs fn(k, lo, hi) on n threads over [0, count) split evenly, and returns the wall time.
template <typename Fn>
double timed_split(unsigned n, std::size_t count, Fn fn) {
  const auto t = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (unsigned k = 0; k < n; ++k) threads.emplace_back([&, k] { fn(k, count * k / n, count * (k + 1) / n); });
  for (auto& th : threads) th.join();
  return seconds_since(t);
}

}  // namespace

MemoryBandwidth measure_memory_bandwidth(unsigned threads, std::size_t bytes, int reps) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t n = std::max<std::size_t>(bytes / sizeof(float), 1024);
  // Written before timing (pages touched, not the zero page every read would hit in the cache).
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  std::vector<float> sums(threads);
  MemoryBandwidth bw;
  for (int rep = 0; rep < std::max(reps, 1); ++rep) {
    const double read_s = timed_split(threads, n, [&](unsigned k, std::size_t lo, std::size_t hi) {
      sums[k] = cpu::dot_f32(a.data() + lo, a.data() + lo, hi - lo);  // one vector stream
    });
    bw.read_gbs = std::max(bw.read_gbs, static_cast<double>(n) * sizeof(float) / read_s / 1e9);
    const double copy_s = timed_split(threads, n, [&](unsigned, std::size_t lo, std::size_t hi) {
      std::memcpy(b.data() + lo, a.data() + lo, (hi - lo) * sizeof(float));
    });
    bw.copy_gbs = std::max(bw.copy_gbs, 2.0 * static_cast<double>(n) * sizeof(float) / copy_s / 1e9);
  }
  // The sums are used, so the reads are not optimised away.
  volatile float keep = 0;
  for (float s : sums) keep = keep + s;
  return bw;
}

}  // namespace sluice
