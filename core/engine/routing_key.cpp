#include "engine/routing_key.h"

#include <algorithm>
#include <cstdio>

#include "engine/kv_cache.h"
#include "engine/page_pool.h"

namespace sluice {

std::optional<uint64_t> prefix_routing_key(std::span<const int32_t> prompt_ids) {
  const std::size_t block = KvCache::kPageTokens;
  const std::size_t blocks = std::min<std::size_t>(prompt_ids.size() / block, kRoutingBlocks);
  if (blocks == 0) return std::nullopt;
  PagePool::BlockHash h = PagePool::kRootHash;
  for (std::size_t b = 0; b < blocks; ++b) h = PagePool::chain(h, prompt_ids.subspan(b * block, block));
  return h;
}

std::string routing_key_text(uint64_t key) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(key));
  return text;
}

}  // namespace sluice
