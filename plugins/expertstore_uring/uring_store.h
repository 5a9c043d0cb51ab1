#pragma once
// The `uring` expert store: experts are read on demand from the model files into a cache with a
// byte budget, through io_uring (pread when the kernel has none).
//
// - A miss reads each part of the expert as one request, all misses of an acquire in flight at once
//   (queue depth 64); with O_DIRECT when the file system allows (page-aligned superset of the range
//   into page-aligned buffers, so the bytes counted really came from the disk), buffered otherwise.
// - The cache is an LRU over (layer, expert) entries; acquired entries are pinned until released.
//   The budget may be exceeded only while pinned entries alone exceed it.
// - prefetch() submits reads without waiting; the next acquire that needs them waits for their
//   completions, so reads overlap with the host's compute in between.
// - Short reads, EIO and files changed under the store are errors for that acquire (SL_ERR_IO with
//   the file, offset and cause); the store stays usable.
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "sluice/expertstore.h"

namespace sluice::uring {

struct Options {
  uint64_t budget_bytes = 0;  // 0: a quarter of the experts' bytes
  bool direct = true;         // try O_DIRECT
  bool use_uring = true;      // false: pread (also the fallback when io_uring is unavailable)
  unsigned queue_depth = 64;
};

// Parses "direct=0,uring=0,qd=32" (all optional).
bool parse_options(const char* text, Options& out, std::string& error);

}  // namespace sluice::uring
