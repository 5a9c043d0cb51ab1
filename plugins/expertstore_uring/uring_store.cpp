#include "uring_store.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "util/plugin_error.h"

using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kAlign = 4096;  // O_DIRECT alignment that every Linux file system accepts

struct Entry {
  uint32_t layer = 0, expert = 0;
  std::vector<void*> buffers;        // one aligned buffer per part
  std::vector<const void*> parts;    // where each part's bytes start inside its buffer
  uint64_t bytes = 0;                // buffer bytes held
  int pins = 0;
  int pending_reads = 0;             // reads in flight (prefetch or acquire)
  std::string error;                 // a failed read: the entry is dropped at the next acquire
  std::list<uint64_t>::iterator lru; // position when unpinned and loaded
  bool in_lru = false;
};

// One request: a run of an expert's parts that lie back to back in one file (a repacked model has
// one run per expert), read as a whole.
struct Read {
  uint64_t key;
  uint32_t file;
  uint64_t offset;        // first byte needed
  uint64_t needed_end;    // one past the last byte needed
  uint64_t read_start;    // where the (aligned) read starts
  uint64_t expect;        // bytes asked for
  Clock::time_point start;
};

struct FileInfo {
  std::string path;
  int fd = -1;
  bool direct = false;
  struct stat st {};
};

}  // namespace

struct sl_expertstore {
  sluice::uring::Options options;
  std::vector<FileInfo> files;
  std::vector<sl_expert_part> parts;
  uint32_t n_layers = 0, n_experts = 0, n_parts = 0;
  io_uring ring{};
  bool ring_ok = false;
  unsigned in_flight = 0;
  std::unordered_map<uint64_t, Entry> cache;
  std::list<uint64_t> lru;  // unpinned loaded entries, least recent first
  uint64_t cache_bytes = 0;
  std::vector<Read> reads;  // indexed by user_data
  std::vector<uint64_t> free_reads;
  sl_expertstore_stats stats{};
  std::vector<sl_expertstore_layer_stats> layer_stats;
  std::vector<double> latencies_us;  // a bounded reservoir for percentiles
  Clock::time_point busy_since;
};

namespace sluice::uring {

bool parse_options(const char* text, Options& out, std::string& error) {
  std::stringstream in(text ? text : "");
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "1" : item.substr(eq + 1);
    char* end = nullptr;
    const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
    if (!end || *end) {
      error = "option '" + key + "': '" + value + "' is not a number";
      return false;
    }
    if (key == "direct") out.direct = v != 0;
    else if (key == "uring") out.use_uring = v != 0;
    else if (key == "qd") out.queue_depth = static_cast<unsigned>(std::clamp<unsigned long long>(v, 1, 4096));
    else {
      error = "unknown option '" + key + "' (direct, uring, qd)";
      return false;
    }
  }
  return true;
}

