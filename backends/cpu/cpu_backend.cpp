// The reference CPU backend: the plugin entry, device description and memory. Graphs run in
// cpu_graph.cpp; the kernels live in cpu_ops.cpp, cpu_matmul.cpp and cpu_attention.cpp.
#include "cpu_backend.h"
#include "quant_kernels.h"

#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <string>
#include <thread>


namespace sluice::cpu {

namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "CPU";
}

void copy_str(char* dst, std::size_t size, const std::string& src) {
  std::strncpy(dst, src.c_str(), size - 1);
  dst[size - 1] = '\0';
}

uint32_t device_count() { return 1; }

sl_status device_info(uint32_t index, sl_device_info* out, sl_error* err) {
  if (index != 0) return set_error(err, SL_ERR_INVALID_ARGUMENT, "the CPU backend has one device (0)");
  sl_device_info info{};
  info.struct_size = sizeof(info);
  info.abi_version = SL_ABI_VERSION;
  copy_str(info.name, sizeof(info.name), cpu_model_name());
  copy_str(info.vendor, sizeof(info.vendor), "host");
  copy_str(info.driver, sizeof(info.driver), "sluice-cpu");
  copy_str(info.kind, sizeof(info.kind), "cpu");
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  info.total_memory = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * page;
  info.free_memory = static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) * page;
  info.max_alloc = info.total_memory;
  info.compute_units = std::thread::hardware_concurrency();
  info.caps = SL_CAP_UNIFIED | SL_CAP_KV_RECENT_WINDOW | SL_CAP_KV_LAYERS | SL_CAP_KV_WINDOW_PAGES;
  std::memcpy(out, &info, std::min<std::size_t>(out->struct_size ? out->struct_size : sizeof(info), sizeof(info)));
  out->struct_size = std::min<uint32_t>(out->struct_size ? out->struct_size : sizeof(info), sizeof(info));
  return SL_OK;
}

// The backend's options (sl_backend_config.options, `--backend-options`), space-separated:
// activations=int16|int8, the decode products' activation form (quant_kernels.h, ActivationForm), and
// prefetch=BYTES, how far ahead of their reads the decode products request the weights (default 2048,
// from the sweep in perf/NOTES.md; 0 leaves it to the hardware), and kernels=avx2|avx512, whether the
// AVX-512 VNNI kernels run where the build has them (avx2: for comparison, and to test both on one
// machine).
// Anything else is refused, naming it: a misspelt option silently ignored would measure the wrong thing.
sl_status apply_options(sl_backend* be, const std::string& text, sl_error* err) {
  if (text.size() > 4096) return set_error(err, SL_ERR_INVALID_ARGUMENT, "cpu backend: options longer than 4096 characters");
  std::istringstream in(text);
  std::string word;
  be->wide_kernels = kWideKernelsBuilt;
  while (in >> word) {
    if (word == "activations=int16") {
      be->int8_activations = false;
    } else if (word == "activations=int8") {
      be->int8_activations = true;
    } else if (word == "kernels=avx2") {
      be->wide_kernels = false;
    } else if (word == "kernels=avx512") {
      if (!kWideKernelsBuilt)
        return set_error(err, SL_ERR_UNSUPPORTED, "cpu backend: kernels=avx512: this build of the plugin has no AVX-512 VNNI kernels");
      be->wide_kernels = true;
    } else if (word.rfind("prefetch=", 0) == 0) {
      const std::string value = word.substr(9);
      if (value.empty() || value.size() > 6 || value.find_first_not_of("0123456789") != std::string::npos || std::stoul(value) > 65536)
        return set_error(err, SL_ERR_INVALID_ARGUMENT, "cpu backend: prefetch= takes bytes from 0 (off) to 65536, not '" + value + "'");
      be->prefetch_bytes = std::stoul(value);
    } else {
      return set_error(err, SL_ERR_INVALID_ARGUMENT,
                       "cpu backend: unknown option '" + word + "' (known: activations=int16|int8, kernels=avx2|avx512, prefetch=BYTES)");
    }
  }
  if (be->int8_activations && !be->wide_kernels)
    return set_error(err, SL_ERR_UNSUPPORTED,
                     "cpu backend: activations=int8 needs the AVX-512 VNNI kernels, which this CPU, this build of the plugin or "
                     "kernels=avx2 leaves out");
  return SL_OK;
}

