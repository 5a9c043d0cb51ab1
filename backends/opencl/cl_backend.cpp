// The OpenCL backend plugin: entry point, device selection, memory and batch bookkeeping.
// Ops live in cl_ops.cpp, cl_matmul.cpp, cl_kv_cache.cpp and cl_attention.cpp; kernels in kernels_cl/.
#include "cl_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <chrono>
#include <new>
#include <tuple>

namespace sluice::ocl {
namespace {

// Orders devices for "" (the plugin's best): GPUs first, then the most memory; ties by position.
std::vector<DeviceRef>::const_iterator best_device(const std::vector<DeviceRef>& devices) {
  auto score = [](const DeviceRef& r) {
    const bool gpu = (r.device.getInfo<CL_DEVICE_TYPE>() & CL_DEVICE_TYPE_GPU) != 0;
    return std::pair<int, uint64_t>{gpu ? 1 : 0, r.device.getInfo<CL_DEVICE_GLOBAL_MEM_SIZE>()};
  };
  auto best = devices.begin();
  for (auto it = devices.begin(); it != devices.end(); ++it)
    if (score(*it) > score(*best)) best = it;
  return best;
}

// "" → best; "P:D" → platform P, device D; "N" → the N-th device in device_info order.
sl_status select_device(const std::string& spec, DeviceRef* out, sl_error* err) {
  std::string why;
  const auto devices = all_devices(&why);
  if (devices.empty()) return set_error(err, SL_ERR_UNSUPPORTED, "opencl: " + why);
  if (spec.empty()) {
    *out = *best_device(devices);
    return SL_OK;
  }
  char* end = nullptr;
  const unsigned long a = std::strtoul(spec.c_str(), &end, 10);
  if (end != spec.c_str() && *end == '\0') {
    if (a >= devices.size())
      return set_error(err, SL_ERR_INVALID_ARGUMENT,
                       "opencl: no device " + spec + " (" + std::to_string(devices.size()) + " found; see `sluice devices`)");
    *out = devices[a];
    return SL_OK;
  }
  if (end != spec.c_str() && *end == ':') {
    char* end2 = nullptr;
    const unsigned long b = std::strtoul(end + 1, &end2, 10);
    if (end2 != end + 1 && *end2 == '\0') {
      for (const auto& r : devices)
        if (r.platform_index == a && r.device_index == b) {
          *out = r;
          return SL_OK;
        }
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "opencl: no device " + spec + " (platform:device; see `sluice devices`)");
    }
  }
  return set_error(err, SL_ERR_INVALID_ARGUMENT, "opencl: bad device '" + spec + "' (expected P:D or an index)");
}

sl_status probe(sl_error* err) {
  std::string why;
  if (all_devices(&why).empty()) return set_error(err, SL_ERR_UNSUPPORTED, why);
  return SL_OK;
}

uint32_t device_count() {
  try {
    return static_cast<uint32_t>(all_devices(nullptr).size());
  } catch (...) {
    return 0;
  }
}

sl_status device_info(uint32_t index, sl_device_info* out, sl_error* err) {
  return guarded(err, "device_info", [&] {
    const auto devices = all_devices(nullptr);
    if (index >= devices.size())
      return set_error(err, SL_ERR_INVALID_ARGUMENT,
                       "opencl: no device " + std::to_string(index) + " (" + std::to_string(devices.size()) + " found)");
    return describe_device(devices[index], out);
  });
}

// The fusion pass's options (cl_fusion.h): the dp4a joins where the device has them. Each join can
// be turned off by a backend option — for measuring what it is worth, and for the tests that compare
// the joined and the separate launches (tests/opencl/opencl_vendor_paths_test.cpp).
FusionOptions fusion_options(const sl_backend* be) {
  auto off = [&](const char* option) { return be->options.find(option) != std::string::npos; };
  FusionOptions f;
  f.dp4a = use_dp4a(be);
  f.residual_join = !off("no-res-join");
  f.glu_join = !off("no-glu-join");
  f.rope_into_kv_write = !off("no-rope-join");
  f.attention_join = !off("no-attention-join");
  return f;
}

// The device's tuning (cl_tuning.h): the built-in table's entries for its vendor and name, then the
// options' tuning file and tune.KEY=VALUE settings; the options' flags go to be->options.
sl_status open_tuning(sl_backend* be, const std::string& options, sl_error* err) {
  auto parsed = parse_backend_options(options);
  if (!parsed) return set_error(err, SL_ERR_INVALID_ARGUMENT, "opencl: " + parsed.message());
  for (const auto& flag : parsed->flags) be->options += (be->options.empty() ? "" : " ") + flag;
  auto trimmed = [](std::string s) {
    while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
    return s;
  };
  const DeviceId id{trimmed(be->ref.device.getInfo<CL_DEVICE_VENDOR>()), trimmed(be->ref.device.getInfo<CL_DEVICE_NAME>())};
  auto resolved = resolve_tuning(id, kBuiltinTuningTable, *parsed);
  if (!resolved) return set_error(err, SL_ERR_INVALID_ARGUMENT, "opencl: " + resolved.message());
  be->tuning = std::move(resolved->tuning);
  return SL_OK;
}

sl_status create(const sl_backend_config* config, sl_backend** out, sl_error* err) {
  return guarded(err, "opencl create", [&] {
    auto be = std::make_unique<sl_backend>();
    const std::string spec = config && config->device ? config->device : "";
    if (auto s = select_device(spec, &be->ref, err); s != SL_OK) return s;
    const std::string options =
        config && config->struct_size >= offsetof(sl_backend_config, options) + sizeof(char*) && config->options ? config->options : "";
    if (auto s = open_tuning(be.get(), options, err); s != SL_OK) return s;
    be->context = cl::Context(be->ref.device);
    const char* profile = std::getenv("SLUICE_OPENCL_PROFILE");
    be->profile = profile && *profile && *profile != '0';
    const char* host_timing = std::getenv("SLUICE_OPENCL_HOST_TIMING");
    be->host_timing = host_timing && *host_timing && *host_timing != '0';
    be->queue = cl::CommandQueue(be->context, be->ref.device, be->profile ? CL_QUEUE_PROFILING_ENABLE : 0);
    be->caps = device_capabilities(be->ref.device);
    const char* portable = std::getenv("SLUICE_OPENCL_PORTABLE");
    be->use_ptx = be->caps.nvidia && !(portable && *portable && *portable != '0') &&
                  be->options.find("portable") == std::string::npos;
    be->fusion = fusion_options(be.get());
    // Build the common programs now: a kernel build error is a clear failure at start, not mid-request.
    kernel(be.get(), "ops", "add_f32");
    kernel(be.get(), "matvec", "matvec");
    if (!be->caps.unified) {  // a GPU's decode matvec also uses other shapes (q4_shape), and the residual join's
      const Tuning& t = be->tuning;
      std::vector<Q4Shape> shapes;
      for (uint32_t team = t.q4_base_shape.team * 2; team <= 128; team *= 2) shapes.push_back({team, t.q4_base_shape.rows});
      for (Q4Shape s : {t.q4_tall_shape, t.q4_big_shape, t.res_shape})
        if (s != t.q4_base_shape && std::find(shapes.begin(), shapes.end(), s) == shapes.end()) shapes.push_back(s);
      for (Q4Shape s : shapes) kernel(be.get(), q4_program(s), "matvec_q4_rows");
    }
    *out = be.release();
    return SL_OK;
  });
}

// Kernel time per kernel name, largest first (SLUICE_OPENCL_PROFILE=1).
void print_profile(sl_backend* be) {
  std::map<std::string, std::pair<double, uint64_t>> total;
  double all = 0;
  for (auto& [name, ev] : be->events) {
    const double ms = (ev.getProfilingInfo<CL_PROFILING_COMMAND_END>() - ev.getProfilingInfo<CL_PROFILING_COMMAND_START>()) * 1e-6;
    total[name].first += ms;
    total[name].second += 1;
    all += ms;
  }
  std::vector<std::pair<std::string, std::pair<double, uint64_t>>> rows(total.begin(), total.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::fprintf(stderr, "opencl profile: %zu launches, %.2f ms of kernel time\n", be->events.size(), all);
  for (const auto& [name, v] : rows)
    std::fprintf(stderr, "  %-24s %8llu launches %10.2f ms %8.1f us each\n", name.c_str(), (unsigned long long)v.second, v.first,
                 v.first * 1e3 / v.second);
  // The device's idle time between consecutive launches (the queue is in order): short gaps are the
  // launch cost, split by whether the next kernel had been enqueued when the previous one ended (the
  // device's own latency) or not yet (the host was late: host-bound); long gaps are transfers, host
  // work between forward passes and synchronisation.
  double device_ms = 0, host_ms = 0, long_ms = 0;
  uint64_t short_gaps = 0;
  for (std::size_t i = 1; i < be->events.size(); ++i) {
    const cl::Event& prev = be->events[i - 1].second;
    const cl::Event& ev = be->events[i].second;
    const cl_ulong end = prev.getProfilingInfo<CL_PROFILING_COMMAND_END>(), start = ev.getProfilingInfo<CL_PROFILING_COMMAND_START>();
    if (start <= end) continue;
    const double gap = (start - end) * 1e-6;
    if (gap > 0.05) {
      long_ms += gap;
      continue;
    }
    ++short_gaps;
    const cl_ulong queued = ev.getProfilingInfo<CL_PROFILING_COMMAND_QUEUED>();
    const double late = queued > end ? std::min(gap, (queued - end) * 1e-6) : 0.0;
    host_ms += late;
    device_ms += gap - late;
  }
  std::fprintf(stderr,
               "opencl gaps: %llu short gaps (<= 50 us) between launches, %.2f ms: %.2f ms with the next kernel enqueued "
               "(device launch latency), %.2f ms before it was (host-bound); %.2f ms in longer gaps\n",
               (unsigned long long)short_gaps, device_ms + host_ms, device_ms, host_ms, long_ms);
}

void destroy(sl_backend* be) {
  if (!be) return;
  try {
    if (be->pinned_map) be->queue.enqueueUnmapMemObject(be->pinned, be->pinned_map);
    if (be->small_pinned_map) be->queue.enqueueUnmapMemObject(be->small_pinned, be->small_pinned_map);
    be->queue.finish();
    be->batch_uploads.clear();
    be->ids_uploads.clear();
    if (be->profile) print_profile(be);
    if (be->host_timing)
      std::fprintf(stderr, "opencl host: %llu calls, %.2f ms issuing work, %.2f ms waiting for the device (download, synchronize)\n",
                   (unsigned long long)be->host_calls, be->host_issue_ms, be->host_wait_ms);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "opencl: at destroy: %s\n", e.what());
  }
  delete be;
}

sl_status get_device_info(const sl_backend* be, sl_device_info* out, sl_error* err) {
  return guarded(err, "get_device_info", [&] { return describe_device(be->ref, out); });
}

// ---- memory ------------------------------------------------------------------------------------

uint64_t chunk_size(const sl_backend* be) {
  // Whole pages, at most the device's largest allocation (and 1 GiB on CPU devices, where the
  // limit is often a fraction of memory that several buffers must share).
  // tuning max_alloc: smaller chunks (the split-buffer path, tested on a device with large allocations).
  uint64_t limit = be->caps.max_alloc ? be->caps.max_alloc : (uint64_t{1} << 30);
  if (be->tuning.max_alloc) limit = std::min<uint64_t>(limit, be->tuning.max_alloc);
  return std::max<uint64_t>(4096, limit / 4096 * 4096);
}

sl_status alloc(sl_backend* be, uint64_t bytes, sl_buffer** out, sl_error* err) {
  return guarded(err, "alloc", [&] {
    auto b = std::make_unique<sl_buffer>();
    b->bytes = bytes;
    b->chunk_bytes = chunk_size(be);
    const uint64_t n = std::max<uint64_t>(1, (bytes + b->chunk_bytes - 1) / b->chunk_bytes);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t size = std::max<uint64_t>(4, std::min(b->chunk_bytes, bytes - std::min(bytes, i * b->chunk_bytes)));
      b->chunks.emplace_back(be->context, CL_MEM_READ_WRITE, size);
      const cl_uchar zero = 0;
      be->queue.enqueueFillBuffer(b->chunks.back(), zero, 0, size);
    }
    be->queue.finish();  // drivers allocate lazily: surface out-of-memory here, not in a later op
    *out = b.release();
    return SL_OK;
  });
}

