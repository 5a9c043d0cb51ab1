#include "server/memory_plan.h"

#include <gtest/gtest.h>

using namespace sluice;
using namespace sluice::server;

TEST(MemoryPlan, ParsesByteSizes) {
  EXPECT_EQ(parse_byte_size("1024"), 1024u);
  EXPECT_EQ(parse_byte_size("8G"), 8ull << 30);
  EXPECT_EQ(parse_byte_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_byte_size("1.5k"), 1536u);
  EXPECT_FALSE(parse_byte_size("lots").has_value());
  EXPECT_FALSE(parse_byte_size("8X").has_value());
}

TEST(MemoryPlan, KvBytesPerTokenCountsKeysAndValuesOfEveryLayer) {
  ModelConfig c;
  c.num_layers = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(c, 2), 2.0 * 4 * 2 * 64 * 2);
}
