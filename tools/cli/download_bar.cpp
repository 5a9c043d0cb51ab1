#include "download_bar.h"

#include <unistd.h>

#include <chrono>
#include <string>

namespace sluice::cli {
namespace {

std::string megabytes(std::uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", n / 1e6);
  return buf;
}

}  // namespace

DownloadBar::DownloadBar(const hub::DownloadProgress& progress, std::FILE* out)
    : progress_(progress), out_(out), tty_(::isatty(::fileno(out)) != 0) {
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      draw(false);
      std::this_thread::sleep_for(std::chrono::milliseconds(tty_ ? 100 : 250));
    }
  });
}

DownloadBar::~DownloadBar() {
  stop_ = true;
  thread_.join();
  draw(true);
}

void DownloadBar::draw(bool final) {
  const auto v = progress_.view();
  if (v.files_total == 0) return;  // nothing to download (all cached), or not started yet
  if (!tty_) {
    for (; files_reported_ < v.finished.size(); ++files_reported_)
      std::fprintf(out_, "sluice: downloaded %s (%d/%d files)\n", v.finished[files_reported_].c_str(),
                   static_cast<int>(files_reported_ + 1), v.files_total);
    if (final && v.phase == "done")
      std::fprintf(out_, "sluice: %s: %s MB in %.1f s\n", v.repo.c_str(), megabytes(v.done_bytes).c_str(), v.seconds);
    std::fflush(out_);
    return;
  }
  constexpr int kWidth = 30;
  const double fraction = v.total_bytes ? static_cast<double>(v.done_bytes) / static_cast<double>(v.total_bytes) : 0.0;
  const int filled = std::min(kWidth, static_cast<int>(fraction * kWidth));
  const double rate = v.seconds > 0 ? v.done_bytes / v.seconds : 0;
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(kWidth - filled), '-');
  std::fprintf(out_, "\r\033[K%s [%s] %3d%% %s/%s MB %s MB/s %d/%d files", v.repo.c_str(), bar.c_str(),
               static_cast<int>(fraction * 100), megabytes(v.done_bytes).c_str(), megabytes(v.total_bytes).c_str(),
               megabytes(static_cast<std::uint64_t>(rate)).c_str(), v.files_done, v.files_total);
  drew_ = true;
  if (final) std::fputc('\n', out_);
  std::fflush(out_);
}

}  // namespace sluice::cli