sl_status wrap_host(sl_backend* be, const void* host, uint64_t bytes, sl_buffer** out, sl_error* err) {
  return guarded(err, "wrap_host", [&] {
    auto b = std::make_unique<sl_buffer>();
    b->bytes = bytes;
    b->host = host;
    b->chunk_bytes = chunk_size(be);
    const uint64_t n = std::max<uint64_t>(1, (bytes + b->chunk_bytes - 1) / b->chunk_bytes);
    auto* base = static_cast<const unsigned char*>(host);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t at = i * b->chunk_bytes;
      const uint64_t size = std::min(b->chunk_bytes, bytes - std::min(bytes, at));
      if (size == 0) {
        b->chunks.emplace_back(be->context, CL_MEM_READ_ONLY, 4);
        continue;
      }
      if (be->caps.unified && reinterpret_cast<uintptr_t>(base + at) % be->caps.base_align == 0) {
        // The device reads host memory: use it in place (weights are never written). Not where the
        // start is less aligned than a buffer's (a tensor at any offset of a file): the kernels load
        // whole vectors from a buffer's start, which would fault there — that one gets a copy.
        b->chunks.emplace_back(be->context, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, size,
                               const_cast<unsigned char*>(base + at));
      } else {
        b->chunks.emplace_back(be->context, CL_MEM_READ_ONLY, size);
        be->queue.enqueueWriteBuffer(b->chunks.back(), CL_TRUE, 0, size, base + at);
      }
    }
    *out = b.release();
    return SL_OK;
  });
}

