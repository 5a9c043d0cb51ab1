#pragma once
// The key a load balancer routes a request by so that a conversation returns to the replica whose
// prefix cache holds its pages (docs/DEPLOY.md). It is the prefix cache's own chained block hash
// (PagePool::chain over blocks of KvCache::kPageTokens tokens) of the prompt's first full blocks, up
// to kRoutingBlocks of them: the turns of one conversation share that beginning — its system prompt
// and first message — so they share the key, while a key over the whole prompt would change every turn.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace sluice {

inline constexpr uint32_t kRoutingBlocks = 4;

// The key of a prompt, or nullopt when it holds no full block (nothing cached to return to).
std::optional<uint64_t> prefix_routing_key(std::span<const int32_t> prompt_ids);

// As sixteen lowercase hex digits (the X-Sluice-Prefix-Key header's value).
std::string routing_key_text(uint64_t key);

}  // namespace sluice
