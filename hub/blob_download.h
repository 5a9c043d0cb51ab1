#pragma once
// One file into the cache's blobs/: fetched into blobs/<etag>.incomplete (kept when a transfer
// breaks, so the next attempt or the next run asks only for the rest with Range), checked (its size;
// for an LFS file, whose ETag is the sha256 of its bytes, the hash), then renamed to blobs/<etag> —
// a blob is whole or absent. A lock file in <cache>/.locks/ keeps two processes off the same blob,
// as huggingface_hub does.
#include <atomic>
#include <string>

#include "hub/download_progress.h"
#include "hub/hub_api.h"
#include "hub/hub_cache.h"

namespace sluice::hub {

struct BlobRequest {
  std::string filename;   // for messages and progress
  FileMetadata meta;
  int attempts = 5;       // transfers tried (each resuming where the last stopped) before giving up
};

// Ensures cache.blob(meta.etag) exists with the right contents. `stop` ends it early (the
// .incomplete file stays for a later resume).
Status download_blob(const HubApi& api, const RepoCache& cache, const BlobRequest& request, DownloadProgress& progress,
                     const std::atomic<bool>& stop);

bool is_sha256_etag(const std::string& etag);  // 64 hex digits: an LFS file's content hash

// Refuses before the first byte when the file system holding dir has less than `needed` bytes free
// (a 100 GB model should not fail at 97 %).
Status check_free_space(const fs::path& dir, std::uint64_t needed);

}  // namespace sluice::hub
