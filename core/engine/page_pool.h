#pragma once
// KV pages and the prefix cache. The KV cache keeps one pool per kind of thing a block of
// positions needs (core/engine/kv_cache.h): FULL layers' pages, WINDOW layers' pages, recurrent
// layers' state snapshots — each published under the same chained hash.
//
// The KV cache is a pool of pages of page_tokens positions. A sequence holds a list of pages; a
// page is shared by reference count. When a page fills with known tokens, the sequence publishes it
// under the hash of its whole prefix (a chain: hash(previous block's hash, this block's tokens)),
// and the cache keeps a reference. A new request looks its prompt's full blocks up in order and
// reuses the longest cached prefix instead of recomputing it. Pages only the cache still holds are
// evicted least-recently-used first when fresh pages run out.
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "util/result.h"

namespace sluice {

class PagePool {
 public:
  using BlockHash = uint64_t;
  static constexpr BlockHash kRootHash = 0x736c75696365ull;  // the chain's start

  PagePool(uint32_t n_pages, uint32_t page_tokens);

  uint32_t page_tokens() const { return page_tokens_; }
  uint32_t n_pages() const { return static_cast<uint32_t>(refs_.size()); }
  uint32_t free_pages() const { return static_cast<uint32_t>(free_.size()); }
  uint32_t cached_pages() const { return static_cast<uint32_t>(by_hash_.size()); }
  uint32_t evictable_pages() const { return static_cast<uint32_t>(lru_.size()); }
  // Pages a new allocation could get: free plus evictable.
  uint32_t available_pages() const { return free_pages() + evictable_pages(); }
  uint32_t pages_in_use() const { return n_pages() - available_pages(); }

  // n fresh pages, each with one reference (the caller's); evicts cached blocks if needed.
  Result<std::vector<int32_t>> allocate(uint32_t n);
  // Adds a reference to each page (held already by someone: a sequence shares another's blocks).
  void retain(std::span<const int32_t> pages);
  // Drops the caller's reference to each page.
  void release(std::span<const int32_t> pages);

  static BlockHash chain(BlockHash previous, std::span<const int32_t> block_tokens);
  // Whether a block with this chained hash is cached (no reference taken).
  bool cached(BlockHash hash) const { return by_hash_.count(hash) != 0; }
  // The cached page holding the block with this chained hash, with a reference added for the
  // caller; nullopt on a miss.
  std::optional<int32_t> acquire_cached(BlockHash hash);
  // Records that `page` (held by the caller) now holds the full block `hash`; no-op if that block
  // is already cached (another sequence computed it first) or the page is already published.
  void publish(BlockHash hash, int32_t page);
  // Forgets every cached block (pages held only by the cache return to the free list).
  void clear_cache();

 private:
  void unreference(int32_t page);

  uint32_t page_tokens_;
  std::vector<uint32_t> refs_;                // references per page (sequences + the cache)
  std::vector<std::optional<BlockHash>> hash_of_;
  std::vector<int32_t> free_;                 // pages with no reference
  std::unordered_map<BlockHash, int32_t> by_hash_;
  std::list<int32_t> lru_;                    // cached pages no sequence holds, oldest first
  std::unordered_map<int32_t, std::list<int32_t>::iterator> lru_pos_;
};

}  // namespace sluice
