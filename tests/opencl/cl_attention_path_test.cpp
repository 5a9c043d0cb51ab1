// The tensor-core prefill attention's split of keys under a recent window
// (backends/opencl/cl_attention_path.h), without a device: attention_mma takes each query's codec keys
// below one floor, attention_recent_partial the exact ones, exactly where that floor gives every query
// of the run what recent_exact_from gives it; the gather's positions a work-group; and which caches it
// may read at all (f16 tiles: not the f32 cache).
#include <gtest/gtest.h>

#include <vector>

#include "cl_attention_path.h"
#include "plugin/builtin_codecs.h"

namespace sluice::ocl {
namespace {

constexpr uint32_t kPage = 16;

// Every query of the run [first, first + n) splits its keys at the same place both ways.
void expect_same_split(const std::vector<int32_t>& recent, uint32_t w, int32_t first, uint32_t n, uint32_t window, int32_t floor) {
  for (int32_t pos = first; pos < first + static_cast<int32_t>(n); ++pos) {
    const int32_t lo = window ? std::max<int32_t>(0, pos - static_cast<int32_t>(window) + 1) : 0;
    EXPECT_EQ(mma_exact_from(pos, lo, w, floor), recent_exact_from(recent.data(), w, kPage, pos, lo)) << "position " << pos;
  }
}

TEST(MmaRecentWindow, EveryPageWithExactCopiesGivesFloorZero) {
  const std::vector<int32_t> recent = {3, 0, 1, 4, 2};
  const auto floor = mma_recent_floor(recent.data(), 16, kPage, 40, 40, 0);
  ASSERT_TRUE(floor);
  EXPECT_EQ(*floor, 0);
  expect_same_split(recent, 16, 40, 40, 0, *floor);
  // The run's first queries read their 16 newest keys exactly, from position 25 on.
  EXPECT_EQ(mma_exact_from(40, 0, 16, *floor), 25);
}

TEST(MmaRecentWindow, AReusedPrefixWithoutCopiesReadsItsKeysFromTheCodec) {
  // Pages 0..2 came from a reused prefix: no exact rows; the run's queries at 40..47 have none either.
  const std::vector<int32_t> recent = {-1, -1, -1, 0, 1};
  const auto floor = mma_recent_floor(recent.data(), 16, kPage, 40, 40, 0);
  ASSERT_TRUE(floor);
  EXPECT_EQ(*floor, 48);
  expect_same_split(recent, 16, 40, 40, 0, *floor);
  EXPECT_EQ(mma_exact_from(47, 0, 16, *floor), 48);  // none exact
  EXPECT_EQ(mma_exact_from(50, 0, 16, *floor), 48);  // the copies start at the page
  EXPECT_EQ(mma_exact_from(70, 0, 16, *floor), 55);  // the window
}

TEST(MmaRecentWindow, CopiesThatStopBeforeTheRunsEndCannotBeOneFloor) {
  const std::vector<int32_t> recent = {0, 1, 2, 3, -1};
  EXPECT_FALSE(mma_recent_floor(recent.data(), 16, kPage, 40, 40, 0));
  // The same table for a run that ends before the gap is one floor.
  const auto floor = mma_recent_floor(recent.data(), 16, kPage, 20, 40, 0);
  ASSERT_TRUE(floor);
  expect_same_split(recent, 16, 20, 40, 0, *floor);
}

TEST(MmaRecentWindow, ASlidingWindowNarrowerThanTheRecentWindowReadsEveryKeyExactly) {
  const std::vector<int32_t> recent = {0, 1, 2, 3, 4};
  for (uint32_t window : {8u, 20u, 100u}) {
    const auto floor = mma_recent_floor(recent.data(), 16, kPage, 33, 40, window);
    ASSERT_TRUE(floor) << window;
    expect_same_split(recent, 16, 33, 40, window, *floor);
  }
  EXPECT_EQ(mma_exact_from(60, 53, 16, 0), 53);  // window 8: lo = 53, all exact
}

TEST(MmaRecentWindow, NoRecentWindowReadsEveryKeyFromTheGatheredRows) {
  EXPECT_EQ(mma_exact_from(100, 0, 0, 0), 101);
  EXPECT_EQ(mma_exact_from(100, 90, 0, 0), 101);
}

TEST(GatherRows, APowerOfTwoDividingThePageUpToSixteen) {
  EXPECT_EQ(gather_rows_per_group(16), 16u);
  EXPECT_EQ(gather_rows_per_group(32), 16u);
  EXPECT_EQ(gather_rows_per_group(256), 16u);
  EXPECT_EQ(gather_rows_per_group(8), 8u);
  EXPECT_EQ(gather_rows_per_group(12), 4u);
  EXPECT_EQ(gather_rows_per_group(7), 1u);
  EXPECT_EQ(gather_rows_per_group(0), 0u);
}

// The f32 cache keeps its precision: its layers prefill on the portable kernels (the NVIDIA goldens
// with the f32 cache went through f16 tiles and gpt_oss left its bound there). f16 and narrower take
// the tensor cores.
TEST(MmaCachePrecision, TheF32CacheIsReadInF32AndTheF16OneOnTensorCores) {
  auto bits_of = [](const sl_kvcodec_api* api, sl_kv_role role) {
    sl_kvcodec* codec = nullptr;
    sl_error err{};
    EXPECT_EQ(api->create(128, role, "", &codec, &err), SL_OK) << err.message;
    sl_kv_format f{};
    f.struct_size = sizeof(f);
    api->get_format(codec, &f);
    api->destroy(codec);
    return f.bits_per_value;
  };
  const float f32_k = bits_of(sluice::builtin_f32_codec(), SL_KV_KEYS), f32_v = bits_of(sluice::builtin_f32_codec(), SL_KV_VALUES);
  const float f16_k = bits_of(sluice::builtin_f16_codec(), SL_KV_KEYS), f16_v = bits_of(sluice::builtin_f16_codec(), SL_KV_VALUES);
  EXPECT_FALSE(mma_keeps_cache_precision(f32_k, f32_v));
  EXPECT_TRUE(mma_keeps_cache_precision(f16_k, f16_v));
  EXPECT_FALSE(mma_keeps_cache_precision(f16_k, f32_v));  // an f32 half of a mixed cache is enough
  EXPECT_FALSE(mma_keeps_cache_precision(f32_k, f16_v));
  EXPECT_TRUE(mma_keeps_cache_precision(3.25f, 4.25f));  // turbo3 keys, turbo4 values
}

}  // namespace
}  // namespace sluice::ocl

TEST(ClAttentionPath, FusedQueryAreasSplitToFillTheComputeUnitsUpToEightParts) {
  using sluice::ocl::fused_query_parts;
  EXPECT_EQ(fused_query_parts(132, 8, 0), 8u) << "a decode step of Llama-3-8B: 8 areas";
  EXPECT_EQ(fused_query_parts(132, 32, 0), 4u);
  EXPECT_EQ(fused_query_parts(132, 4096, 0), 1u) << "a prefill fills the device by itself";
  EXPECT_EQ(fused_query_parts(4, 8, 0), 1u);
  EXPECT_EQ(fused_query_parts(132, 0, 0), 1u);
  EXPECT_EQ(fused_query_parts(132, 8, 3), 3u) << "the tuning's count decides";
}
