#pragma once
// Threads for request work too expensive for the HTTP I/O threads (parsing a large JSON body,
// rendering a chat template, tokenizing), so cheap routes such as /health answer at once whatever
// the other requests cost. The queue is bounded: when it is full a request is turned away (503)
// instead of piling up.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice::server {

class WorkPool {
 public:
  WorkPool(int threads, std::size_t queue_limit);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues a job. False when the queue already holds queue_limit jobs or the pool has stopped.
  // `dropped` runs instead of `job` when the job is cancelled before it starts (so its request can
  // still be answered).
  bool submit(std::function<void()> job, std::function<void()> dropped = {});
  // Drops the jobs not yet started (their `dropped` runs here); running ones go on.
  void cancel_queued();
  // cancel_queued(), refuses new jobs, waits for the running ones and joins the threads. Idempotent.
  void stop();
  std::size_t queued() const;

 private:
  void run();

  const std::size_t queue_limit_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  struct Job {
    std::function<void()> run;
    std::function<void()> dropped;
  };
  void drop(std::deque<Job> jobs);

  std::deque<Job> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace sluice::server