void free_buffer(sl_backend* be, sl_buffer* b) {
  if (!b) return;
  be->forms.written(b);  // a later buffer at the same address is not this one
  try {
    be->queue.finish();  // no queued op may still read it
  } catch (...) {
  }
  delete b;
}

// Calls fn(chunk, offset in chunk, offset in the transfer, bytes) for each chunk piece of a range.
template <class Fn>
void for_chunks(const sl_buffer* b, uint64_t offset, uint64_t bytes, Fn&& fn) {
  uint64_t done = 0;
  while (done < bytes) {
    const uint64_t at = offset + done;
    const uint64_t k = at / b->chunk_bytes, in = at % b->chunk_bytes;
    const uint64_t n = std::min(bytes - done, b->chunk_bytes - in);
    fn(b->chunks[k], in, done, n);
    done += n;
  }
}

sl_status upload(sl_backend* be, sl_buffer* dst, uint64_t offset, const void* src, uint64_t bytes, sl_error* err) {
  if (!fits(dst->bytes, offset, bytes)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "upload past the buffer's end");
  if (dst->host) return set_error(err, SL_ERR_INVALID_ARGUMENT, "upload into wrapped host memory");
  be->forms.written(dst);
  return guarded(err, "upload", [&] {
    for_chunks(dst, offset, bytes, [&](const cl::Buffer& c, uint64_t in, uint64_t at, uint64_t n) {
      be->queue.enqueueWriteBuffer(const_cast<cl::Buffer&>(c), CL_TRUE, in, n, static_cast<const unsigned char*>(src) + at);
    });
    return SL_OK;
  });
}

