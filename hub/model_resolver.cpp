#include "hub/model_resolver.h"

#include <atomic>
#include <mutex>
#include <system_error>
#include <thread>

#include "hub/blob_download.h"
#include "hub/hub_cache.h"
#include "hub/model_files.h"

namespace sluice::hub {
namespace {

// Runs work(i) for i in [0, count) on up to `threads` threads; the first error stops the others
// (between files, and inside a transfer through `stop`) and is returned.
Status run_parallel(std::size_t count, int threads, std::atomic<bool>& stop, const std::function<Status(std::size_t)>& work) {
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  Status first;
  auto worker = [&] {
    for (std::size_t i; !stop.load() && (i = next.fetch_add(1)) < count;) {
      if (auto ok = work(i); !ok) {
        std::lock_guard lock(mutex);
        if (first) first = ok.error();
        stop = true;
      }
    }
  };
  std::vector<std::thread> pool;
  const std::size_t n = std::min<std::size_t>(count, static_cast<std::size_t>(std::max(1, threads)));
  for (std::size_t t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return first;
}

Result<ResolvedModel> from_cache(const HubId& id, const RepoCache& cache) {
  const auto commit = cache.commit_for(id.revision);
  if (!commit) return make_error("no snapshot of " + id.text() + " in " + cache.root().string());
  const fs::path dir = cache.snapshot(*commit);
  if (const auto missing = snapshot_missing(dir); !missing.empty())
    return make_error("the cached snapshot " + dir.string() + " lacks " + missing);
  return ResolvedModel{dir.string(), id.repo, true, *commit};
}

}  // namespace

std::string model_name_of_folder(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  const fs::path parent = p.parent_path();
  const std::string repo_folder = parent.parent_path().filename().string();
  // .../models--org--name/snapshots/<commit>: the name of the repo, not of the commit.
  if (parent.filename() == "snapshots" && repo_folder.starts_with("models--") && is_commit_hash(p.filename().string())) {
    std::string name = repo_folder.substr(8);
    if (const auto sep = name.find("--"); sep != std::string::npos) name.replace(sep, 2, "/");
    return name;
  }
  return p.filename().string();
}

Result<ResolvedModel> fetch_hub_model(const HubId& id, const ResolveOptions& o) {
  const RepoCache cache(hub_cache_root(), id.repo);
  DownloadProgress own;
  DownloadProgress& progress = o.progress ? *o.progress : own;
  progress.begin(id.repo);
  auto failed = [&](Error e) -> Result<ResolvedModel> {
    progress.fail(e.message);
    return e;
  };

  if (o.settings.offline) {
    auto cached = from_cache(id, cache);
    if (!cached)
      return failed(make_error("HF_HUB_OFFLINE is set and " + id.text() + " is not in the cache: " + cached.message() +
                               " (download it first: `sluice download " + id.text() + "` without HF_HUB_OFFLINE)"));
    progress.set_phase("done");
    return cached;
  }
  // A commit is immutable: a complete snapshot of it needs no request (huggingface_hub does the same).
  if (is_commit_hash(id.revision))
    if (auto cached = from_cache(id, cache)) {
      progress.set_phase("done");
      return cached;
    }

  const HubApi api(o.settings, o.step_timeout);
  auto info = api.repo_info(id);
  if (!info) {
    // The hub unreachable (or refusing) with the model cached: use it, as huggingface_hub does.
    if (auto cached = from_cache(id, cache)) {
      if (o.warn) o.warn("cannot check the hub for a newer " + id.text() + " (" + info.message() + "); using the cached snapshot " + cached->commit);
      progress.set_phase("done");
      return cached;
    }
    return failed(info.error());
  }
  const std::string& commit = info->commit;
  const auto files = select_model_files(info->files);
  const auto has = [&](auto pred) { return std::any_of(files.begin(), files.end(), pred); };
  if (!has([](const std::string& f) { return f == "config.json"; }))
    return failed(make_error(id.text() + " has no config.json: it is not a Transformers model repo"));
  if (!has([](const std::string& f) { return f.ends_with(".safetensors"); }))
    return failed(make_error(id.text() + " has no .safetensors weights (Sluice loads safetensors, not .bin, .gguf or ONNX files)"));

  std::vector<std::string> missing;
  for (const auto& f : files)
    if (!cache.has_file(commit, f)) missing.push_back(f);

  if (!missing.empty()) {
    std::atomic<bool> own_stop{false};
    std::atomic<bool>& stop = o.cancel ? *o.cancel : own_stop;
    std::vector<FileMetadata> metas(missing.size());
    auto looked_up = run_parallel(missing.size(), o.parallel, stop, [&](std::size_t i) -> Status {
      auto m = api.file_metadata(id.repo, commit, missing[i]);
      if (!m) return m.error();
      metas[i] = std::move(*m);
      return {};
    });
    if (!looked_up) return failed(looked_up.error());
    std::uint64_t total = 0, resumed = 0;
    std::error_code ec;
    for (const auto& m : metas) {
      if (fs::is_regular_file(cache.blob(m.etag), ec)) continue;
      total += m.size;
      if (fs::is_regular_file(cache.incomplete_blob(m.etag), ec)) resumed += std::min<std::uint64_t>(fs::file_size(cache.incomplete_blob(m.etag), ec), m.size);
    }
    fs::create_directories(cache.folder() / "blobs", ec);
    if (auto room = check_free_space(cache.folder() / "blobs", total - resumed); !room) return failed(room.error());
    progress.plan(static_cast<int>(missing.size()), total);
    auto downloaded = run_parallel(missing.size(), o.parallel, stop, [&](std::size_t i) -> Status {
      std::error_code e;
      if (!fs::is_regular_file(cache.blob(metas[i].etag), e)) {  // a blob shared with another revision is reused
        if (auto ok = download_blob(api, cache, BlobRequest{missing[i], metas[i]}, progress, stop); !ok) return ok;
      }
      if (auto ok = cache.link_snapshot_file(commit, missing[i], metas[i].etag); !ok) return ok;
      progress.file_done(missing[i]);
      return {};
    });
    if (!downloaded) return failed(downloaded.error());
    if (stop.load()) return failed(make_error(id.text() + ": the download was cancelled"));
    cache.tag_cache_dir();
  }
  if (auto ok = cache.write_ref(id.revision, commit); !ok && o.warn) o.warn(ok.message());
  const fs::path dir = cache.snapshot(commit);
  if (const auto lacking = snapshot_missing(dir); !lacking.empty())
    return failed(make_error(id.text() + ": the snapshot " + dir.string() + " lacks " + lacking + " (not in the repo's file list?)"));
  progress.set_phase("done");
  return ResolvedModel{dir.string(), id.repo, true, commit};
}

Result<ResolvedModel> resolve_model(const std::string& model, const ResolveOptions& options) {
  if (!names_hub_model(model)) return ResolvedModel{model, model_name_of_folder(model), false, {}};
  auto id = parse_hub_id(model);
  if (!id) return make_error("no folder " + model + ", and not a hub id: " + id.message());
  auto fetched = fetch_hub_model(*id, options);
  // A mistyped folder reads as a hub id: say that both were tried.
  if (!fetched) return make_error(fetched.message() + " (there is no folder " + model + " either)");
  return fetched;
}

}  // namespace sluice::hub
