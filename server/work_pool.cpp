#include "server/work_pool.h"

#include <exception>

#include <spdlog/spdlog.h>

namespace sluice::server {

WorkPool::WorkPool(int threads, std::size_t queue_limit) : queue_limit_(queue_limit) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

WorkPool::~WorkPool() { stop(); }

bool WorkPool::submit(std::function<void()> job, std::function<void()> dropped) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || queue_.size() >= queue_limit_) return false;
    queue_.push_back({std::move(job), std::move(dropped)});
  }
  wake_.notify_one();
  return true;
}

void WorkPool::cancel_queued() {
  std::deque<Job> cancelled;
  {
    std::lock_guard lock(mutex_);
    cancelled.swap(queue_);
  }
  drop(std::move(cancelled));
}

void WorkPool::stop() {
  std::deque<Job> cancelled;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    cancelled.swap(queue_);
  }
  wake_.notify_all();
  drop(std::move(cancelled));
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

// Outside the lock: a callback may take other locks, and a job's captures (a session) may be the
// last references to what they own.
void WorkPool::drop(std::deque<Job> jobs) {
  for (auto& job : jobs) {
    if (!job.dropped) continue;
    try {
      job.dropped();
    } catch (...) {
      spdlog::error("a cancelled request's callback failed");
    }
  }
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
      job = std::move(queue_.front().run);
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
