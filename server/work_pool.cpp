#include "server/work_pool.h"

#include <exception>

#include <spdlog/spdlog.h>

namespace sluice::server {

WorkPool::WorkPool(int threads, std::size_t queue_limit) : queue_limit_(queue_limit) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

WorkPool::~WorkPool() { stop(); }

bool WorkPool::submit(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || queue_.size() >= queue_limit_) return false;
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  return true;
}

void WorkPool::stop() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  wake_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  // Jobs own what they work on (a session, a request); dropped outside the lock, after the threads end.
  dropped.clear();
}

std::size_t WorkPool::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

void WorkPool::run() {
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    // A job answers its own errors; one that escapes must not end the process (std::terminate).
    try {
      job();
    } catch (const std::exception& e) {
      spdlog::error("request work failed: {}", e.what());
    } catch (...) {
      spdlog::error("request work failed");
    }
  }
}

}  // namespace sluice::server
