// The prefix routing key (engine/routing_key.h): the turns of one conversation share it, different
// beginnings do not, and it is the prefix cache's own chained block hash.
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kv_cache.h"
#include "engine/page_pool.h"
#include "engine/routing_key.h"

namespace sluice {
namespace {

std::vector<int32_t> tokens(std::size_t n, int32_t first = 1) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(RoutingKey, APromptWithoutAFullBlockHasNone) {
  EXPECT_FALSE(prefix_routing_key({}).has_value());
  EXPECT_FALSE(prefix_routing_key(tokens(KvCache::kPageTokens - 1)).has_value());
  EXPECT_TRUE(prefix_routing_key(tokens(KvCache::kPageTokens)).has_value());
}

TEST(RoutingKey, LaterTurnsOfAConversationKeepItsKey) {
  const auto first_turn = tokens(KvCache::kPageTokens * kRoutingBlocks + 5);
  auto later_turn = first_turn;
  for (int i = 0; i < 300; ++i) later_turn.push_back(1000 + i);  // the answer and the next message
  EXPECT_EQ(prefix_routing_key(first_turn), prefix_routing_key(later_turn));
}

TEST(RoutingKey, ADifferentBeginningIsADifferentKey) {
  const auto a = tokens(KvCache::kPageTokens * 2);
  auto b = a;
  b[3] += 1;  // the first block differs
  auto c = a;
  c.back() += 1;  // the second (last full) block differs
  EXPECT_NE(prefix_routing_key(a), prefix_routing_key(b));
  EXPECT_NE(prefix_routing_key(a), prefix_routing_key(c));
}

TEST(RoutingKey, IsThePrefixCachesChainedHashOfTheFirstBlocks) {
  const auto t = tokens(KvCache::kPageTokens * (kRoutingBlocks + 2));
  PagePool::BlockHash h = PagePool::kRootHash;
  for (uint32_t b = 0; b < kRoutingBlocks; ++b)
    h = PagePool::chain(h, std::span<const int32_t>(t).subspan(b * KvCache::kPageTokens, KvCache::kPageTokens));
  EXPECT_EQ(prefix_routing_key(t), h);
  EXPECT_EQ(routing_key_text(0x1234abcdull), "000000001234abcd");
}

}  // namespace
}  // namespace sluice
