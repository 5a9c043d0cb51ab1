#include "server/disk_read.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <vector>

namespace sluice::server {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kAlign = 4096;  // O_DIRECT alignment every Linux file system accepts

struct File {
  int fd = -1;
  uint64_t size = 0;
};

// The files, opened O_DIRECT where allowed; `all_direct` false if any fell back to the page cache.
std::vector<File> open_model_files(const std::string& model_dir, bool& all_direct) {
  std::vector<fs::path> paths;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_dir, ec))
    if (entry.path().extension() == ".safetensors") paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  std::vector<File> files;
  all_direct = true;
  for (const auto& p : paths) {
    int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0) {
      fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      all_direct = false;
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // best effort: drop what the page cache holds of it
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || st.st_size <= 0) {
      close(fd);
      continue;
    }
    files.push_back({fd, static_cast<uint64_t>(st.st_size)});
  }
  return files;
}

// Random requests over the files, a file chosen in proportion to its size (as experts are spread).
class Requests {
 public:
  Requests(const std::vector<File>& files, uint64_t request, uint32_t seed) : files_(files), request_(request), rng_(seed) {
    uint64_t total = 0;
    for (const auto& f : files) cumulative_.push_back(total += f.size);
  }
  // Which file and where: a page-aligned offset with a whole request before the file's end where the
  // file is that long, else the start (a short read then returns what the file has).
  std::pair<int, uint64_t> next() {
    const uint64_t at = std::uniform_int_distribution<uint64_t>(0, cumulative_.back() - 1)(rng_);
    const std::size_t i = static_cast<std::size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), at) - cumulative_.begin());
    const uint64_t size = files_[i].size;
    const uint64_t last = size > request_ ? (size - request_) / kAlign : 0;
    return {files_[i].fd, std::uniform_int_distribution<uint64_t>(0, last)(rng_) * kAlign};
  }

 private:
  const std::vector<File>& files_;
  uint64_t request_;
  std::mt19937_64 rng_;
  std::vector<uint64_t> cumulative_;
};

struct Buffers {
  Buffers(unsigned n, uint64_t bytes) {
    for (unsigned i = 0; i < n; ++i) data.push_back(static_cast<char*>(std::aligned_alloc(kAlign, bytes)));
  }
  ~Buffers() {
    for (char* p : data) std::free(p);
  }
  std::vector<char*> data;
};

double gbps(uint64_t bytes, Clock::time_point t0) {
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0;
}

// Keeps `depth` reads in flight until enough was read; false if the ring could not be set up.
bool read_with_uring(Requests& requests, const DiskReadOptions& o, unsigned depth, DiskRead& out) {
  io_uring ring{};
  if (io_uring_queue_init(depth, &ring, 0) != 0) return false;
  Buffers buffers(depth, o.request_bytes);
  const auto t0 = Clock::now();
  auto out_of_budget = [&] { return out.bytes >= o.most_bytes || std::chrono::duration<double>(Clock::now() - t0).count() > o.most_seconds; };
  auto submit = [&](unsigned slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    const auto [fd, offset] = requests.next();
    io_uring_prep_read(sqe, fd, buffers.data[slot], static_cast<unsigned>(o.request_bytes), offset);
    io_uring_sqe_set_data64(sqe, slot);
  };
  for (unsigned slot = 0; slot < depth; ++slot) submit(slot);
  unsigned in_flight = depth;
  bool failed = false;
  io_uring_submit(&ring);
  while (in_flight > 0) {
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) break;
    const auto slot = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
    if (cqe->res > 0) out.bytes += static_cast<uint64_t>(cqe->res);
    else failed = true;  // an error or nothing read: stop issuing, count what was read
    io_uring_cqe_seen(&ring, cqe);
    --in_flight;
    if (!failed && !out_of_budget()) {
      submit(slot);
      ++in_flight;
      io_uring_submit(&ring);
    }
  }
  out.gbps = gbps(out.bytes, t0);
  io_uring_queue_exit(&ring);
  return true;
}

void read_with_pread(Requests& requests, const DiskReadOptions& o, DiskRead& out) {
  Buffers buffer(1, o.request_bytes);
  const auto t0 = Clock::now();
  while (out.bytes < o.most_bytes && std::chrono::duration<double>(Clock::now() - t0).count() <= o.most_seconds) {
    const auto [fd, offset] = requests.next();
    const ssize_t n = pread(fd, buffer.data[0], o.request_bytes, static_cast<off_t>(offset));
    if (n <= 0) break;
    out.bytes += static_cast<uint64_t>(n);
  }
  out.gbps = gbps(out.bytes, t0);
}

}  // namespace

DiskRead measure_disk_read(const std::string& model_dir, const DiskReadOptions& options) {
  DiskReadOptions o = options;
  o.request_bytes = std::max<uint64_t>(kAlign, (o.request_bytes + kAlign - 1) / kAlign * kAlign);
  o.queue_depth = std::clamp(o.queue_depth, 1u, 4096u);
  DiskRead out;
  std::vector<File> files = open_model_files(model_dir, out.direct);
  if (files.empty()) {
    out.direct = false;
    return out;
  }
  Requests requests(files, o.request_bytes, o.seed);
  if (read_with_uring(requests, o, o.queue_depth, out)) {
    out.uring = true;
    out.queue_depth = o.queue_depth;
  } else {
    read_with_pread(requests, o, out);
  }
  for (const auto& f : files) close(f.fd);
  return out;
}

}  // namespace sluice::server