// Host memory the driver can copy into directly (pinned: CL_MEM_ALLOC_HOST_PTR, mapped once), for
// the downloads decode makes every token (the logits, 0.5 MB for a 128k vocabulary). A read into
// ordinary pageable memory is staged by the driver in pieces; into pinned memory it is one transfer,
// then one memcpy here. Grown to the largest download up to kPinnedMax; larger ones read directly.
constexpr uint64_t kPinnedMax = 16ull << 20;
unsigned char* pinned_staging(sl_backend* be, uint64_t bytes) {
  if (be->pinned_bytes < bytes) {
    if (be->pinned_map) be->queue.enqueueUnmapMemObject(be->pinned, be->pinned_map);
    be->pinned_map = nullptr;
    be->pinned_bytes = 0;
    be->pinned = cl::Buffer(be->context, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, bytes);
    be->pinned_map = be->queue.enqueueMapBuffer(be->pinned, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes);
    be->pinned_bytes = bytes;
  }
  return static_cast<unsigned char*>(be->pinned_map);
}

sl_status download(sl_backend* be, const sl_buffer* src, uint64_t offset, void* dst, uint64_t bytes, sl_error* err) {
  if (!fits(src->bytes, offset, bytes)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "download past the buffer's end");
  return guarded(err, "download", [&] {
    unsigned char* stage = !be->caps.unified && bytes >= (64u << 10) && bytes <= kPinnedMax ? pinned_staging(be, bytes) : nullptr;
    unsigned char* to = stage ? stage : static_cast<unsigned char*>(dst);
    for_chunks(src, offset, bytes, [&](const cl::Buffer& c, uint64_t in, uint64_t at, uint64_t n) {
      be->queue.enqueueReadBuffer(c, CL_TRUE, in, n, to + at);
    });
    if (stage) std::memcpy(dst, stage, bytes);
    return SL_OK;
  });
}

