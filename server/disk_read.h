#pragma once
// The model files' read rate as the streaming expert store sees it (`sluice serve --calibrate`):
// O_DIRECT where the file system allows, requests of an expert's size at random page-aligned offsets,
// `queue_depth` of them in flight through io_uring — the store's own way of reading, so the figure is
// the ceiling streaming can reach, not one reader's round trips. pread, one request at a time, where
// the kernel has no io_uring (the store falls back the same way).
#include <cstdint>
#include <string>

namespace sluice::server {

struct DiskRead {
  double gbps = 0;
  uint64_t bytes = 0;          // bytes the reads returned
  bool direct = false;         // every file was read with O_DIRECT (the page cache bypassed)
  bool uring = false;          // the reads went through io_uring
  unsigned queue_depth = 1;    // requests in flight
};

struct DiskReadOptions {
  uint64_t most_bytes = 1ull << 30;   // stop after this many bytes ...
  double most_seconds = 2.0;          // ... or after this long
  uint64_t request_bytes = 1u << 20;  // one read: a streamed expert's part is of this order
  unsigned queue_depth = 64;          // the uring store's default depth (--ssd-prefetch changes both)
  uint32_t seed = 1;
};

// Reads the *.safetensors files of `model_dir`. No files (or none readable): gbps 0, bytes 0.
DiskRead measure_disk_read(const std::string& model_dir, const DiskReadOptions& options);

}  // namespace sluice::server
