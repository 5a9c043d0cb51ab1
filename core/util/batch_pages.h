#pragma once
// The check every backend makes of a batch before kv_write or attention touch the cache (header-only,
// for every backend): each token's pages, up to its position's, lie inside the page table and name
// pages of the cache, and — where the cache keeps a recent window for this batch — each recent-table
// entry names a recent page (or none).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sluice/backend.h"
#include "util/plugin_error.h"

namespace sluice {

// positions/seq_slots: the batch's tokens; page_table/recent_table: max_pages entries a sequence slot.
inline sl_status check_batch_pages(const std::vector<int32_t>& positions, const std::vector<int32_t>& seq_slots,
                                   const std::vector<int32_t>& page_table, const std::vector<int32_t>& recent_table,
                                   uint32_t max_pages, const sl_kv_layout& layout, bool keeps_recent, sl_error* err) {
  for (std::size_t t = 0; t < positions.size(); ++t) {
    const uint32_t last_page = static_cast<uint32_t>(positions[t]) / layout.page_tokens;
    if (last_page >= max_pages)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "position " + std::to_string(positions[t]) + " beyond the page table");
    const std::size_t row = static_cast<std::size_t>(seq_slots[t]) * max_pages;
    const int32_t* table = page_table.data() + row;
    for (uint32_t p = 0; p <= last_page; ++p)
      if (table[p] < 0 || static_cast<uint32_t>(table[p]) >= layout.n_pages)
        return set_error(err, SL_ERR_INVALID_ARGUMENT, "page table entry " + std::to_string(table[p]) + " out of range");
    if (!keeps_recent) continue;
    for (uint32_t p = 0; p <= last_page; ++p)
      if (recent_table[row + p] >= static_cast<int32_t>(layout.n_recent_pages))
        return set_error(err, SL_ERR_INVALID_ARGUMENT, "recent table entry " + std::to_string(recent_table[row + p]) + " out of range");
  }
  return SL_OK;
}

}  // namespace sluice
