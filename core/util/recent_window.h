#pragma once
// The recent window's rule (backend.h, ABI 1.2), header-only for every backend: key j of a query at
// `pos` is read from the exact copies when j > pos - window, j >= lo (the sliding window's start)
// and every page from j's to pos's has a recent page. The host keeps a sequence's recent pages
// contiguous at its end, so the rule is a walk back from pos's page.
#include <algorithm>
#include <cstdint>

namespace sluice {

// The first key read exactly, or pos + 1 when none. recent: the sequence's row of the recent table.
inline int32_t recent_exact_from(const int32_t* recent, uint32_t window, uint32_t page_tokens, int32_t pos, int32_t lo) {
  if (window == 0 || !recent) return pos + 1;
  const int32_t pt = static_cast<int32_t>(page_tokens);
  const int32_t start = std::max(lo, pos - static_cast<int32_t>(window) + 1);
  int32_t from = pos + 1;
  for (int32_t p = pos / pt; p >= 0 && p >= start / pt && recent[p] >= 0; --p) from = std::max(start, p * pt);
  return from;
}

}  // namespace sluice
