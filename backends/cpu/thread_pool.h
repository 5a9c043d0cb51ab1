#pragma once
// A fork-join pool: parallel_for splits [0, n) into contiguous chunks, runs them on the workers and
// the calling thread, and returns when all are done. Workers sleep on a condition variable between
// jobs, so an idle server costs no CPU.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(unsigned n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return n_threads_; }
  // fn(begin, end, thread_index) over chunks of [0, n); at most size() chunks, none smaller than grain.
  void parallel_for(std::size_t n, std::size_t grain,
                    const std::function<void(std::size_t, std::size_t, unsigned)>& fn);

 private:
  void worker(unsigned index);

  unsigned n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::size_t, std::size_t, unsigned)>* job_ = nullptr;
  std::size_t job_n_ = 0;
  std::size_t job_chunks_ = 0;
  uint64_t generation_ = 0;
  unsigned pending_ = 0;
  bool stopping_ = false;
};

}  // namespace sluice::cpu
