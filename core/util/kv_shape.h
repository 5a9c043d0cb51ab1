#pragma once
// What every backend's kv_create reads from the host's layout (header-only, for every backend): the
// layout itself, each layer's kind, widths, codecs' row formats, pages and state, and the bytes of one
// page of each layer — refusing, with a message naming the layer, a layout the caches could not be
// laid out from, rather than writing rows of the wrong size later.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "sluice/backend.h"
#include "util/plugin_error.h"

namespace sluice {

// One layer as a backend lays it out.
struct KvLayerShape {
  uint32_t kind = SL_KV_FULL;  // sl_kv_layer_kind
  uint32_t n_kv_heads = 0, k_dim = 0, v_dim = 0, window = 0;
  uint64_t state_bytes = 0;
  const sl_kvcodec_api* k_api = nullptr;
  const sl_kvcodec* k_codec = nullptr;
  const sl_kvcodec_api* v_api = nullptr;
  const sl_kvcodec* v_codec = nullptr;
  sl_kv_format k_format{}, v_format{};
  uint32_t n_pages = 0;        // n_pages (FULL), n_window_pages (WINDOW), 0 (STATE)
  uint64_t page_bytes = 0;     // K rows of every head, then V rows, of one page
  uint64_t recent_values = 0;  // halves of one recent page: [K: head][slot][k_dim], then [V: head][slot][v_dim]