constexpr uint64_t kSmallStageBytes = 4096;
constexpr int kSmallStageSlots = 16;

// A pinned slot for a small download_begin, or -1 (none free, too large, or the device shares the
// host's memory).
int small_stage(sl_backend* be, uint64_t bytes) {
  if (be->caps.unified || bytes > kSmallStageBytes) return -1;
  if (!be->small_pinned_map) {
    be->small_pinned = cl::Buffer(be->context, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, kSmallStageBytes * kSmallStageSlots);
    be->small_pinned_map = static_cast<unsigned char*>(
        be->queue.enqueueMapBuffer(be->small_pinned, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, kSmallStageBytes * kSmallStageSlots));
    for (int i = kSmallStageSlots - 1; i >= 0; --i) be->small_stage_free.push_back(i);
  }
  if (be->small_stage_free.empty()) return -1;
  const int slot = be->small_stage_free.back();
  be->small_stage_free.pop_back();
  return slot;
}

sl_status download_begin(sl_backend* be, const sl_buffer* src, uint64_t offset, void* dst, uint64_t bytes, uint64_t* ticket,
                         sl_error* err) {
  if (!ticket) return set_error(err, SL_ERR_INVALID_ARGUMENT, "download_begin: no ticket to write");
  if (!fits(src->bytes, offset, bytes)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "download past the buffer's end");
  return guarded(err, "download_begin", [&] {
    sl_backend::DownloadInFlight pending;
    pending.stage_slot = small_stage(be, bytes);
    pending.dst = dst;
    pending.bytes = bytes;
    unsigned char* to = pending.stage_slot >= 0 ? be->small_pinned_map + uint64_t(pending.stage_slot) * kSmallStageBytes
                                                : static_cast<unsigned char*>(dst);
    try {
      for_chunks(src, offset, bytes, [&](const cl::Buffer& c, uint64_t in, uint64_t at, uint64_t n) {
        be->queue.enqueueReadBuffer(c, CL_FALSE, in, n, to + at, nullptr, &pending.done);
      });
    } catch (...) {
      if (pending.stage_slot >= 0) be->small_stage_free.push_back(pending.stage_slot);
      throw;
    }
    be->queue.flush();  // the device starts on what is queued while the host issues the next pass
    *ticket = ++be->downloads_begun;
    be->downloads.emplace(*ticket, std::move(pending));  // the queue is in order: the last piece done means all are
    return SL_OK;
  });
}

