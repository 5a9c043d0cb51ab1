#include "server/download_jobs.h"

#include <algorithm>

namespace sluice::server {

DownloadJobs::DownloadJobs(Fetch fetch) : fetch_(std::move(fetch)) {
  if (!fetch_) fetch_ = [](const hub::HubId& id, const hub::ResolveOptions& o) { return hub::fetch_hub_model(id, o); };
}

DownloadJobs::~DownloadJobs() {
  std::vector<std::unique_ptr<Job>> jobs;
  {
    std::lock_guard lock(mutex_);
    jobs.swap(jobs_);
  }
  for (auto& j : jobs) j->cancel = true;
  for (auto& j : jobs)
    if (j->thread.joinable()) j->thread.join();
}

Result<DownloadJobs::Started> DownloadJobs::start(const hub::HubId& id) {
  std::lock_guard lock(mutex_);
  int running = 0;
  for (const auto& j : jobs_) {
    if (j->finished.load()) continue;
    if (j->model == id.text()) return Started{snapshot_of(*j), false};
    ++running;
  }
  if (running >= kMaxRunning)
    return make_error(std::to_string(running) + " downloads are running; start another when one has finished");
  forget_finished();
  auto job = std::make_unique<Job>();
  job->id = "dl-" + std::to_string(next_id_++);
  job->model = id.text();
  job->progress.begin(id.repo);
  Job* j = job.get();
  jobs_.push_back(std::move(job));
  // The thread starts after the job is in the list; it only touches its own Job (and mutex_ to publish).
  j->thread = std::thread([this, j, id] {
    hub::ResolveOptions options;
    options.progress = &j->progress;
    options.cancel = &j->cancel;
    options.step_timeout = std::chrono::seconds(20);
    auto result = fetch_(id, options);
    if (!result && j->progress.view().phase != "failed") j->progress.fail(result.message());
    std::lock_guard done(mutex_);
    if (result) j->snapshot_dir = result->dir;
    j->finished = true;
  });
  return Started{snapshot_of(*j), true};
}

void DownloadJobs::forget_finished() {
  while (jobs_.size() >= kMaxKept) {
    auto oldest = std::find_if(jobs_.begin(), jobs_.end(), [](const auto& j) { return j->finished.load(); });
    if (oldest == jobs_.end()) return;
    if ((*oldest)->thread.joinable()) (*oldest)->thread.join();  // finished: returns at once
    jobs_.erase(oldest);
  }
}

DownloadJobs::Snapshot DownloadJobs::snapshot_of(const Job& job) const {
  return {job.id, job.model, job.progress.view(), job.snapshot_dir, job.finished.load()};
}

std::optional<DownloadJobs::Snapshot> DownloadJobs::find(const std::string& job_id) const {
  std::lock_guard lock(mutex_);
  for (const auto& j : jobs_)
    if (j->id == job_id) return snapshot_of(*j);
  return std::nullopt;
}

std::vector<DownloadJobs::Snapshot> DownloadJobs::list() const {
  std::lock_guard lock(mutex_);
  std::vector<Snapshot> out;
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) out.push_back(snapshot_of(**it));
  return out;
}

}  // namespace sluice::server
