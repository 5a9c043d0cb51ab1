#include "hub/blob_download.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <memory>
#include <thread>

#include <openssl/evp.h>

namespace sluice::hub {
namespace {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) { reset(); }
  void reset() { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void update(const void* data, std::size_t n) { EVP_DigestUpdate(ctx_.get(), data, n); }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), digest, &n);
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < n; ++i) out += {digits[digest[i] >> 4], digits[digest[i] & 15]};
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

// An exclusive flock(2) on a file, released when destroyed.
class FileLock {
 public:
  explicit FileLock(const fs::path& path) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    fd_ = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

std::string human_bytes(std::uint64_t n) {
  char buf[32];
  if (n >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GB", n / 1e9);
  else if (n >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MB", n / 1e6);
  else std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(n));
  return buf;
}

bool retriable(int status) { return status == 408 || status == 429 || status >= 500; }

}  // namespace

bool is_sha256_etag(const std::string& etag) { return etag.size() == 64 && safe_etag(etag); }

Status check_free_space(const fs::path& dir, std::uint64_t needed) {
  std::error_code ec;
  const auto space = fs::space(dir, ec);
  if (ec) return {};  // unknown: the writes themselves will say
  if (space.available >= needed) return {};
  return make_error("not enough disk space in " + dir.string() + ": the download needs " + human_bytes(needed) + ", " +
                    human_bytes(space.available) + " free (set HF_HUB_CACHE to a larger disk)");
}

Status download_blob(const HubApi& api, const RepoCache& cache, const BlobRequest& rq, DownloadProgress& progress,
                     const std::atomic<bool>& stop) {
  const FileMetadata& meta = rq.meta;
  const fs::path blob = cache.blob(meta.etag);
  const fs::path partial = cache.incomplete_blob(meta.etag);
  std::error_code ec;
  fs::create_directories(blob.parent_path(), ec);
  if (ec) return make_error("cannot create " + blob.parent_path().string() + ": " + ec.message());
  // The same blob may be wanted by another process (or repo): one downloads, the other waits and reuses.
  FileLock lock(cache.root() / ".locks" / cache.folder().filename() / (meta.etag + ".lock"));
  if (fs::is_regular_file(blob, ec)) {
    progress.add_bytes(meta.size);
    return {};
  }

  std::uint64_t have = fs::is_regular_file(partial, ec) ? fs::file_size(partial, ec) : 0;
  if (ec || (meta.size_known && have > meta.size)) have = 0;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(partial.c_str(), have ? "r+b" : "wb"), &std::fclose);
  if (!out) return make_error("cannot write " + partial.string());

  // The hash covers the bytes a resumed transfer already has, then everything that arrives.
  Sha256 hash;
  std::vector<char> buffer(1u << 20);
  for (std::uint64_t left = have; left > 0;) {
    const std::size_t n = std::fread(buffer.data(), 1, std::min<std::uint64_t>(left, buffer.size()), out.get());
    if (n == 0) return make_error("cannot read " + partial.string());
    hash.update(buffer.data(), n);
    left -= n;
  }
  std::fseek(out.get(), static_cast<long>(have), SEEK_SET);
  progress.add_bytes(have);

  std::string last_error;
  bool complete = meta.size_known && have == meta.size;
  for (int attempt = 1; attempt <= rq.attempts && !complete; ++attempt) {
    BodyReceiver receiver;
    receiver.start = [&](const HttpResponse& head) -> Status {
      if (have > 0 && head.status == 200) {  // Range ignored: the whole file comes again
        std::fflush(out.get());
        if (::ftruncate(::fileno(out.get()), 0) != 0) return make_error("cannot truncate " + partial.string());
        std::fseek(out.get(), 0, SEEK_SET);
        hash.reset();
        progress.drop_bytes(have);
        have = 0;
      } else if (head.status == 206 && !head.header("Content-Range").starts_with("bytes " + std::to_string(have) + "-")) {
        return make_error(rq.filename + ": the server resumed at the wrong place (Content-Range: " + head.header("Content-Range") + ")");
      }
      return {};
    };
    receiver.data = [&](const char* data, std::size_t n) -> Status {
      if (stop.load()) return make_error("stopped");
      if (std::fwrite(data, 1, n, out.get()) != n) return make_error("cannot write " + partial.string() + " (disk full?)");
      hash.update(data, n);
      have += n;
      progress.add_bytes(n);
      if (meta.size_known && have > meta.size)
        return make_error(rq.filename + ": the server sent more than the " + std::to_string(meta.size) + " bytes announced");
      return {};
    };
    auto status = api.fetch(meta.location, have, receiver);
    std::fflush(out.get());
    if (stop.load()) return make_error("stopped");
    if (status && *status / 100 == 2) {
      complete = !meta.size_known || have == meta.size;
      if (!complete) last_error = "the transfer ended after " + std::to_string(have) + " of " + std::to_string(meta.size) + " bytes";
    } else if (status) {
      last_error = "HTTP " + std::to_string(*status) + " from " + meta.location.origin();
      if (!retriable(*status)) break;
    } else {
      last_error = status.message();
      if (last_error.find("sent more than") != std::string::npos || last_error.find("wrong place") != std::string::npos) break;
    }
    if (!complete && attempt < rq.attempts) std::this_thread::sleep_for(std::chrono::milliseconds(250 * attempt));
  }
  if (std::fflush(out.get()) != 0 || ::fsync(::fileno(out.get())) != 0) return make_error("cannot write " + partial.string());
  out.reset();
  if (!complete) {
    if (meta.size_known && have > meta.size) fs::remove(partial, ec);
    return make_error(rq.filename + ": download failed: " + last_error +
                      (fs::exists(partial, ec) ? " (" + human_bytes(have) + " kept; the next run resumes)" : ""));
  }
  if (is_sha256_etag(meta.etag)) {
    const std::string got = hash.hex();
    std::string want = meta.etag;
    for (char& c : want) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (got != want) {
      fs::remove(partial, ec);
      return make_error(rq.filename + ": sha256 mismatch (the hub says " + want + ", the bytes received hash to " + got +
                        "): the corrupted download was deleted; run again to fetch it anew");
    }
  }
  fs::rename(partial, blob, ec);
  if (ec) return make_error("cannot move " + partial.string() + " to " + blob.string() + ": " + ec.message());
  return {};
}

}  // namespace sluice::hub
