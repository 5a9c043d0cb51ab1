#pragma once
// The Hugging Face cache, laid out exactly as huggingface_hub writes it, so a model another tool
// downloaded is found here and ours is found by them:
//
//   <cache root>/models--org--name/
//     blobs/<etag>                      file contents, named by the hub's ETag (sha256 of an LFS file,
//                                       git blob id of a small one); <etag>.incomplete while downloading
//     refs/<revision>                   the commit a branch or tag pointed to (no newline)
//     snapshots/<commit>/<file>         relative symlinks to ../../blobs/<etag>
//
// The root is $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (huggingface_hub's constants.py).
#include <filesystem>
#include <optional>
#include <string>

#include "util/result.h"

namespace sluice::hub {

namespace fs = std::filesystem;

fs::path hub_cache_root();          // from the environment, as above
fs::path hf_home();                 // $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface
std::string repo_folder_name(const std::string& repo);  // "org/name" -> "models--org--name"

// A file name from the hub's listing is used as a path under snapshots/<commit>/: relative, no "..",
// no empty or hidden-escape segments.
bool safe_repo_filename(const std::string& filename);
// An ETag names a blob: hex digits only (sha256 or git sha1), so it is a plain file name.
bool safe_etag(const std::string& etag);
std::string normalize_etag(std::string etag);  // an ETag header's W/"abc" or "abc" -> abc

class RepoCache {
 public:
  RepoCache(fs::path root, const std::string& repo);

  const fs::path& root() const { return root_; }
  const fs::path& folder() const { return folder_; }
  fs::path blob(const std::string& etag) const { return folder_ / "blobs" / etag; }
  fs::path incomplete_blob(const std::string& etag) const { return folder_ / "blobs" / (etag + ".incomplete"); }
  fs::path snapshot(const std::string& commit) const { return folder_ / "snapshots" / commit; }

  // The commit a revision means here: the revision itself when it is a commit hash, else refs/<revision>.
  std::optional<std::string> commit_for(const std::string& revision) const;
  // Records that revision points at commit (atomically: a temporary file renamed over the ref). A
  // commit hash as revision needs no ref.
  Status write_ref(const std::string& revision, const std::string& commit) const;
  // snapshots/<commit>/<filename> -> the blob, as a relative symlink (../../blobs/<etag>, one more
  // ../ per folder in filename). Replaces what was there atomically (a reader never finds it missing).
  Status link_snapshot_file(const std::string& commit, const std::string& filename, const std::string& etag) const;
  // Whether snapshots/<commit>/<filename> resolves to a file (a dangling link does not count).
  bool has_file(const std::string& commit, const std::string& filename) const;
  // CACHEDIR.TAG in the root (backup tools skip the cache), as huggingface_hub writes it.
  void tag_cache_dir() const;

 private:
  fs::path root_;
  fs::path folder_;
};

// What a snapshot folder lacks to be loaded: config.json, the weights (every shard a
// *.safetensors.index.json names, else at least one *.safetensors), tokenizer.json. Empty when complete.
std::string snapshot_missing(const fs::path& snapshot_dir);

}  // namespace sluice::hub