sl_status download_wait(sl_backend* be, uint64_t ticket, sl_error* err) {
  const auto it = be->downloads.find(ticket);
  if (it == be->downloads.end())
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "download_wait: ticket " + std::to_string(ticket) + " is not in flight");
  sl_backend::DownloadInFlight pending = std::move(it->second);
  be->downloads.erase(it);
  const sl_status s = guarded(err, "download_wait", [&] {
    if (pending.done()) pending.done.wait();  // a copy of no bytes has no event
    if (pending.stage_slot >= 0)
      std::memcpy(pending.dst, be->small_pinned_map + uint64_t(pending.stage_slot) * kSmallStageBytes, pending.bytes);
    return SL_OK;
  });
  if (pending.stage_slot >= 0) be->small_stage_free.push_back(pending.stage_slot);
  return s;
}

sl_status synchronize(sl_backend* be, sl_error* err) {
  return guarded(err, "synchronize", [&] {
    be->queue.finish();
    return SL_OK;
  });
}

}  // namespace

sl_status begin_batch(sl_backend* be, const sl_batch* batch, sl_error* err) {
  if (!batch || batch->n_tokens == 0) return set_error(err, SL_ERR_INVALID_ARGUMENT, "empty batch");
  return guarded(err, "begin_batch", [&] {
    wait_uploads(be->batch_uploads);  // the host vectors below fed the previous batch's copies
    be->positions.assign(batch->positions, batch->positions + batch->n_tokens);
    be->seq_slots.assign(batch->seq_slots, batch->seq_slots + batch->n_tokens);
    std::vector<int32_t> sorted = be->seq_slots;  // once a batch, not at every layer's attention
    std::sort(sorted.begin(), sorted.end());
    be->one_token_per_sequence = !sorted.empty() && std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
    be->n_seqs = batch->n_seqs;
    be->max_pages = batch->max_pages;
    be->page_table.assign(batch->page_table, batch->page_table + static_cast<std::size_t>(batch->n_seqs) * batch->max_pages);
    for (uint32_t i = 0; i < batch->n_tokens; ++i) {
      if (be->seq_slots[i] < 0 || static_cast<uint32_t>(be->seq_slots[i]) >= batch->n_seqs || be->positions[i] < 0)
        return set_error(err, SL_ERR_INVALID_ARGUMENT, "batch token " + std::to_string(i) + " has a bad sequence or position");
    }
    upload_batch_vector(be, be->d_positions, be->d_positions_cap, be->positions, be->batch_uploads);
    upload_batch_vector(be, be->d_seq_slots, be->d_slots_cap, be->seq_slots, be->batch_uploads);
    upload_batch_vector(be, be->d_page_table, be->d_table_cap, be->page_table, be->batch_uploads);
    const bool has_states = batch->struct_size >= offsetof(sl_batch, state_slots) + sizeof(batch->state_slots) && batch->state_slots;
    if (has_states)
      be->state_slots.assign(batch->state_slots, batch->state_slots + batch->n_seqs);
    else
      be->state_slots.clear();
    const bool has_recent = batch->struct_size >= offsetof(sl_batch, recent_table) + sizeof(batch->recent_table) && batch->recent_table;
    if (has_recent) {
      be->recent_table.assign(batch->recent_table, batch->recent_table + static_cast<std::size_t>(batch->n_seqs) * batch->max_pages);
      upload_batch_vector(be, be->d_recent_table, be->d_recent_cap, be->recent_table, be->batch_uploads);
    } else {
      be->recent_table.clear();
    }
    const bool has_window = batch->struct_size >= offsetof(sl_batch, window_table) + sizeof(batch->window_table) && batch->window_table;
    if (has_window) {
      be->window_table.assign(batch->window_table, batch->window_table + static_cast<std::size_t>(batch->n_seqs) * batch->max_pages);
      upload_batch_vector(be, be->d_window_table, be->d_window_cap, be->window_table, be->batch_uploads);
    } else {
      be->window_table.clear();
    }
    return SL_OK;
  });
}

