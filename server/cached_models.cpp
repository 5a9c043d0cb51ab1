#include "server/cached_models.h"

#include <algorithm>
#include <fstream>
#include <system_error>

#include "hub/hub_cache.h"
#include "hub/hub_id.h"
#include "quant/model_info.h"

namespace sluice::server {
namespace fs = std::filesystem;
namespace {

// refs/main's commit when it has a snapshot, else the most recently written snapshot.
std::optional<std::string> pick_commit(const fs::path& repo_folder) {
  std::error_code ec;
  std::ifstream ref(repo_folder / "refs" / "main");
  std::string commit;
  if (ref >> commit && hub::is_commit_hash(commit) && fs::is_directory(repo_folder / "snapshots" / commit, ec)) return commit;
  std::optional<std::string> newest;
  fs::file_time_type newest_time{};
  for (fs::directory_iterator it(repo_folder / "snapshots", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!hub::is_commit_hash(name) || !it->is_directory(ec)) continue;
    const auto when = it->last_write_time(ec);
    if (!newest || when > newest_time) newest = name, newest_time = when;
  }
  return newest;
}

std::uint64_t folder_bytes(const fs::path& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) total += it->file_size(ec);  // follows the snapshot's links to the blobs
  }
  return total;
}

}  // namespace

std::vector<CachedModel> list_cached_models(const fs::path& cache_root) {
  std::vector<CachedModel> out;
  std::error_code ec;
  std::vector<fs::path> folders;
  for (fs::directory_iterator it(cache_root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().starts_with("models--") && it->is_directory(ec)) folders.push_back(it->path());
  }
  std::sort(folders.begin(), folders.end());
  if (folders.size() > kMaxCachedModels) folders.resize(kMaxCachedModels);
  for (const auto& folder : folders) {
    std::string id = folder.filename().string().substr(8);
    if (const auto sep = id.find("--"); sep != std::string::npos) id.replace(sep, 2, "/");
    if (!hub::parse_hub_id(id)) continue;  // not a name the hub would give
    const auto commit = pick_commit(folder);
    if (!commit) continue;
    CachedModel m;
    m.id = id;
    m.commit = *commit;
    const fs::path snapshot = folder / "snapshots" / *commit;
    m.snapshot_dir = snapshot.string();
    m.missing = hub::snapshot_missing(snapshot);
    m.complete = m.missing.empty();
    m.disk_bytes = folder_bytes(snapshot);
    if (m.complete) {
      // Headers only: no weight is read.
      if (auto info = quant::inspect_model(snapshot, nullptr)) {
        m.weights_bytes = info->bytes;
        for (const auto& k : info->kv)
          if (k.name == "f16") m.kv_bytes_per_token = k.bytes_per_token;
        m.needed_bytes = m.weights_bytes + m.kv_bytes_per_token * kEstimateContext + info->state_bytes_per_sequence;
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace sluice::server
