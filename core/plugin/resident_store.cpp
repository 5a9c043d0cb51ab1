#include "plugin/resident_store.h"

#include <cstring>
#include <string>
#include <vector>

#include "util/file_io.h"
#include "util/plugin_error.h"

struct sl_expertstore {
  std::vector<sluice::MappedFile> files;
  std::vector<sl_expert_part> parts;
  uint32_t n_layers = 0, n_experts = 0, n_parts = 0;
  sl_expertstore_stats stats{};
};

namespace sluice {
namespace {

sl_status create(const sl_expertstore_config* cfg, sl_expertstore** out, sl_error* err) {
  try {
    auto store = std::make_unique<sl_expertstore>();
    store->n_layers = cfg->n_layers;
    store->n_experts = cfg->n_experts;
    store->n_parts = cfg->n_parts;
    for (uint32_t i = 0; i < cfg->n_files; ++i) {
      auto f = MappedFile::open(cfg->files[i]);
      if (!f) return set_error(err, SL_ERR_IO, f.message());
      store->files.push_back(std::move(*f));
    }
    const std::size_t n = static_cast<std::size_t>(cfg->n_layers) * cfg->n_experts * cfg->n_parts;
    store->parts.assign(cfg->parts, cfg->parts + n);
    for (const auto& p : store->parts) {
      if (p.file_index >= store->files.size() || p.offset + p.bytes > store->files[p.file_index].size())
        return set_error(err, SL_ERR_INVALID_ARGUMENT, "expert part outside its file");
    }
    store->stats.struct_size = sizeof(sl_expertstore_stats);
    *out = store.release();
    return SL_OK;
  } catch (const std::exception& e) {
    return set_error(err, SL_ERR_OUT_OF_MEMORY, e.what());
  }
}

void destroy(sl_expertstore* store) { delete store; }

sl_status acquire(sl_expertstore* s, uint32_t layer, const uint32_t* experts, uint32_t n, const void** parts_out,
                  sl_error* err) {
  if (layer >= s->n_layers) return set_error(err, SL_ERR_INVALID_ARGUMENT, "layer out of range");
  for (uint32_t i = 0; i < n; ++i) {
    if (experts[i] >= s->n_experts) return set_error(err, SL_ERR_INVALID_ARGUMENT, "expert out of range");
    for (uint32_t p = 0; p < s->n_parts; ++p) {
      const auto& part = s->parts[(static_cast<std::size_t>(layer) * s->n_experts + experts[i]) * s->n_parts + p];
      parts_out[static_cast<std::size_t>(i) * s->n_parts + p] = s->files[part.file_index].data() + part.offset;
    }
  }
  s->stats.hits += n;
  return SL_OK;
}

void release(sl_expertstore*, uint32_t, const uint32_t*, uint32_t) {}

void get_stats(const sl_expertstore* s, sl_expertstore_stats* out) {
  const uint32_t size = out->struct_size ? out->struct_size : sizeof(sl_expertstore_stats);
  std::memcpy(out, &s->stats, std::min<std::size_t>(size, sizeof(sl_expertstore_stats)));
  out->struct_size = std::min<uint32_t>(size, sizeof(sl_expertstore_stats));
  out->abi_version = SL_ABI_VERSION;
}

const sl_expertstore_api kResident = {sizeof(sl_expertstore_api), SL_ABI_VERSION, create, destroy, acquire, release, nullptr, get_stats, nullptr};

}  // namespace

const sl_expertstore_api* builtin_resident_store() { return &kResident; }

}  // namespace sluice