sl_status create(const sl_backend_config* config, sl_backend** out, sl_error* err) {
  try {
    auto be = std::make_unique<sl_backend>();
    const bool has_options =
        config && config->struct_size >= offsetof(sl_backend_config, options) + sizeof(char*) && config->options;
    if (sl_status s = apply_options(be.get(), has_options ? config->options : "", err); s != SL_OK) return s;
    unsigned n = config && config->n_threads ? config->n_threads : std::thread::hardware_concurrency();
    be->n_threads = n ? n : 1;
    be->pool = std::make_unique<ThreadPool>(be->n_threads);
    be->scratch.resize(be->n_threads);
    *out = be.release();
    return SL_OK;
  } catch (const std::exception& e) {
    return set_error(err, SL_ERR_INTERNAL, std::string("cpu backend: ") + e.what());
  }
}

void destroy(sl_backend* be) { delete be; }

sl_status get_device_info(const sl_backend* be, sl_device_info* out, sl_error* err) {
  auto status = device_info(0, out, err);
  if (status == SL_OK) out->compute_units = be->n_threads;
  return status;
}

sl_status alloc(sl_backend*, uint64_t bytes, sl_buffer** out, sl_error* err) {
  auto* b = new (std::nothrow) sl_buffer;
  if (!b) return set_error(err, SL_ERR_OUT_OF_MEMORY, "out of host memory");
  // 64-byte alignment keeps vector loads on cache lines.
  void* p = nullptr;
  if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
    delete b;
    return set_error(err, SL_ERR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes");
  }
  std::memset(p, 0, bytes);
  b->data = static_cast<std::byte*>(p);
  b->bytes = bytes;
  b->owned = true;
  *out = b;
  return SL_OK;
}

sl_status wrap_host(sl_backend*, const void* host, uint64_t bytes, sl_buffer** out, sl_error* err) {
  auto* b = new (std::nothrow) sl_buffer;
  if (!b) return set_error(err, SL_ERR_OUT_OF_MEMORY, "out of host memory");
  b->data = const_cast<std::byte*>(static_cast<const std::byte*>(host));  // weights are never written
  b->bytes = bytes;
  b->owned = false;
  *out = b;
  return SL_OK;
}

void free_buffer(sl_backend*, sl_buffer* b) {
  if (!b) return;
  if (b->owned) std::free(b->data);
  delete b;
}

sl_status upload(sl_backend*, sl_buffer* dst, uint64_t offset, const void* src, uint64_t bytes, sl_error* err) {
  if (!fits(dst->bytes, offset, bytes)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "upload past the buffer's end");
  std::memcpy(dst->data + offset, src, bytes);
  return SL_OK;
}

sl_status download(sl_backend*, const sl_buffer* src, uint64_t offset, void* dst, uint64_t bytes, sl_error* err) {
  if (!fits(src->bytes, offset, bytes)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "download past the buffer's end");
  std::memcpy(dst, src->data + offset, bytes);
  return SL_OK;
}

sl_status synchronize(sl_backend*, sl_error*) { return SL_OK; }  // every CPU op is synchronous

// Every op has run when it returns, so the copy is done at once; the ticket only has to be one this
// backend gave.
sl_status download_begin(sl_backend* be, const sl_buffer* src, uint64_t offset, void* dst, uint64_t bytes, uint64_t* ticket,
                         sl_error* err) {
  if (!ticket) return set_error(err, SL_ERR_INVALID_ARGUMENT, "download_begin: no ticket to write");
  if (sl_status s = download(be, src, offset, dst, bytes, err); s != SL_OK) return s;
  *ticket = ++be->downloads_begun;
  return SL_OK;
}

sl_status download_wait(sl_backend* be, uint64_t ticket, sl_error* err) {
  if (ticket == 0 || ticket > be->downloads_begun)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "download_wait: ticket " + std::to_string(ticket) + " was never given");
  return SL_OK;
}

const sl_backend_api kApi = {
    sizeof(sl_backend_api),
    SL_ABI_VERSION,
    device_count,
    device_info,
    create,
    destroy,
    get_device_info,
    alloc,
    wrap_host,
    free_buffer,
    upload,
    download,
    download_begin,
    download_wait,
    synchronize,
    kv_create,
    kv_destroy,
    kv_copy_page,
    supports_node,
    graph_compute,
    nullptr,  // plan_create: a CPU graph is cheap to walk; nothing to record
    nullptr,
    nullptr,
    kv_copy_state,
    kv_clear_state,
};

const sl_plugin_descriptor kDescriptor = {
    sizeof(sl_plugin_descriptor),
    SL_ABI_VERSION,
    SL_PLUGIN_BACKEND,
    "cpu",
    "0.1.0",
    "Reference CPU backend: AVX2/AVX-512 inner loops, register-tiled prefill GEMMs, threads",
    nullptr,
    &kApi,
};

}  // namespace
}  // namespace sluice::cpu

extern "C" SL_EXPORT const sl_plugin_descriptor* sluice_plugin_entry(void) { return &sluice::cpu::kDescriptor; }
