#pragma once
// The terminal's view of a model download: a progress bar redrawn in place on stderr when stderr is
// a terminal; otherwise (a log file, a pipe) one line per file finished and a summary, no bar.
#include <atomic>
#include <cstdio>
#include <thread>

#include "hub/download_progress.h"

namespace sluice::cli {

class DownloadBar {
 public:
  DownloadBar(const hub::DownloadProgress& progress, std::FILE* out = stderr);
  ~DownloadBar();  // stops drawing and leaves the final state on its own line
  DownloadBar(const DownloadBar&) = delete;
  DownloadBar& operator=(const DownloadBar&) = delete;

 private:
  void draw(bool final);

  const hub::DownloadProgress& progress_;
  std::FILE* out_;
  bool tty_;
  std::size_t files_reported_ = 0;
  bool drew_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace sluice::cli