namespace {

// With SLUICE_OPENCL_HOST_TIMING the host's time inside the table's entry points is summed,
// download and synchronize (kWaits) apart, memory and cache set-up (kSetup) left out.
template <bool kWaits, class F, bool kSetup = false>
struct Entry;
template <bool kWaits, bool kSetup, class... A>
struct Entry<kWaits, sl_status (*)(sl_backend*, A...), kSetup> {
  template <sl_status (*Fn)(sl_backend*, A...)>
  static sl_status call(sl_backend* be, A... a) {
    if (!be->host_timing || kSetup) return Fn(be, a...);
    const auto t0 = std::chrono::steady_clock::now();
    const sl_status s = Fn(be, a...);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++be->host_calls;
    (kWaits ? be->host_wait_ms : be->host_issue_ms) += ms;
    return s;
  }
};
#define SLUICE_ISSUES(fn) Entry<false, decltype(&fn)>::call<&fn>
#define SLUICE_WAITS(fn) Entry<true, decltype(&fn)>::call<&fn>
#define SLUICE_SETUP(fn) Entry<false, decltype(&fn), true>::call<&fn>  // not timed: loading, not serving

sl_status graph_compute(sl_backend* be, const sl_graph* g, const sl_step* step, sl_error* err) {
  return guarded(err, "graph_compute", [&] { return run_graph(be, g, step, err); });
}

sl_status plan_create(sl_backend* be, const sl_graph* g, sl_plan** out, sl_error* err) {
  return guarded(err, "plan_create", [&] { return create_plan(be, g, out, err); });
}

sl_status plan_compute(sl_backend* be, sl_plan* plan, const sl_step* step, sl_error* err) {
  return guarded(err, "plan_compute", [&] { return compute_plan(be, plan, step, err); });
}

void plan_destroy(sl_backend*, sl_plan* plan) { delete plan; }

const sl_backend_api kApi = {
    sizeof(sl_backend_api),
    SL_ABI_VERSION,
    device_count,
    device_info,
    create,
    destroy,
    get_device_info,
    SLUICE_SETUP(alloc),
    SLUICE_SETUP(wrap_host),
    free_buffer,
    SLUICE_SETUP(upload),
    SLUICE_WAITS(download),
    SLUICE_ISSUES(download_begin),  // issues a copy, does not wait
    SLUICE_WAITS(download_wait),
    SLUICE_WAITS(synchronize),
    SLUICE_SETUP(kv_create),
    kv_destroy,
    SLUICE_SETUP(kv_copy_page),
    node_supported,
    SLUICE_ISSUES(graph_compute),
    SLUICE_SETUP(plan_create),
    SLUICE_ISSUES(plan_compute),
    plan_destroy,
    SLUICE_ISSUES(kv_copy_state),  // enqueued after the work before it
    SLUICE_ISSUES(kv_clear_state),
};
#undef SLUICE_ISSUES
#undef SLUICE_WAITS
#undef SLUICE_SETUP

const sl_plugin_descriptor kDescriptor = {
    sizeof(sl_plugin_descriptor),
    SL_ABI_VERSION,
    SL_PLUGIN_BACKEND,
    "opencl",
    "0.1.0",
    "OpenCL backend: our kernels (kernels_cl/), CLBlast GEMMs for prefill, paged KV attention on the device",
    probe,
    &kApi,
};

}  // namespace

// Not blocking: the host goes on issuing the pass's ops while the small copy travels (a blocking write
// waits for the queue to drain and the copy to land, at every token's start). v must stay unchanged
// until the copy ran: `pending` gets its event, which the owner waits for before changing v.
void upload_batch_vector(sl_backend* be, cl::Buffer& dst, size_t& cap, const std::vector<int32_t>& v,
                         std::vector<cl::Event>& pending) {
  const size_t bytes = std::max<size_t>(4, v.size() * 4);
  if (cap < bytes) {
    dst = cl::Buffer(be->context, CL_MEM_READ_ONLY, std::max<size_t>(bytes, 256));
    cap = std::max<size_t>(bytes, 256);
  }
  if (v.empty()) return;
  cl::Event done;
  be->queue.enqueueWriteBuffer(dst, CL_FALSE, 0, v.size() * 4, v.data(), nullptr, &done);
  pending.push_back(done);
}

