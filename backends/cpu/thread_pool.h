#pragma once
// A fork-join pool: parallel_for splits [0, n) into chunks that the calling thread and the workers
// claim one by one, and returns when all are done.
//
// Chunks are claimed dynamically, and the caller never waits for a worker that has not started:
// on a loaded machine (CI runs tests in parallel on 2 cores) a descheduled worker simply finds no
// work left, instead of stalling every op until the scheduler runs it. Workers spin briefly on the
// job word before sleeping, because decode issues dozens of small ops per token and a sleep/wake
// round trip would cost more than the work; an idle server still costs no CPU.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice::cpu {

class ThreadPool {
 public:
  using Job = std::function<void(std::size_t, std::size_t, unsigned)>;

  explicit ThreadPool(unsigned n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return n_threads_; }
  // fn(begin, end, thread_index) over chunks of [0, n), none smaller than grain; thread_index <
  // size() identifies the running thread (for per-thread scratch). One parallel_for at a time.
  void parallel_for(std::size_t n, std::size_t grain, const Job& fn);
  // The chunks parallel_for(n, grain, ...) makes: k = chunk_count(n, grain), chunk c covering
  // [n·c/k, n·(c+1)/k). A caller running several jobs in one parallel_for splits each the same way,
  // so where a kernel's result depends on its range (row blocks) it matches running them one by one.
  std::size_t chunk_count(std::size_t n, std::size_t grain) const;

 private:
  void worker(unsigned index);
  // Claims and runs chunks of the job published under `word`'s generation until none are left.
  void run_chunks(uint64_t generation, unsigned thread_index);

  unsigned n_threads_;
  std::vector<std::thread> workers_;
  // The job: valid while its chunks are being claimed (the caller waits for `active_` to drain).
  const Job* job_ = nullptr;
  std::size_t job_n_ = 0;
  // generation (24 bits) | next chunk (20 bits) | chunk count (20 bits), claimed by CAS.
  std::atomic<uint64_t> word_{0};
  std::atomic<unsigned> active_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<unsigned> sleeping_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace sluice::cpu