namespace {

uint64_t key_of(uint32_t layer, uint32_t expert) { return (static_cast<uint64_t>(layer) << 32) | expert; }

const sl_expert_part& part_of(const sl_expertstore* s, uint32_t layer, uint32_t expert, uint32_t p) {
  return s->parts[(static_cast<std::size_t>(layer) * s->n_experts + expert) * s->n_parts + p];
}

void record_latency(sl_expertstore* s, double us) {
  if (s->latencies_us.size() < 65536) {
    s->latencies_us.push_back(us);
  } else {
    s->latencies_us[static_cast<std::size_t>(s->stats.read_requests) % s->latencies_us.size()] = us;
  }
}

void free_entry_buffers(Entry& e) {
  for (void* b : e.buffers) std::free(b);
  e.buffers.clear();
  e.parts.clear();
}

void drop(sl_expertstore* s, uint64_t key) {
  auto it = s->cache.find(key);
  if (it == s->cache.end()) return;
  if (it->second.in_lru) s->lru.erase(it->second.lru);
  s->cache_bytes -= it->second.bytes;
  free_entry_buffers(it->second);
  s->cache.erase(it);
}

// Evicts least recently used unpinned entries until `extra` more bytes fit the budget. Entries
// with reads in flight are never evicted: the kernel is still writing into their buffers.
void make_room(sl_expertstore* s, uint64_t extra) {
  for (auto it = s->lru.begin(); s->cache_bytes + extra > s->stats.budget_bytes && it != s->lru.end();) {
    const uint64_t victim = *it++;
    if (s->cache[victim].pending_reads > 0) continue;
    drop(s, victim);
    ++s->stats.evictions;
  }
}

// Has the file changed size or identity since the store opened it?
std::string file_changed(const FileInfo& f) {
  struct stat now {};
  if (fstat(f.fd, &now) != 0) return std::string("cannot stat: ") + std::strerror(errno);
  if (now.st_size != f.st.st_size || now.st_mtim.tv_sec != f.st.st_mtim.tv_sec || now.st_mtim.tv_nsec != f.st.st_mtim.tv_nsec)
    return "the file changed after the model was loaded";
  return "";
}

void complete_read(sl_expertstore* s, uint64_t id, int64_t result) {
  Read r = s->reads[id];
  s->free_reads.push_back(id);
  auto it = s->cache.find(r.key);
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - r.start).count();
  record_latency(s, us);
  if (it == s->cache.end()) return;
  Entry& e = it->second;
  --e.pending_reads;
  const FileInfo& f = s->files[r.file];
  if (result < 0) {
    e.error = f.path + ": read of " + std::to_string(r.expect) + " bytes at " + std::to_string(r.offset) + " failed: " +
              std::strerror(static_cast<int>(-result));
  } else if (r.read_start + static_cast<uint64_t>(result) < r.needed_end) {
    // Short: fine only for the aligned tail past the file's end, never for bytes we need.
    const std::string why = file_changed(f);
    e.error = f.path + ": short read at " + std::to_string(r.offset) + " (" + std::to_string(result) + " of " +
              std::to_string(r.expect) + " bytes)" + (why.empty() ? "" : ": " + why);
  }
  if (result > 0) {
    s->stats.bytes_read += static_cast<uint64_t>(result);
    s->layer_stats[e.layer].bytes_read += static_cast<uint64_t>(result);
  }
}

// Waits for one completion (or all of them, when `all`), accounting the busy time.
void reap(sl_expertstore* s, bool all) {
  io_uring_submit(&s->ring);  // queued reads must be in flight before waiting for them
  while (s->in_flight > 0) {
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(&s->ring, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0 || !cqe) break;
    complete_read(s, io_uring_cqe_get_data64(cqe), cqe->res);
    io_uring_cqe_seen(&s->ring, cqe);
    --s->in_flight;
    if (s->in_flight == 0) s->stats.read_seconds += std::chrono::duration<double>(Clock::now() - s->busy_since).count();
    if (!all) break;
  }
}

