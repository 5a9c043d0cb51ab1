#include "engine/page_pool.h"

#include <xxhash.h>

#include <algorithm>

namespace sluice {

PagePool::PagePool(uint32_t n_pages, uint32_t page_tokens)
    : page_tokens_(page_tokens), refs_(n_pages, 0), hash_of_(n_pages) {
  free_.reserve(n_pages);
  for (uint32_t i = 0; i < n_pages; ++i) free_.push_back(static_cast<int32_t>(n_pages - 1 - i));  // low pages first
}

Result<std::vector<int32_t>> PagePool::allocate(uint32_t n) {
  if (n > available_pages())
    return make_error("KV cache full: need " + std::to_string(n) + " pages of " + std::to_string(page_tokens_) +
                      " tokens, " + std::to_string(available_pages()) + " available");
  while (free_.size() < n) {  // evict the least recently used cached block
    const int32_t page = lru_.front();
    lru_.pop_front();
    lru_pos_.erase(page);
    by_hash_.erase(*hash_of_[page]);
    hash_of_[page].reset();
    refs_[page] = 0;
    free_.push_back(page);
  }
  std::vector<int32_t> pages(free_.end() - n, free_.end());
  free_.resize(free_.size() - n);
  std::reverse(pages.begin(), pages.end());
  for (int32_t p : pages) refs_[p] = 1;
  return pages;
}

void PagePool::unreference(int32_t page) {
  if (refs_[page] == 0) return;  // defensive: never underflow
  --refs_[page];
  if (refs_[page] == 0) {
    free_.push_back(page);
  } else if (refs_[page] == 1 && hash_of_[page]) {
    // Only the cache holds it now: evictable, newest last.
    lru_.push_back(page);
    lru_pos_[page] = std::prev(lru_.end());
  }
}

void PagePool::retain(std::span<const int32_t> pages) {
  for (int32_t p : pages) {
    if (p < 0 || static_cast<std::size_t>(p) >= refs_.size()) continue;
    if (auto pos = lru_pos_.find(p); pos != lru_pos_.end()) {  // held again: not evictable
      lru_.erase(pos->second);
      lru_pos_.erase(pos);
    }
    ++refs_[p];
  }
}

void PagePool::release(std::span<const int32_t> pages) {
  for (int32_t p : pages)
    if (p >= 0 && static_cast<std::size_t>(p) < refs_.size()) unreference(p);
}

PagePool::BlockHash PagePool::chain(BlockHash previous, std::span<const int32_t> block_tokens) {
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), previous);
}

std::optional<int32_t> PagePool::acquire_cached(BlockHash hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const int32_t page = it->second;
  if (auto pos = lru_pos_.find(page); pos != lru_pos_.end()) {  // in use again: not evictable
    lru_.erase(pos->second);
    lru_pos_.erase(pos);
  }
  ++refs_[page];
  return page;
}

void PagePool::publish(BlockHash hash, int32_t page) {
  if (hash_of_[page] || by_hash_.count(hash)) return;
  by_hash_.emplace(hash, page);
  hash_of_[page] = hash;
  ++refs_[page];  // the cache's reference
}

void PagePool::clear_cache() {
  for (auto& [hash, page] : by_hash_) {
    hash_of_[page].reset();
    if (auto pos = lru_pos_.find(page); pos != lru_pos_.end()) {
      lru_.erase(pos->second);
      lru_pos_.erase(pos);
    }
    unreference(page);
  }
  by_hash_.clear();
}

}  // namespace sluice