  bool has_kv() const { return kind != SL_KV_STATE; }
  uint64_t bytes() const { return page_bytes * n_pages; }  // the layer's pages
  // Whether the layer is laid out exactly like a layer of the layout's own geometry (a uniform model's).
  bool uniform_with(const sl_kv_layout& L) const {
    return kind == SL_KV_FULL && n_kv_heads == L.n_kv_heads && k_dim == L.head_dim && v_dim == L.head_dim;
  }
};

struct KvShape {
  sl_kv_layout layout{};  // layers set to NULL: the per-layer view is `layers`
  sl_kv_format k_format{}, v_format{};
  uint64_t page_bytes = 0;  // of a layer of the layout's own geometry (K rows of every head, then V rows)
  std::vector<KvLayerShape> layers;  // [n_layers]
  bool has_state() const {
    return std::any_of(layers.begin(), layers.end(), [](const KvLayerShape& l) { return l.kind == SL_KV_STATE; });
  }
  bool has_window() const {
    return std::any_of(layers.begin(), layers.end(), [](const KvLayerShape& l) { return l.kind == SL_KV_WINDOW; });
  }
};

namespace detail {

inline sl_status kv_layout_error(sl_error* err, const std::string& what) {
  return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_create: " + what);
}

// a * b, or false when it does not fit (the caller's sizes then cannot be allocated either).
inline bool mul_fits(uint64_t a, uint64_t b, uint64_t& out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  out = a * b;
  return true;
}

// The codecs of a layer with K/V rows: present, made for the layer's widths, rows of some bytes.
inline sl_status read_codecs(KvLayerShape& l, const std::string& where, sl_error* err) {
  if (!l.k_api || !l.k_codec || !l.v_api || !l.v_codec) return kv_layout_error(err, where + ": no K or V codec");
  l.k_format.struct_size = sizeof(sl_kv_format);
  l.v_format.struct_size = sizeof(sl_kv_format);
  l.k_api->get_format(l.k_codec, &l.k_format);
  l.v_api->get_format(l.v_codec, &l.v_format);
  const std::pair<const sl_kv_format*, uint32_t> sides[] = {{&l.k_format, l.k_dim}, {&l.v_format, l.v_dim}};
  for (const auto& [f, dim] : sides)
    if (f->head_dim != dim || f->row_bytes == 0)
      return kv_layout_error(err, where + ": a codec stores rows of " + std::to_string(f->head_dim) + " values in " +
                                      std::to_string(f->row_bytes) + " bytes; the " + (f == &l.k_format ? "K" : "V") +
                                      " width is " + std::to_string(dim));
  return SL_OK;
}

}  // namespace detail

// An older host's layout is shorter: what it has is taken and the rest (the recent window, the
// per-layer description) stays 0; a recent window without recent pages is none. Without `layers`
// every layer is FULL with the layout's geometry and codecs, which must store rows of its head_dim.
inline sl_status read_kv_layout(const sl_kv_layout* in, KvShape& out, sl_error* err) {
  using detail::kv_layout_error;
  if (!in || in->page_tokens == 0) return kv_layout_error(err, "incomplete layout");
  out = KvShape{};
  std::memcpy(&out.layout, in, std::min<std::size_t>(in->struct_size, sizeof(sl_kv_layout)));
  out.layout.struct_size = sizeof(sl_kv_layout);
  if (out.layout.n_recent_pages == 0) out.layout.recent_window = 0;
  const sl_kv_layer* given = out.layout.layers;
  out.layout.layers = nullptr;
  const sl_kv_layout& L = out.layout;
  if (!given) {
    if (!L.k_api || !L.v_api || !L.k_codec || !L.v_codec || L.head_dim == 0 || L.n_kv_heads == 0)
      return kv_layout_error(err, "incomplete layout");
  }

  // The layout's own geometry (what a uniform model's layers all have), where it names one.
  if (L.k_api && L.v_api && L.k_codec && L.v_codec && L.head_dim && L.n_kv_heads) {
    out.k_format.struct_size = sizeof(sl_kv_format);
    out.v_format.struct_size = sizeof(sl_kv_format);
    L.k_api->get_format(L.k_codec, &out.k_format);
    L.v_api->get_format(L.v_codec, &out.v_format);
    for (const sl_kv_format* f : {&out.k_format, &out.v_format})
      if (f->head_dim != L.head_dim || f->row_bytes == 0)
        return kv_layout_error(err, "a codec stores rows of " + std::to_string(f->head_dim) + " values in " +
                                        std::to_string(f->row_bytes) + " bytes; the layout's head_dim is " + std::to_string(L.head_dim));
    out.page_bytes = uint64_t(L.n_kv_heads) * L.page_tokens * (out.k_format.row_bytes + out.v_format.row_bytes);
  }

  out.layers.resize(L.n_layers);
  for (uint32_t i = 0; i < L.n_layers; ++i) {
    KvLayerShape& l = out.layers[i];
    const std::string where = "layer " + std::to_string(i);
    if (given) {
      sl_kv_layer g{};
      std::memcpy(&g, &given[i], std::min<std::size_t>(given[i].struct_size, sizeof(sl_kv_layer)));
      if (given[i].struct_size < offsetof(sl_kv_layer, v_codec) + sizeof(void*))
        return kv_layout_error(err, where + ": sl_kv_layer of " + std::to_string(given[i].struct_size) + " bytes is incomplete");
      l.kind = g.kind;
      l.n_kv_heads = g.n_kv_heads;
      l.k_dim = g.k_head_dim;
      l.v_dim = g.v_head_dim;
      l.window = g.window;
      l.state_bytes = g.state_bytes;
      l.k_api = g.k_api;
      l.k_codec = g.k_codec;
      l.v_api = g.v_api;
      l.v_codec = g.v_codec;
    } else {
      l.kind = SL_KV_FULL;
      l.n_kv_heads = L.n_kv_heads;
      l.k_dim = l.v_dim = L.head_dim;
      l.k_api = L.k_api;
      l.k_codec = L.k_codec;
      l.v_api = L.v_api;
      l.v_codec = L.v_codec;
    }
    switch (l.kind) {
      case SL_KV_FULL:
      case SL_KV_WINDOW: {
        if (l.n_kv_heads == 0 || l.k_dim == 0 || l.v_dim == 0)
          return kv_layout_error(err, where + ": K/V heads and widths must be positive (heads " + std::to_string(l.n_kv_heads) +
                                          ", K " + std::to_string(l.k_dim) + ", V " + std::to_string(l.v_dim) + ")");
        if (l.kind == SL_KV_WINDOW && l.window == 0) return kv_layout_error(err, where + ": a sliding-window layer needs a window");
        if (l.kind == SL_KV_WINDOW && L.n_window_pages == 0)
          return kv_layout_error(err, where + ": a sliding-window layer, but the layout has no window pages");
        if (l.state_bytes != 0) return kv_layout_error(err, where + ": an attention layer with a state");
        if (auto s = detail::read_codecs(l, where, err); s != SL_OK) return s;
        l.n_pages = l.kind == SL_KV_FULL ? L.n_pages : L.n_window_pages;
        uint64_t bytes = 0, values = 0;
        if (!detail::mul_fits(uint64_t(l.n_kv_heads) * L.page_tokens, uint64_t(l.k_format.row_bytes) + l.v_format.row_bytes, l.page_bytes) ||
            !detail::mul_fits(l.page_bytes, l.n_pages, bytes) ||
            !detail::mul_fits(uint64_t(l.n_kv_heads) * L.page_tokens, uint64_t(l.k_dim) + l.v_dim, l.recent_values) ||
            !detail::mul_fits(l.recent_values, L.n_recent_pages, values))
          return kv_layout_error(err, where + ": its pages' size overflows");
        break;
      }
      case SL_KV_STATE:
        if (l.state_bytes == 0 || l.state_bytes % 4 != 0)
          return kv_layout_error(err, where + ": a recurrent layer's state must be a positive multiple of 4 bytes, got " +
                                          std::to_string(l.state_bytes));
        if (L.n_state_slots == 0) return kv_layout_error(err, where + ": a recurrent layer, but the layout has no state slots");
        if (uint64_t bytes = 0; !detail::mul_fits(l.state_bytes, L.n_state_slots, bytes))
          return kv_layout_error(err, where + ": its state slots' size overflows");
        break;
      default:
        return kv_layout_error(err, where + ": unknown kind " + std::to_string(l.kind));
    }
  }
  return SL_OK;
}

}  // namespace sluice
