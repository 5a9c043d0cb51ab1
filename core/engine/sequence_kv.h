#pragma once
// What a sequence holds in the KV cache (core/engine/kv_cache.h), block by block — a block being a
// run of page_tokens positions: its page in the FULL layers' pool, its page in the sliding-window
// layers' pool while some later query's window still reaches it, its recent-window page, and — for
// models with recurrent layers — its live state slot and the snapshots of that state taken at block
// ends, waiting to be published with their block. KvCache's methods keep it; the engine, the
// runtime's run() and greedy decoding a token ahead share it.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/page_pool.h"

namespace sluice {

struct SequenceKv {
  std::vector<int32_t> pages;         // FULL layers: the page of each block
  std::vector<int32_t> window_pages;  // WINDOW layers: the page of each block, -1 once no query reaches it (empty: none)
  std::vector<int32_t> recent;        // recent-window pages, parallel to pages (KvCache::update_recent)
  int32_t state_slot = -1;            // recurrent layers: the live state (-1: none yet)
  // (block, slot): the state after each block's last position, taken when the pass that ended the
  // block was issued and published with the block once its tokens are known.
  std::vector<std::pair<std::size_t, int32_t>> snapshots;
  int32_t n_past = 0;                 // positions whose K/V (and state) are computed
  int32_t first_own = 0;              // positions below came from the prefix cache
  // Prefix cache: blocks [0, n_published) are published; chain hash of the last one.
  std::size_t n_published = 0;
  PagePool::BlockHash last_hash = PagePool::kRootHash;
};

}  // namespace sluice
