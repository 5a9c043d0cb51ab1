#include "thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SLUICE_PAUSE() _mm_pause()
#else
#define SLUICE_PAUSE() std::this_thread::yield()
#endif

namespace sluice::cpu {
namespace {

constexpr int kSpinIterations = 4096;  // tens of µs of pause before a worker sleeps
constexpr uint64_t kFieldMask = (1u << 20) - 1;

uint64_t generation_of(uint64_t w) { return w >> 40; }
uint64_t next_of(uint64_t w) { return (w >> 20) & kFieldMask; }
uint64_t count_of(uint64_t w) { return w & kFieldMask; }
uint64_t make_word(uint64_t gen, uint64_t next, uint64_t count) { return (gen << 40) | (next << 20) | count; }

}  // namespace

ThreadPool::ThreadPool(unsigned n_threads) : n_threads_(std::max(1u, n_threads)) {
  for (unsigned i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_.store(true);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(uint64_t generation, unsigned thread_index) {
  for (;;) {
    uint64_t w = word_.load(std::memory_order_acquire);
    if (generation_of(w) != generation || next_of(w) >= count_of(w)) return;
    if (!word_.compare_exchange_weak(w, w + (1ull << 20), std::memory_order_acq_rel)) continue;
    // Claimed chunk `next_of(w)` of a job still running: its fields are stable until we finish.
    const uint64_t chunk = next_of(w), chunks = count_of(w);
    const std::size_t begin = job_n_ * chunk / chunks, end = job_n_ * (chunk + 1) / chunks;
    if (begin < end) (*job_)(begin, end, thread_index);
  }
}

std::size_t ThreadPool::chunk_count(std::size_t n, std::size_t grain) const {
  grain = std::max<std::size_t>(grain, 1);
  const std::size_t max_chunks = (n + grain - 1) / grain;
  if (max_chunks <= 1 || workers_.empty()) return 1;
  // A few chunks per thread, so a late or slow thread leaves its share to the others.
  return std::min<std::size_t>({max_chunks, static_cast<std::size_t>(n_threads_) * 4, kFieldMask});
}

void ThreadPool::parallel_for(std::size_t n, std::size_t grain, const Job& fn) {
  if (n == 0) return;
  const std::size_t chunks = chunk_count(n, grain);
  if (chunks == 1) {
    fn(0, n, 0);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  const uint64_t gen = (generation_of(word_.load()) + 1) & ((1u << 24) - 1);
  word_.store(make_word(gen, 0, chunks), std::memory_order_release);
  if (sleeping_.load() > 0) {
    std::lock_guard lock(mutex_);
    wake_.notify_all();
  }
  run_chunks(gen, 0);
  // Every chunk is claimed; wait only for workers still inside one.
  for (int spin = 0; active_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations)
      SLUICE_PAUSE();
    else
      std::this_thread::yield();
  }
}

void ThreadPool::worker(unsigned index) {
  uint64_t seen = 0;
  for (;;) {
    int spin = 0;
    uint64_t w;
    while (generation_of(w = word_.load(std::memory_order_acquire)) == seen && !stopping_.load(std::memory_order_relaxed)) {
      if (++spin < kSpinIterations) {
        SLUICE_PAUSE();
        continue;
      }
      std::unique_lock lock(mutex_);
      sleeping_.fetch_add(1);
      wake_.wait(lock, [&] { return stopping_.load() || generation_of(word_.load()) != seen; });
      sleeping_.fetch_sub(1);
      spin = 0;
    }
    if (stopping_.load()) return;
    seen = generation_of(w);
    // Announce before claiming, so the caller waits for us once we may hold a chunk.
    active_.fetch_add(1, std::memory_order_acq_rel);
    run_chunks(seen, index);
    active_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace sluice::cpu
