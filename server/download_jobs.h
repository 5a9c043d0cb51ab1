#pragma once
// Hub downloads the web app starts (POST /v1/hub/downloads): each runs on its own thread with the hub
// code `sluice download` uses (resumable, verified, into the Hugging Face cache) and reports its
// progress for GET /v1/hub/downloads/{id}. A model already downloading is not started twice; at most
// kMaxRunning run at once and the kMaxKept most recent are remembered. Thread-safe; the destructor
// cancels what still runs (partial blobs stay for a resume) and waits for it.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hub/download_progress.h"
#include "hub/hub_id.h"
#include "hub/model_resolver.h"

namespace sluice::server {

class DownloadJobs {
 public:
  static constexpr int kMaxRunning = 2;
  static constexpr std::size_t kMaxKept = 32;

  struct Snapshot {
    std::string id;        // "dl-1", ...
    std::string model;     // org/name[@revision]
    hub::DownloadProgress::View progress;
    std::string snapshot_dir;  // when done
    bool finished = false;     // the download's thread is over (done or failed)
  };

  // fetch: what downloads (tests pass their own); by default hub::fetch_hub_model with the environment's settings.
  using Fetch = std::function<Result<hub::ResolvedModel>(const hub::HubId&, const hub::ResolveOptions&)>;
  explicit DownloadJobs(Fetch fetch = {});
  ~DownloadJobs();
  DownloadJobs(const DownloadJobs&) = delete;
  DownloadJobs& operator=(const DownloadJobs&) = delete;

  struct Started {
    Snapshot job;
    bool created = false;  // false: that model was already downloading (its job is returned)
  };
  // Starts downloading `id`, or returns the job already downloading it; an error when kMaxRunning run.
  Result<Started> start(const hub::HubId& id);
  std::optional<Snapshot> find(const std::string& job_id) const;
  std::vector<Snapshot> list() const;  // newest first

 private:
  struct Job {
    std::string id, model;
    hub::DownloadProgress progress;
    std::atomic<bool> cancel{false};
    std::atomic<bool> finished{false};
    std::string snapshot_dir;  // under mutex_
    std::thread thread;
  };
  Snapshot snapshot_of(const Job& job) const;  // mutex_ held
  void forget_finished();                      // mutex_ held

  Fetch fetch_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Job>> jobs_;  // oldest first
  std::uint64_t next_id_ = 1;
};

}  // namespace sluice::server
