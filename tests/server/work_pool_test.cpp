#include "server/work_pool.h"

#include <atomic>
#include <chrono>
#include <future>

#include <gtest/gtest.h>

using sluice::server::WorkPool;

namespace {

// Keeps a pool's only thread busy until release(), so the jobs submitted meanwhile wait in its queue.
class BusyWorker {
 public:
  // Returns once the job runs; false when the pool refused it.
  bool occupy(WorkPool& pool) {
    std::promise<void> started;
    std::shared_future<void> released = released_;
    if (!pool.submit([&started, released] {
          started.set_value();
          released.wait();
        }))
      return false;
    started.get_future().wait();
    return true;
  }
  void release() { release_.set_value(); }

 private:
  std::promise<void> release_;
  std::shared_future<void> released_ = release_.get_future().share();
};

}  // namespace

TEST(WorkPool, RunsJobsOffTheCallingThread) {
  WorkPool pool(2, 8);
  std::promise<std::thread::id> ran_on;
  ASSERT_TRUE(pool.submit([&] { ran_on.set_value(std::this_thread::get_id()); }));
  auto f = ran_on.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_NE(f.get(), std::this_thread::get_id());
}

TEST(WorkPool, AFullQueueRefusesInsteadOfGrowing) {
  WorkPool pool(1, 2);
  BusyWorker busy;
  ASSERT_TRUE(busy.occupy(pool));  // the only thread is busy; what follows waits in the queue
  EXPECT_TRUE(pool.submit([] {}));
  EXPECT_TRUE(pool.submit([] {}));
  EXPECT_FALSE(pool.submit([] {}));
  EXPECT_EQ(pool.queued(), 2u);
  busy.release();
}

TEST(WorkPool, StopWaitsForRunningJobsDropsQueuedOnesAndRefusesMore) {
  WorkPool pool(1, 4);
  std::promise<void> started;
  std::atomic<bool> finished{false};
  std::atomic<int> queued_ran{0};
  auto owned = std::make_shared<int>(1);  // a queued job's captures are released by stop()
  ASSERT_TRUE(pool.submit([&] {
    started.set_value();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    finished = true;
  }));
  started.get_future().wait();
  std::atomic<int> dropped{0};
  ASSERT_TRUE(pool.submit([&queued_ran, owned] { ++queued_ran; }, [&dropped] { ++dropped; }));
  std::weak_ptr<int> watch = owned;
  owned.reset();
  pool.stop();
  EXPECT_TRUE(finished.load());
  EXPECT_EQ(queued_ran.load(), 0);
  EXPECT_EQ(dropped.load(), 1);
  EXPECT_TRUE(watch.expired());
  EXPECT_FALSE(pool.submit([] {}));
  pool.stop();  // idempotent
}

TEST(WorkPool, AJobThatThrowsDoesNotEndThePoolOrTheProcess) {
  WorkPool pool(1, 4);
  ASSERT_TRUE(pool.submit([] { throw std::runtime_error("bad input"); }));
  std::promise<void> after;
  ASSERT_TRUE(pool.submit([&] { after.set_value(); }));
  EXPECT_EQ(after.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
}

TEST(WorkPool, CancelQueuedAnswersWaitingJobsAndKeepsServing) {
  WorkPool pool(1, 4);
  BusyWorker busy;
  ASSERT_TRUE(busy.occupy(pool));
  std::atomic<int> ran{0}, dropped{0};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.submit([&ran] { ++ran; }, [&dropped] { ++dropped; }));
  pool.cancel_queued();
  EXPECT_EQ(dropped.load(), 3);
  EXPECT_EQ(pool.queued(), 0u);
  busy.release();
  std::promise<void> later;
  ASSERT_TRUE(pool.submit([&] { later.set_value(); }));
  EXPECT_EQ(later.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(ran.load(), 0);
}
