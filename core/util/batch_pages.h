#pragma once
// The check every backend makes of a batch before kv_write or attention touch a layer of the cache
// (header-only, for every backend): each token's pages that the layer reads — every page up to its
// position's for a FULL layer, those its window reaches for a WINDOW layer — lie inside the layer's
// table and name pages of the layer, and — where the cache keeps a recent window for this batch —
// each recent-table entry among them names a recent page (or none).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sluice/backend.h"
#include "util/kv_shape.h"
#include "util/plugin_error.h"

namespace sluice {

// The first position a query at `pos` reads in a layer (its window's start, or 0).
inline int32_t first_key(const KvLayerShape& layer, int32_t pos) {
  return layer.kind == SL_KV_WINDOW ? std::max<int32_t>(0, pos - static_cast<int32_t>(layer.window) + 1) : 0;
}

// positions/seq_slots: the batch's tokens; table: the layer's (page_table for FULL, window_table for
// WINDOW; empty when the batch has none); recent_table: max_pages entries a sequence slot.
inline sl_status check_batch_pages(const std::vector<int32_t>& positions, const std::vector<int32_t>& seq_slots,
                                   const std::vector<int32_t>& table, const std::vector<int32_t>& recent_table,
                                   uint32_t max_pages, const sl_kv_layout& layout, const KvLayerShape& layer, bool keeps_recent,
                                   sl_error* err) {
  const char* which = layer.kind == SL_KV_WINDOW ? "window table" : "page table";
  if (!layer.has_kv()) return set_error(err, SL_ERR_INVALID_ARGUMENT, "a recurrent layer has no K/V pages");
  for (std::size_t t = 0; t < positions.size(); ++t) {
    const uint32_t last_page = static_cast<uint32_t>(positions[t]) / layout.page_tokens;
    if (last_page >= max_pages)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "position " + std::to_string(positions[t]) + " beyond the " + which);
    const std::size_t row = static_cast<std::size_t>(seq_slots[t]) * max_pages;
    if (row + max_pages > table.size()) return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string("the step has no ") + which);
    const uint32_t first_page = static_cast<uint32_t>(first_key(layer, positions[t])) / layout.page_tokens;
    for (uint32_t p = first_page; p <= last_page; ++p)
      if (table[row + p] < 0 || static_cast<uint32_t>(table[row + p]) >= layer.n_pages)
        return set_error(err, SL_ERR_INVALID_ARGUMENT,
                         std::string(which) + " entry " + std::to_string(table[row + p]) + " out of range (position " +
                             std::to_string(positions[t]) + " reads page " + std::to_string(p) + ")");
    if (!keeps_recent) continue;
    for (uint32_t p = first_page; p <= last_page; ++p)
      if (recent_table[row + p] >= static_cast<int32_t>(layout.n_recent_pages))
        return set_error(err, SL_ERR_INVALID_ARGUMENT, "recent table entry " + std::to_string(recent_table[row + p]) + " out of range");
  }
  return SL_OK;
}

// The batch's state slots against the cache's: every sequence of the step has one in range.
inline sl_status check_state_slots(const std::vector<int32_t>& state_slots, uint32_t n_seqs, const sl_kv_layout& layout, sl_error* err) {
  if (state_slots.size() < n_seqs) return set_error(err, SL_ERR_INVALID_ARGUMENT, "the step has no state slots");
  for (uint32_t s = 0; s < n_seqs; ++s)
    if (state_slots[s] < 0 || static_cast<uint32_t>(state_slots[s]) >= layout.n_state_slots)
      return set_error(err, SL_ERR_INVALID_ARGUMENT,
                       "sequence " + std::to_string(s) + "'s state slot " + std::to_string(state_slots[s]) + " out of range");
  return SL_OK;
}

}  // namespace sluice
