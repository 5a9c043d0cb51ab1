#pragma once
// What every backend's kv_create reads from the host's layout (header-only, for every backend): the
// layout itself, the two codecs' row formats and the bytes of one page of one layer — refusing a
// layout the caches could not be laid out from, rather than writing rows of the wrong size later.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "sluice/backend.h"
#include "util/plugin_error.h"

namespace sluice {

struct KvShape {
  sl_kv_layout layout{};
  sl_kv_format k_format{}, v_format{};
  uint64_t page_bytes = 0;  // K rows of every head, then V rows, of one page of one layer
};

// An older host's layout is shorter: what it has is taken and the rest (the recent window) stays 0; a
// recent window without recent pages is none. Both codecs must store rows of the layout's head_dim.
inline sl_status read_kv_layout(const sl_kv_layout* in, KvShape& out, sl_error* err) {
  if (!in || !in->k_api || !in->v_api || !in->k_codec || !in->v_codec || in->page_tokens == 0 || in->head_dim == 0 ||
      in->n_kv_heads == 0)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_create: incomplete layout");
  out = KvShape{};
  std::memcpy(&out.layout, in, std::min<std::size_t>(in->struct_size, sizeof(sl_kv_layout)));
  out.layout.struct_size = sizeof(sl_kv_layout);
  if (out.layout.n_recent_pages == 0) out.layout.recent_window = 0;
  out.k_format.struct_size = sizeof(sl_kv_format);
  out.v_format.struct_size = sizeof(sl_kv_format);
  in->k_api->get_format(in->k_codec, &out.k_format);
  in->v_api->get_format(in->v_codec, &out.v_format);
  for (const sl_kv_format* f : {&out.k_format, &out.v_format})
    if (f->head_dim != in->head_dim || f->row_bytes == 0)
      return set_error(err, SL_ERR_INVALID_ARGUMENT,
                       "kv_create: a codec stores rows of " + std::to_string(f->head_dim) + " values in " +
                           std::to_string(f->row_bytes) + " bytes; the layout's head_dim is " + std::to_string(in->head_dim));
  out.page_bytes = uint64_t(in->n_kv_heads) * in->page_tokens * (out.k_format.row_bytes + out.v_format.row_bytes);
  return SL_OK;
}

}  // namespace sluice
