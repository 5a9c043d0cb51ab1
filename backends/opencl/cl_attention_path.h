// Which keys of a prefill run attention_mma takes from the gathered codec rows where the cache keeps a
// recent window (exact f16 copies of the newest keys before each query; core/util/recent_window.h):
// a decision on the host's tables, without a device, so that tests can check it on any machine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "util/recent_window.h"

namespace sluice::ocl {

// attention_mma multiplies f16 tiles: queries, keys and values rounded to f16. A cache that stores
// more than f16 keeps — the f32 codec, the precision its user asked for and the one the goldens are
// compared with — is read by the portable kernels, f32 throughout. Compressed codecs (≤ 16 bits a
// value) lose far more in their own rounding than f16 tiles add.
inline bool mma_keeps_cache_precision(float k_bits_per_value, float v_bits_per_value) {
  return k_bits_per_value <= 16.0f && v_bits_per_value <= 16.0f;
}

// The first key a query at pos reads exactly as attention_mma assumes it (am_last_key + 1 in
// kernels_cl/attention_mma.cl): max(lo, pos − window + 1, floor), or pos + 1 (none) below floor.
inline int32_t mma_exact_from(int32_t pos, int32_t lo, uint32_t recent_window, int32_t floor) {
  if (recent_window == 0) return pos + 1;
  return std::min(pos + 1, std::max({lo, pos - static_cast<int32_t>(recent_window) + 1, floor}));
}

// A run of n_tokens consecutive positions from first_pos of one sequence (recent: its row of the
// batch's recent table; window: the layer's sliding window, 0 none): the floor to give attention_mma —
// the first position of the pages with exact copies that end at the run's last page — where that one
// number gives every query of the run the exact keys recent_exact_from gives it (the split the recent
// window makes: the codec's rows below the first exact key, the exact copies from it). nullopt where
// it does not (pages with copies not contiguous up to the run's end): the portable kernels then serve.
inline std::optional<int32_t> mma_recent_floor(const int32_t* recent, uint32_t recent_window, uint32_t page_tokens,
                                               int32_t first_pos, uint32_t n_tokens, uint32_t window) {
  const int32_t pt = static_cast<int32_t>(page_tokens), last = first_pos + static_cast<int32_t>(n_tokens) - 1;
  int32_t page = last / pt;
  while (page >= 0 && recent[page] >= 0) --page;
  const int32_t floor = (page + 1) * pt;  // last + 1 rounded up to a page: no copy in the run's last page
  for (int32_t pos = first_pos; pos <= last; ++pos) {
    const int32_t lo = window ? std::max<int32_t>(0, pos - static_cast<int32_t>(window) + 1) : 0;
    if (recent_exact_from(recent, recent_window, page_tokens, pos, lo) != mma_exact_from(pos, lo, recent_window, floor))
      return std::nullopt;
  }
  return floor;
}

// Positions a work-group of kv_gather_f16_rows decodes together (kernels_cl/attention.cl): the
// largest power of two up to 16 (its local memory: 16 rows of head_dim floats) dividing the page, so
// that the rows of a head it reads are one page's, contiguous.
inline uint32_t gather_rows_per_group(uint32_t page_tokens) {
  uint32_t rows = 16;
  while (rows > 1 && page_tokens % rows) rows /= 2;
  return page_tokens ? rows : 0;
}

// Work-groups each fused query area is prepared by (attention_fused_queries' third dimension, a share
// of the K codec's rotations each): `areas` query areas (tokens × head groups) fill the compute units
// when there are few — a decode step has one a KV head — up to 8 parts; `forced` (tuning
// att_query_parts, 1–16) decides instead.
inline uint32_t fused_query_parts(uint32_t compute_units, uint64_t areas, uint32_t forced) {
  if (forced) return forced;
  if (areas == 0) return 1;
  return static_cast<uint32_t>(std::clamp<uint64_t>(compute_units / areas, 1, 8));
}

}  // namespace sluice::ocl