void wait_uploads(std::vector<cl::Event>& pending) {
  if (pending.empty()) return;
  cl::Event::waitForEvents(pending);
  pending.clear();
}

DevPtr read_range(sl_backend* be, sl_buffer* b, uint64_t offset, uint64_t bytes, uint64_t align) {
  const uint64_t k = offset / b->chunk_bytes, in = offset % b->chunk_bytes;
  if (in + bytes <= b->chunk_bytes && offset % align == 0 && k < b->chunks.size()) return DevPtr{b->chunks[k], in};
  auto key = std::make_pair(offset, bytes);
  auto it = b->views.find(key);
  if (it != b->views.end()) return DevPtr{it->second, 0};
  if (bytes > b->chunk_bytes) throw std::runtime_error("a weight range larger than the device's largest allocation");
  cl::Buffer view(be->context, CL_MEM_READ_ONLY, std::max<uint64_t>(bytes, 4));
  if (b->host) {
    be->queue.enqueueWriteBuffer(view, CL_TRUE, 0, bytes, static_cast<const unsigned char*>(b->host) + offset);
  } else {
    for_chunks(b, offset, bytes, [&](const cl::Buffer& c, uint64_t in_chunk, uint64_t at, uint64_t n) {
      be->queue.enqueueCopyBuffer(c, view, in_chunk, at, n);
    });
  }
  b->views.emplace(key, view);
  return DevPtr{view, 0};
}

DevPtr write_range(sl_buffer* b, uint64_t offset, uint64_t bytes) {
  const uint64_t k = offset / b->chunk_bytes, in = offset % b->chunk_bytes;
  if (k >= b->chunks.size() || in + bytes > b->chunk_bytes)
    throw std::runtime_error("an activation range that straddles device allocations");
  return DevPtr{b->chunks[k], in};
}

namespace {

// SLUICE_OPENCL_SKIP=name,name: kernels by function name that are not launched — for measuring what
// each kind of kernel costs inside an unprofiled decode (its launch and its time; the results are
// wrong then, which the benchmark does not read). Profiling events inflate small kernels, so the
// profile alone cannot say this (perf/NOTES.md).
bool skipped(cl::Kernel& k) {
  static const std::string list = [] {
    const char* s = std::getenv("SLUICE_OPENCL_SKIP");
    return s && *s ? "," + std::string(s) + "," : std::string();
  }();
  return !list.empty() && list.find("," + k.getInfo<CL_KERNEL_FUNCTION_NAME>() + ",") != std::string::npos;
}

}  // namespace

void launch(sl_backend* be, cl::Kernel& k, const cl::NDRange& global, const cl::NDRange& local) {
  if (skipped(k)) return;
  if (!be->profile) {
    be->queue.enqueueNDRangeKernel(k, cl::NullRange, global, local);
  } else {
    cl::Event ev;
    be->queue.enqueueNDRangeKernel(k, cl::NullRange, global, local, nullptr, &ev);
    be->events.emplace_back(k.getInfo<CL_KERNEL_FUNCTION_NAME>(), ev);
  }
  // SLUICE_OPENCL_FLUSH_EVERY=n: the queue flushed to the device after every n launches (measuring
  // whether the driver holds launches back while the host issues a token's work).
  static const long flush_every = env_knob("SLUICE_OPENCL_FLUSH_EVERY", [](long v) { return v >= 1 && v <= 4096; });
  if (flush_every && ++be->launches_unflushed >= static_cast<uint64_t>(flush_every)) {
    be->queue.flush();
    be->launches_unflushed = 0;
  }
}

}  // namespace sluice::ocl

extern "C" SL_EXPORT const sl_plugin_descriptor* sluice_plugin_entry(void) { return &sluice::ocl::kDescriptor; }