// Starts reading every part of an entry. With io_uring the reads are queued (submitted by the
// caller); with pread they complete here.
bool start_reads(sl_expertstore* s, uint64_t key, Entry& e, std::string& error) {
  // Parts in file order, so that parts lying back to back become one request.
  std::vector<uint32_t> order(s->n_parts);
  for (uint32_t p = 0; p < s->n_parts; ++p) order[p] = p;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const auto &pa = part_of(s, e.layer, e.expert, a), &pb = part_of(s, e.layer, e.expert, b);
    return pa.file_index != pb.file_index ? pa.file_index < pb.file_index : pa.offset < pb.offset;
  });
  e.parts.assign(s->n_parts, nullptr);
  for (std::size_t i = 0; i < order.size();) {
    const auto& first = part_of(s, e.layer, e.expert, order[i]);
    std::size_t j = i + 1;
    uint64_t run_end = first.offset + first.bytes;
    while (j < order.size()) {
      const auto& next = part_of(s, e.layer, e.expert, order[j]);
      if (next.file_index != first.file_index || next.offset != run_end) break;
      run_end += next.bytes;
      ++j;
    }
    const FileInfo& f = s->files[first.file_index];
    const uint64_t start = f.direct ? first.offset / kAlign * kAlign : first.offset;
    const uint64_t end = f.direct ? (run_end + kAlign - 1) / kAlign * kAlign : run_end;
    const uint64_t len = std::max<uint64_t>(end - start, 1);
    void* buf = nullptr;
    if (posix_memalign(&buf, kAlign, (len + kAlign - 1) / kAlign * kAlign) != 0) {
      error = "out of memory for an expert buffer of " + std::to_string(len) + " bytes";
      return false;
    }
    e.buffers.push_back(buf);
    for (std::size_t k = i; k < j; ++k)
      e.parts[order[k]] = static_cast<std::byte*>(buf) + (part_of(s, e.layer, e.expert, order[k]).offset - start);
    e.bytes += len;
    s->cache_bytes += len;
    uint64_t id;
    if (!s->free_reads.empty()) {
      id = s->free_reads.back();
      s->free_reads.pop_back();
    } else {
      id = s->reads.size();
      s->reads.emplace_back();
    }
    s->reads[id] = Read{key, first.file_index, first.offset, run_end, start, len, Clock::now()};
    ++e.pending_reads;
    ++s->stats.read_requests;
    if (s->ring_ok) {
      while (s->in_flight >= s->options.queue_depth) reap(s, false);
      io_uring_sqe* sqe = io_uring_get_sqe(&s->ring);
      if (!sqe) {
        io_uring_submit(&s->ring);
        sqe = io_uring_get_sqe(&s->ring);
      }
      io_uring_prep_read(sqe, f.fd, buf, static_cast<unsigned>(len), start);
      io_uring_sqe_set_data64(sqe, id);
      if (s->in_flight == 0) s->busy_since = Clock::now();
      ++s->in_flight;
    } else {
      const auto t0 = Clock::now();
      uint64_t done = 0;
      int64_t result = 0;
      while (done < len) {
        const ssize_t n = pread(f.fd, static_cast<std::byte*>(buf) + done, len - done, static_cast<off_t>(start + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          result = n < 0 ? -errno : static_cast<int64_t>(done);
          break;
        }
        done += static_cast<uint64_t>(n);
        result = static_cast<int64_t>(done);
      }
      s->stats.read_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      complete_read(s, id, result);
    }
    i = j;
  }
  return true;
}

sl_status create(const sl_expertstore_config* cfg, sl_expertstore** out, sl_error* err) {
  try {
    auto s = std::make_unique<sl_expertstore>();
    std::string option_error;
    if (!parse_options(cfg->options, s->options, option_error)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "uring store: " + option_error);
    s->n_layers = cfg->n_layers;
    s->n_experts = cfg->n_experts;
    s->n_parts = cfg->n_parts;
    s->parts.assign(cfg->parts, cfg->parts + static_cast<std::size_t>(cfg->n_layers) * cfg->n_experts * cfg->n_parts);
    s->layer_stats.assign(cfg->n_layers, sl_expertstore_layer_stats{sizeof(sl_expertstore_layer_stats), SL_ABI_VERSION, 0, 0, 0});
    bool all_direct = true;
    for (uint32_t i = 0; i < cfg->n_files; ++i) {
      FileInfo f;
      f.path = cfg->files[i];
      if (s->options.direct) {
        f.fd = open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
        f.direct = f.fd >= 0;
      }
      if (f.fd < 0) f.fd = open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (f.fd < 0) return set_error(err, SL_ERR_IO, "uring store: cannot open " + f.path + ": " + std::strerror(errno));
      fstat(f.fd, &f.st);
      all_direct = all_direct && f.direct;
      s->files.push_back(f);
    }
    uint64_t expert_bytes = 0;
    for (const auto& p : s->parts) {
      if (p.file_index >= s->files.size() || p.offset + p.bytes > static_cast<uint64_t>(s->files[p.file_index].st.st_size))
        return set_error(err, SL_ERR_INVALID_ARGUMENT, "uring store: an expert part lies outside its file");
      expert_bytes += p.bytes;
    }
    if (s->options.direct && !all_direct)
      std::fprintf(stderr, "sluice uring store: warning: O_DIRECT is not available for every model file; reads go through the page cache\n");
    if (s->options.use_uring) {
      const int rc = io_uring_queue_init(std::max(8u, s->options.queue_depth), &s->ring, 0);
      s->ring_ok = rc == 0;
      if (!s->ring_ok)
        std::fprintf(stderr, "sluice uring store: warning: io_uring unavailable (%s); using pread\n", std::strerror(-rc));
    }
    s->stats.struct_size = sizeof(sl_expertstore_stats);
    s->stats.budget_bytes = cfg->budget_bytes ? cfg->budget_bytes : std::max<uint64_t>(expert_bytes / 4, 1);
    s->stats.direct_io = all_direct ? 1 : 0;
    *out = s.release();
    return SL_OK;
  } catch (const std::bad_alloc&) {
    return set_error(err, SL_ERR_OUT_OF_MEMORY, "uring store: out of memory");
  }
}

