// Downloads started through the web app: one job per model at a time, a bound on how many run, progress
// visible while they run, failures reported, and the destructor cancelling what still runs. The fetch is
// injected (a real hub download is tested end to end in e2e_webapp_test.py against the test hub).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "server/download_jobs.h"

namespace sluice::server {
namespace {

using namespace std::chrono_literals;

hub::HubId id_of(const std::string& text) { return *hub::parse_hub_id(text); }

// A fetch that reports progress, then waits until released (or cancelled).
struct GatedFetch {
  std::atomic<bool> release{false};
  std::atomic<int> cancelled{0};

  DownloadJobs::Fetch fn() {
    return [this](const hub::HubId& id, const hub::ResolveOptions& o) -> Result<hub::ResolvedModel> {
      o.progress->set_phase("downloading");
      o.progress->plan(2, 1000);
      o.progress->add_bytes(400);
      while (!release.load()) {
        if (o.cancel && o.cancel->load()) {
          ++cancelled;
          o.progress->fail("cancelled");
          return make_error("cancelled");
        }
        std::this_thread::sleep_for(1ms);
      }
      o.progress->add_bytes(600);
      o.progress->file_done("a");
      o.progress->file_done("b");
      o.progress->set_phase("done");
      return hub::ResolvedModel{"/cache/" + id.repo, id.repo, true, std::string(40, 'a')};
    };
  }
};

template <class Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 2000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

TEST(DownloadJobs, ReportsProgressThenTheSnapshot) {
  GatedFetch fetch;
  DownloadJobs jobs(fetch.fn());
  auto started = jobs.start(id_of("org/model"));
  ASSERT_TRUE(started) << started.message();
  EXPECT_TRUE(started->created);
  const std::string id = started->job.id;
  ASSERT_TRUE(eventually([&] { return jobs.find(id)->progress.done_bytes == 400; }));
  EXPECT_EQ(jobs.find(id)->progress.phase, "downloading");
  EXPECT_EQ(jobs.find(id)->progress.total_bytes, 1000u);
  fetch.release = true;
  ASSERT_TRUE(eventually([&] { return jobs.find(id)->finished; }));
  const auto done = *jobs.find(id);
  EXPECT_EQ(done.progress.phase, "done");
  EXPECT_EQ(done.progress.files_done, 2);
  EXPECT_EQ(done.snapshot_dir, "/cache/org/model");
  EXPECT_EQ(done.model, "org/model");
}

TEST(DownloadJobs, AModelDownloadingIsNotStartedTwice) {
  GatedFetch fetch;
  DownloadJobs jobs(fetch.fn());
  auto first = jobs.start(id_of("org/model"));
  auto second = jobs.start(id_of("org/model"));
  ASSERT_TRUE(first && second);
  EXPECT_FALSE(second->created);
  EXPECT_EQ(second->job.id, first->job.id);
  auto other_revision = jobs.start(id_of("org/model@dev"));
  ASSERT_TRUE(other_revision);
  EXPECT_TRUE(other_revision->created);
  fetch.release = true;
}

TEST(DownloadJobs, RunningDownloadsAreBounded) {
  GatedFetch fetch;
  DownloadJobs jobs(fetch.fn());
  for (int i = 0; i < DownloadJobs::kMaxRunning; ++i) ASSERT_TRUE(jobs.start(id_of("org/m" + std::to_string(i))));
  auto refused = jobs.start(id_of("org/one-more"));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.message().find("running"), std::string::npos);
  fetch.release = true;
  ASSERT_TRUE(eventually([&] { return jobs.list().front().finished && jobs.list().back().finished; }));
  EXPECT_TRUE(jobs.start(id_of("org/one-more")));  // room again once they finished
  EXPECT_EQ(jobs.list().front().model, "org/one-more");  // newest first
}

TEST(DownloadJobs, AFailureIsReportedWithItsMessage) {
  DownloadJobs jobs([](const hub::HubId&, const hub::ResolveOptions&) -> Result<hub::ResolvedModel> {
    return make_error("org/gated is a gated model");
  });
  auto started = jobs.start(id_of("org/gated"));
  ASSERT_TRUE(started);
  ASSERT_TRUE(eventually([&] { return jobs.find(started->job.id)->progress.phase == "failed"; }));
  EXPECT_EQ(jobs.find(started->job.id)->progress.error, "org/gated is a gated model");
  EXPECT_FALSE(jobs.find("dl-999"));
}

TEST(DownloadJobs, DestructionCancelsWhatRuns) {
  GatedFetch fetch;
  {
    DownloadJobs jobs(fetch.fn());
    ASSERT_TRUE(jobs.start(id_of("org/a")));
    ASSERT_TRUE(jobs.start(id_of("org/b")));
  }  // returns only once both threads saw the cancel
  EXPECT_EQ(fetch.cancelled.load(), 2);
}

TEST(DownloadJobs, OnlyTheMostRecentAreKept) {
  DownloadJobs jobs([](const hub::HubId& id, const hub::ResolveOptions& o) -> Result<hub::ResolvedModel> {
    o.progress->set_phase("done");
    return hub::ResolvedModel{"/x", id.repo, true, ""};
  });
  std::string first;
  for (std::size_t i = 0; i < DownloadJobs::kMaxKept + 5; ++i) {
    auto s = jobs.start(id_of("org/m" + std::to_string(i)));
    ASSERT_TRUE(s);
    if (i == 0) first = s->job.id;
    ASSERT_TRUE(eventually([&] { return jobs.find(s->job.id)->finished; }));
  }
  EXPECT_LE(jobs.list().size(), DownloadJobs::kMaxKept);
  EXPECT_FALSE(jobs.find(first));
}

}  // namespace
}  // namespace sluice::server
