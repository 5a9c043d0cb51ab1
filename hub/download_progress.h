#pragma once
// How far a model download has come: written by the download threads, read by the terminal's
// progress bar and by the server's /health while it loads. Thread-safe.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace sluice::hub {

class DownloadProgress {
 public:
  struct View {
    std::string repo;
    std::string phase = "idle";        // resolving | downloading | verifying | done | failed
    std::uint64_t total_bytes = 0;     // of the files being downloaded (known once their sizes are)
    std::uint64_t done_bytes = 0;      // received so far (resumed bytes count as received)
    int files_total = 0;
    int files_done = 0;
    std::vector<std::string> finished; // file names in the order they completed
    std::string error;
    double seconds = 0;                // since the download phase began
  };

  void begin(const std::string& repo);
  void set_phase(const std::string& phase);
  void plan(int files, std::uint64_t bytes);     // what downloading will fetch
  void add_bytes(std::uint64_t n);
  void drop_bytes(std::uint64_t n);              // a restart from zero (the server ignored Range)
  void file_done(const std::string& name);
  void fail(const std::string& error);
  View view() const;

 private:
  mutable std::mutex mutex_;
  View state_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

// /health's body while the server loads: {"status":"loading","model":...,"download":{phase, files_done,
// files_total, bytes_done, bytes_total, percent, seconds, error?}}.
std::string loading_health_json(const DownloadProgress::View& view, const std::string& model);

}  // namespace sluice::hub
