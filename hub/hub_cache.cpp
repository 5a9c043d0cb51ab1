#include "hub/hub_cache.h"


#include <cctype>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>

#include "hub/hub_id.h"
#include "util/json.h"

namespace sluice::hub {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// `~` at the front means the home folder (huggingface_hub expands it in every cache variable).
fs::path expand_home(const std::string& p) {
  if (p.empty() || p[0] != '~') return p;
  return fs::path(env("HOME")) / p.substr(p.size() > 1 && p[1] == '/' ? 2 : 1);
}

std::string random_suffix() {
  std::random_device rd;
  std::ostringstream s;
  s << std::hex << rd() << rd();
  return s.str();
}

}  // namespace

fs::path hf_home() {
  if (auto h = env("HF_HOME"); !h.empty()) return expand_home(h);
  if (auto x = env("XDG_CACHE_HOME"); !x.empty()) return expand_home(x) / "huggingface";
  return fs::path(env("HOME")) / ".cache" / "huggingface";
}

fs::path hub_cache_root() {
  if (auto c = env("HF_HUB_CACHE"); !c.empty()) return expand_home(c);
  if (auto c = env("HUGGINGFACE_HUB_CACHE"); !c.empty()) return expand_home(c);
  return hf_home() / "hub";
}

std::string repo_folder_name(const std::string& repo) {
  std::string name = "models";
  std::size_t start = 0;
  while (true) {
    const auto slash = repo.find('/', start);
    name += "--" + repo.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return name;
}

bool safe_repo_filename(const std::string& filename) {
  if (filename.empty() || filename.size() > 1024 || filename.front() == '/') return false;
  std::size_t start = 0;
  while (start <= filename.size()) {
    auto slash = filename.find('/', start);
    if (slash == std::string::npos) slash = filename.size();
    const std::string part = filename.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = slash + 1;
  }
  return filename.find('\\') == std::string::npos && filename.find('\0') == std::string::npos;
}

bool safe_etag(const std::string& etag) {
  if (etag.empty() || etag.size() > 128) return false;
  for (char c : etag)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
  return true;
}

std::string normalize_etag(std::string etag) {
  if (etag.starts_with("W/")) etag = etag.substr(2);
  while (!etag.empty() && etag.front() == '"') etag.erase(etag.begin());
  while (!etag.empty() && etag.back() == '"') etag.pop_back();
  return etag;
}

RepoCache::RepoCache(fs::path root, const std::string& repo) : root_(std::move(root)), folder_(root_ / repo_folder_name(repo)) {}

std::optional<std::string> RepoCache::commit_for(const std::string& revision) const {
  if (is_commit_hash(revision)) return revision;
  std::ifstream in(folder_ / "refs" / revision);
  std::string commit;
  if (!in || !std::getline(in, commit)) return std::nullopt;
  // huggingface_hub writes the hash alone; tolerate trailing whitespace from hand edits.
  while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
  if (!is_commit_hash(commit)) return std::nullopt;
  return commit;
}

Status RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return {};
  if (commit_for(revision) == commit) return {};  // unchanged: a read-only cache stays usable
  const fs::path ref = folder_ / "refs" / revision;
  std::error_code ec;
  fs::create_directories(ref.parent_path(), ec);
  if (ec) return make_error("cannot create " + ref.parent_path().string() + ": " + ec.message());
  const fs::path tmp = ref.parent_path() / (ref.filename().string() + "." + random_suffix() + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;
    if (!out.flush()) return make_error("cannot write " + tmp.string());
  }
  fs::rename(tmp, ref, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return make_error("cannot write " + ref.string());
  }
  return {};
}

Status RepoCache::link_snapshot_file(const std::string& commit, const std::string& filename, const std::string& etag) const {
  const fs::path link = snapshot(commit) / filename;
  std::error_code ec;
  fs::create_directories(link.parent_path(), ec);
  if (ec) return make_error("cannot create " + link.parent_path().string() + ": " + ec.message());
  // snapshots/<commit>/a/b.json -> ../../../blobs/<etag>: up out of the file's folders, the commit and snapshots.
  const fs::path relative(filename);
  fs::path target;
  for (auto it = relative.begin(); it != relative.end(); ++it) target /= "..";
  target = target / ".." / "blobs" / etag;
  if (fs::is_symlink(link, ec) && fs::read_symlink(link, ec) == target) return {};
  // Made under a temporary name and renamed over the old one: another process reading the snapshot
  // (or linking the same file) never sees it missing.
  const fs::path tmp = link.parent_path() / ("." + link.filename().string() + "." + random_suffix() + ".tmp");
  fs::create_symlink(target, tmp, ec);
  if (!ec) fs::rename(tmp, link, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return make_error("cannot link " + link.string() + ": " + ec.message());
  }
  return {};
}

bool RepoCache::has_file(const std::string& commit, const std::string& filename) const {
  std::error_code ec;
  return fs::is_regular_file(snapshot(commit) / filename, ec);
}

void RepoCache::tag_cache_dir() const {
  const fs::path tag = root_ / "CACHEDIR.TAG";
  std::error_code ec;
  if (fs::exists(tag, ec)) return;
  std::ofstream out(tag, std::ios::binary);
  out << "Signature: 8a477f597d28d172789f06886806bc55\n"
         "# This file is a cache directory tag created by huggingface_hub.\n"
         "# For information about cache directory tags, see:\n"
         "#\thttps://bford.info/cachedir/\n";
}

std::string snapshot_missing(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / "config.json", ec)) return "config.json";
  if (!fs::is_regular_file(dir / "tokenizer.json", ec)) return "tokenizer.json";
  bool any_weights = false;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".safetensors.index.json")) {
      auto index = json::parse_file(entry.path());
      if (!index) return name + " (unreadable: " + index.message() + ")";
      const auto* map = json::member(*index, "weight_map");
      if (!map || !map->IsObject()) return name + " (no weight_map)";
      for (auto m = map->MemberBegin(); m != map->MemberEnd(); ++m) {
        if (!m->value.IsString()) return name + " (a weight_map value is not a file name)";
        const std::string shard = m->value.GetString();
        if (!safe_repo_filename(shard) || !fs::is_regular_file(dir / shard, ec)) return shard;
      }
      any_weights = true;
    } else if (name.ends_with(".safetensors") && fs::is_regular_file(entry.path(), ec)) {
      any_weights = true;
    }
  }
  if (!any_weights) return "*.safetensors";
  return {};
}

}  // namespace sluice::hub