void destroy(sl_expertstore* s) {
  if (!s) return;
  if (s->ring_ok) {
    reap(s, true);
    io_uring_queue_exit(&s->ring);
  }
  for (auto& [key, e] : s->cache) free_entry_buffers(e);
  for (auto& f : s->files) close(f.fd);
  delete s;
}

// Starts reading one expert into a new cache entry. A pinned entry is the caller's (acquire); an
// unpinned one waits in the LRU, newest, until acquired (prefetch).
bool load(sl_expertstore* s, uint32_t layer, uint32_t expert, bool pinned, std::string& error) {
  const uint64_t key = key_of(layer, expert);
  uint64_t need = 0;
  for (uint32_t p = 0; p < s->n_parts; ++p) need += part_of(s, layer, expert, p).bytes + 2 * kAlign;
  make_room(s, need);
  Entry& e = s->cache[key];
  e.layer = layer;
  e.expert = expert;
  if (pinned) {
    e.pins = 1;
  } else {
    s->lru.push_back(key);
    e.lru = std::prev(s->lru.end());
    e.in_lru = true;
  }
  if (!start_reads(s, key, e, error)) {
    if (e.pending_reads == 0) drop(s, key);
    return false;
  }
  return true;
}

void unpin(sl_expertstore* s, uint64_t key) {
  auto it = s->cache.find(key);
  if (it == s->cache.end() || it->second.pins == 0) return;
  if (--it->second.pins == 0) {
    s->lru.push_back(key);
    it->second.lru = std::prev(s->lru.end());
    it->second.in_lru = true;
  }
}

sl_status acquire(sl_expertstore* s, uint32_t layer, const uint32_t* experts, uint32_t n, const void** parts_out,
                  sl_error* err) {
  if (layer >= s->n_layers) return set_error(err, SL_ERR_INVALID_ARGUMENT, "layer " + std::to_string(layer) + " out of range");
  for (uint32_t i = 0; i < n; ++i)
    if (experts[i] >= s->n_experts) return set_error(err, SL_ERR_INVALID_ARGUMENT, "expert " + std::to_string(experts[i]) + " out of range");
  try {
    // Entries that failed earlier (e.g. a prefetch hit EIO) are retried, not served.
    for (uint32_t i = 0; i < n; ++i) {
      auto it = s->cache.find(key_of(layer, experts[i]));
      if (it != s->cache.end() && !it->second.error.empty() && it->second.pending_reads == 0 && it->second.pins == 0) drop(s, it->first);
    }
    // Pin what is cached first, so that making room for the misses cannot evict it.
    std::vector<uint32_t> missing;
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t key = key_of(layer, experts[i]);
      auto it = s->cache.find(key);
      if (it == s->cache.end()) {
        missing.push_back(experts[i]);
        continue;
      }
      ++s->stats.hits;
      ++s->layer_stats[layer].hits;
      if (it->second.in_lru) {
        s->lru.erase(it->second.lru);
        it->second.in_lru = false;
      }
      ++it->second.pins;
    }
    std::string error;
    for (uint32_t e : missing) {
      ++s->stats.misses;
      ++s->layer_stats[layer].misses;
      if (!load(s, layer, e, true, error)) break;
    }
    if (s->ring_ok && s->in_flight > 0) io_uring_submit(&s->ring);
    // Wait until every wanted entry has its bytes.
    for (;;) {
      bool waiting = false;
      for (uint32_t i = 0; i < n && !waiting; ++i) {
        auto it = s->cache.find(key_of(layer, experts[i]));
        waiting = it != s->cache.end() && it->second.pending_reads > 0;
      }
      if (!waiting) break;
      reap(s, false);
    }
    std::string failure = error;
    for (uint32_t i = 0; i < n && failure.empty(); ++i) {
      auto it = s->cache.find(key_of(layer, experts[i]));
      if (it == s->cache.end()) failure = "expert " + std::to_string(experts[i]) + " could not be loaded";
      else if (!it->second.error.empty()) failure = it->second.error;
    }
    if (!failure.empty()) {
      for (uint32_t i = 0; i < n; ++i) {
        const uint64_t key = key_of(layer, experts[i]);
        auto it = s->cache.find(key);
        if (it == s->cache.end()) continue;
        const bool failed = !it->second.error.empty();
        unpin(s, key);
        if (failed && it->second.pins == 0 && it->second.pending_reads == 0) drop(s, key);
      }
      return set_error(err, error.empty() ? SL_ERR_IO : SL_ERR_OUT_OF_MEMORY, "uring store: " + failure);
    }
    for (uint32_t i = 0; i < n; ++i) {
      const Entry& e = s->cache.find(key_of(layer, experts[i]))->second;
      for (uint32_t p = 0; p < s->n_parts; ++p) parts_out[static_cast<std::size_t>(i) * s->n_parts + p] = e.parts[p];
    }
    return SL_OK;
  } catch (const std::bad_alloc&) {
    return set_error(err, SL_ERR_OUT_OF_MEMORY, "uring store: out of memory");
  }
}

