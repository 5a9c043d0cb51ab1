#include "thread_pool.h"

#include <algorithm>

namespace sluice::cpu {

ThreadPool::ThreadPool(unsigned n_threads) : n_threads_(std::max(1u, n_threads)) {
  for (unsigned i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

static void run_chunk(const std::function<void(std::size_t, std::size_t, unsigned)>& fn, std::size_t n,
                      std::size_t chunks, unsigned index) {
  if (index >= chunks) return;
  const std::size_t begin = n * index / chunks, end = n * (index + 1) / chunks;
  if (begin < end) fn(begin, end, index);
}

void ThreadPool::parallel_for(std::size_t n, std::size_t grain,
                              const std::function<void(std::size_t, std::size_t, unsigned)>& fn) {
  if (n == 0) return;
  std::size_t chunks = std::min<std::size_t>(n_threads_, (n + std::max<std::size_t>(grain, 1) - 1) / std::max<std::size_t>(grain, 1));
  if (chunks <= 1 || workers_.empty()) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    pending_ = static_cast<unsigned>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_chunk(fn, n, chunks, 0);
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker(unsigned index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(std::size_t, std::size_t, unsigned)>* job;
    std::size_t n, chunks;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunks = job_chunks_;
    }
    run_chunk(*job, n, chunks, index);
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

}  // namespace sluice::cpu
