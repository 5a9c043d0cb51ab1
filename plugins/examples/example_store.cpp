// Example expert store "example-pread": reads an expert's parts from the model files with pread on
// every acquire and frees them on release — no cache, every byte counted. A real store adds a
// bounded cache, prefetch and asynchronous reads (io_uring); the contract stays the same.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "sluice/expertstore.h"

struct sl_expertstore {
  std::vector<int> fds;
  uint32_t n_layers = 0, n_experts = 0, n_parts = 0;
  std::vector<sl_expert_part> parts;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<void*>> held;  // (layer, expert) -> part buffers
  sl_expertstore_stats stats{};
};

namespace {

sl_status fail(sl_error* err, sl_status s, const std::string& message) {
  std::strncpy(err->message, message.c_str(), SL_ERROR_MESSAGE_SIZE - 1);
  err->message[SL_ERROR_MESSAGE_SIZE - 1] = '\0';
  return s;
}

void destroy(sl_expertstore* s) {
  if (!s) return;
  for (auto& [key, bufs] : s->held)
    for (void* b : bufs) std::free(b);
  for (int fd : s->fds) ::close(fd);
  delete s;
}

sl_status create(const sl_expertstore_config* c, sl_expertstore** out, sl_error* err) {
  auto* s = new (std::nothrow) sl_expertstore;
  if (!s) return fail(err, SL_ERR_OUT_OF_MEMORY, "out of memory");
  for (uint32_t i = 0; i < c->n_files; ++i) {
    const int fd = ::open(c->files[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      destroy(s);
      return fail(err, SL_ERR_IO, std::string("cannot open ") + c->files[i] + ": " + std::strerror(errno));
    }
    s->fds.push_back(fd);
  }
  s->n_layers = c->n_layers;
  s->n_experts = c->n_experts;
  s->n_parts = c->n_parts;
  s->parts.assign(c->parts, c->parts + std::size_t(c->n_layers) * c->n_experts * c->n_parts);
  s->stats.struct_size = sizeof(sl_expertstore_stats);
  s->stats.budget_bytes = c->budget_bytes;
  *out = s;
  return SL_OK;
}

sl_status acquire(sl_expertstore* s, uint32_t layer, const uint32_t* experts, uint32_t n, const void** parts_out, sl_error* err) {
  for (uint32_t e = 0; e < n; ++e) {
    if (layer >= s->n_layers || experts[e] >= s->n_experts) return fail(err, SL_ERR_INVALID_ARGUMENT, "expert out of range");
    auto& bufs = s->held[{layer, experts[e]}];
    if (bufs.empty()) {
      ++s->stats.misses;
      for (uint32_t p = 0; p < s->n_parts; ++p) {
        const auto& part = s->parts[(std::size_t(layer) * s->n_experts + experts[e]) * s->n_parts + p];
        void* buf = std::malloc(part.bytes ? part.bytes : 1);
        if (!buf) return fail(err, SL_ERR_OUT_OF_MEMORY, "out of memory for an expert");
        const auto t0 = std::chrono::steady_clock::now();
        const ssize_t got = ::pread(s->fds.at(part.file_index), buf, part.bytes, static_cast<off_t>(part.offset));
        s->stats.read_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (got != static_cast<ssize_t>(part.bytes)) {
          std::free(buf);
          return fail(err, SL_ERR_IO, "short read of an expert part");
        }
        s->stats.bytes_read += part.bytes;
        s->stats.cache_bytes += part.bytes;
        ++s->stats.read_requests;
        bufs.push_back(buf);
      }
    } else {
      ++s->stats.hits;  // acquired twice before a release
    }
    for (uint32_t p = 0; p < s->n_parts; ++p) parts_out[std::size_t(e) * s->n_parts + p] = bufs[p];
  }
  return SL_OK;
}

void release(sl_expertstore* s, uint32_t layer, const uint32_t* experts, uint32_t n) {
  for (uint32_t e = 0; e < n; ++e) {
    auto it = s->held.find({layer, experts[e]});
    if (it == s->held.end()) continue;
    for (std::size_t p = 0; p < it->second.size(); ++p) {
      s->stats.cache_bytes -= s->parts[(std::size_t(layer) * s->n_experts + experts[e]) * s->n_parts + p].bytes;
      std::free(it->second[p]);
    }
    s->held.erase(it);
  }
}

void get_stats(const sl_expertstore* s, sl_expertstore_stats* out) {
  const uint32_t size = out->struct_size ? std::min<uint32_t>(out->struct_size, sizeof(sl_expertstore_stats)) : sizeof(sl_expertstore_stats);
  std::memcpy(out, &s->stats, size);
  out->struct_size = size;
  out->abi_version = SL_ABI_VERSION;
}

const sl_expertstore_api kApi = {sizeof(sl_expertstore_api), SL_ABI_VERSION, create, destroy, acquire, release, nullptr, get_stats,
                                 nullptr /* get_layer_stats: optional */};

const sl_plugin_descriptor kDescriptor = {sizeof(sl_plugin_descriptor), SL_ABI_VERSION, SL_PLUGIN_EXPERTSTORE,
                                          "example-pread", "0.1.0", "Example expert store: pread on acquire, no cache",
                                          nullptr, &kApi};

}  // namespace

extern "C" SL_EXPORT const sl_plugin_descriptor* sluice_plugin_entry(void) { return &kDescriptor; }