void release(sl_expertstore* s, uint32_t layer, const uint32_t* experts, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) unpin(s, key_of(layer, experts[i]));
  make_room(s, 0);
}

void prefetch(sl_expertstore* s, uint32_t layer, const uint32_t* experts, uint32_t n) {
  if (layer >= s->n_layers) return;
  std::string ignored;  // a hint: failures show up at acquire
  try {
    for (uint32_t i = 0; i < n; ++i) {
      if (experts[i] >= s->n_experts || s->cache.count(key_of(layer, experts[i]))) continue;
      ++s->stats.prefetched;
      if (!load(s, layer, experts[i], false, ignored)) break;
    }
    if (s->ring_ok && s->in_flight > 0) io_uring_submit(&s->ring);
  } catch (const std::bad_alloc&) {
  }
}

void get_stats(const sl_expertstore* s, sl_expertstore_stats* out) {
  sl_expertstore_stats st = s->stats;
  st.cache_bytes = s->cache_bytes;
  if (!s->latencies_us.empty()) {
    std::vector<double> v = s->latencies_us;
    std::sort(v.begin(), v.end());
    st.read_p50_us = v[v.size() / 2];
    st.read_p99_us = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  }
  const uint32_t size = out->struct_size ? std::min<uint32_t>(out->struct_size, sizeof st) : sizeof st;
  std::memcpy(out, &st, size);
  out->struct_size = size;
  out->abi_version = SL_ABI_VERSION;
}

void get_layer_stats(const sl_expertstore* s, uint32_t layer, sl_expertstore_layer_stats* out) {
  sl_expertstore_layer_stats st{sizeof(sl_expertstore_layer_stats), SL_ABI_VERSION, 0, 0, 0};
  if (layer < s->layer_stats.size()) st = s->layer_stats[layer];
  const uint32_t size = out->struct_size ? std::min<uint32_t>(out->struct_size, sizeof st) : sizeof st;
  std::memcpy(out, &st, size);
  out->struct_size = size;
  out->abi_version = SL_ABI_VERSION;
}

const sl_expertstore_api kApi = {sizeof(sl_expertstore_api), SL_ABI_VERSION, create, destroy, acquire, release, prefetch, get_stats,
                                 get_layer_stats};

sl_status probe(sl_error* err) {
  // io_uring may be missing (old kernel, seccomp): the store then falls back to pread, so it runs.
  return SL_OK;
}

const sl_plugin_descriptor kDescriptor = {sizeof(sl_plugin_descriptor), SL_ABI_VERSION, SL_PLUGIN_EXPERTSTORE, "uring", "0.1.0",
                                          "Experts read on demand from the model files through io_uring into an LRU cache",
                                          probe, &kApi};

}  // namespace
}  // namespace sluice::uring

extern "C" SL_EXPORT const sl_plugin_descriptor* sluice_plugin_entry(void) { return &sluice::uring::kDescriptor; }
