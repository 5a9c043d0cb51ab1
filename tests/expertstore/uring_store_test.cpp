// The uring expert store against a file of known bytes: the right bytes at the right pointers,
// honest counters (bytes read = what misses fetched), the budget's LRU eviction, prefetch, the
// pread fallback, and a file truncated under the store failing that acquire but not the store.
#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>

#include "plugin/plugin_registry.h"
#include "reference.h"

namespace sluice {
namespace {

constexpr uint32_t kLayers = 2, kExperts = 8, kParts = 3;
constexpr uint64_t kPartBytes = 10000;  // not a multiple of 4096: O_DIRECT reads a superset

class UringStore : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.load_file(test::binary_path("lib/sluice-expertstore-uring.so"));
    const auto* rec = registry_.find(SL_PLUGIN_EXPERTSTORE, "uring");
    ASSERT_NE(rec, nullptr) << (registry_.records().empty() ? "" : registry_.records().back().status);
    api_ = static_cast<const sl_expertstore_api*>(rec->descriptor->api);
    dir_ = std::filesystem::temp_directory_path() / ("sluice_uring_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "experts.bin").string();
    std::ofstream out(path_, std::ios::binary);
    // Part p of expert e in layer l starts 7 bytes in and holds bytes (l*31 + e*7 + p*3 + i) % 251.
    const std::string pad(7, 'x');
    out << pad;
    for (uint32_t l = 0; l < kLayers; ++l)
      for (uint32_t e = 0; e < kExperts; ++e)
        for (uint32_t p = 0; p < kParts; ++p) {
          sl_expert_part part{0, static_cast<uint64_t>(out.tellp()), kPartBytes};
          parts_.push_back(part);
          for (uint64_t i = 0; i < kPartBytes; ++i) out.put(static_cast<char>(byte_at(l, e, p, i)));
        }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static unsigned char byte_at(uint32_t l, uint32_t e, uint32_t p, uint64_t i) {
    return static_cast<unsigned char>((l * 31 + e * 7 + p * 3 + i) % 251);
  }

  sl_expertstore* make(uint64_t budget, const char* options) {
    const char* files[] = {path_.c_str()};
    sl_expertstore_config cfg{sizeof(cfg), 1, files, kLayers, kExperts, kParts, parts_.data(), budget, options};
    sl_expertstore* s = nullptr;
    sl_error err{};
    EXPECT_EQ(api_->create(&cfg, &s, &err), SL_OK) << err.message;
    return s;
  }

  sl_expertstore_stats stats(sl_expertstore* s) {
    sl_expertstore_stats st{};
    st.struct_size = sizeof st;
    api_->get_stats(s, &st);
    return st;
  }

  void expect_expert_bytes(const void* const* ptrs, uint32_t l, uint32_t e) {
    for (uint32_t p = 0; p < kParts; ++p) {
      const auto* b = static_cast<const unsigned char*>(ptrs[p]);
      for (uint64_t i = 0; i < kPartBytes; i += 997) ASSERT_EQ(b[i], byte_at(l, e, p, i)) << l << "/" << e << "/" << p << " @" << i;
      ASSERT_EQ(b[kPartBytes - 1], byte_at(l, e, p, kPartBytes - 1));
    }
  }

  // Bytes a miss of one expert reads. Its three parts lie back to back, so the store reads them as
  // one run: exactly, without O_DIRECT; as the page-aligned superset (up to the file's end) with it.
  uint64_t miss_bytes(uint32_t l, uint32_t e, bool direct) const {
    const auto& first = parts_[(l * kExperts + e) * kParts];
    const auto& last = parts_[(l * kExperts + e) * kParts + kParts - 1];
    const uint64_t begin = first.offset, end = last.offset + last.bytes;
    if (!direct) return end - begin;
    return std::min<uint64_t>((end + 4095) / 4096 * 4096, std::filesystem::file_size(path_)) - begin / 4096 * 4096;
  }

  PluginRegistry registry_;
  const sl_expertstore_api* api_ = nullptr;
  std::filesystem::path dir_;
  std::string path_;
  std::vector<sl_expert_part> parts_;
};

TEST_F(UringStore, AcquireGivesTheExpertsBytesAndCountsBytesReallyRead) {
  for (const char* options : {"", "uring=0", "direct=0"}) {
    sl_expertstore* s = make(0, options);
    ASSERT_NE(s, nullptr);
    const bool direct = stats(s).direct_io == 1;
    const uint32_t experts[] = {3, 5};
    const void* ptrs[2 * kParts];
    sl_error err{};
    ASSERT_EQ(api_->acquire(s, 1, experts, 2, ptrs, &err), SL_OK) << err.message;
    expect_expert_bytes(ptrs, 1, 3);
    expect_expert_bytes(ptrs + kParts, 1, 5);
    api_->release(s, 1, experts, 2);
    auto st = stats(s);
    EXPECT_EQ(st.misses, 2u) << options;
    EXPECT_EQ(st.hits, 0u);
    EXPECT_EQ(st.read_requests, 2u);  // one request per expert: its parts are adjacent in the file
    EXPECT_EQ(st.bytes_read, miss_bytes(1, 3, direct) + miss_bytes(1, 5, direct)) << options;
    // Again: served from memory, nothing read.
    ASSERT_EQ(api_->acquire(s, 1, experts, 2, ptrs, &err), SL_OK);
    expect_expert_bytes(ptrs, 1, 3);
    api_->release(s, 1, experts, 2);
    EXPECT_EQ(stats(s).hits, 2u);
    EXPECT_EQ(stats(s).bytes_read, st.bytes_read);
    sl_expertstore_layer_stats ls{};
    ls.struct_size = sizeof ls;
    api_->get_layer_stats(s, 1, &ls);
    EXPECT_EQ(ls.misses, 2u);
    EXPECT_EQ(ls.hits, 2u);
    api_->destroy(s);
  }
}

TEST_F(UringStore, BudgetEvictsLeastRecentlyUsedUnpinnedExperts) {
  // Room for about one expert: every new expert evicts the previous one.
  sl_expertstore* s = make(3 * (kPartBytes + 8192), "");
  ASSERT_NE(s, nullptr);
  const void* ptrs[kParts];
  sl_error err{};
  for (uint32_t e : {0u, 1u, 0u}) {
    ASSERT_EQ(api_->acquire(s, 0, &e, 1, ptrs, &err), SL_OK) << err.message;
    expect_expert_bytes(ptrs, 0, e);
    api_->release(s, 0, &e, 1);
  }
  auto st = stats(s);
  EXPECT_EQ(st.misses, 3u);
  EXPECT_GE(st.evictions, 2u);
  EXPECT_LE(st.cache_bytes, st.budget_bytes);
  // Pinned experts are never evicted, even past the budget.
  const uint32_t both[] = {2, 3};
  const void* two[2 * kParts];
  ASSERT_EQ(api_->acquire(s, 0, both, 2, two, &err), SL_OK);
  expect_expert_bytes(two, 0, 2);
  expect_expert_bytes(two + kParts, 0, 3);
  api_->release(s, 0, both, 2);
  api_->destroy(s);
}

TEST_F(UringStore, PrefetchedExpertsAreHitsWhenAcquired) {
  sl_expertstore* s = make(0, "");
  ASSERT_NE(s, nullptr);
  const uint32_t experts[] = {1, 6};
  api_->prefetch(s, 0, experts, 2);
  const void* ptrs[2 * kParts];
  sl_error err{};
  ASSERT_EQ(api_->acquire(s, 0, experts, 2, ptrs, &err), SL_OK) << err.message;
  expect_expert_bytes(ptrs + kParts, 0, 6);
  api_->release(s, 0, experts, 2);
  auto st = stats(s);
  EXPECT_EQ(st.prefetched, 2u);
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.misses, 0u);
  api_->destroy(s);
}

TEST_F(UringStore, TruncatedFileFailsThatAcquireAndTheStoreKeepsServing) {
  for (const char* options : {"", "uring=0"}) {
    SetUp();
    sl_expertstore* s = make(0, options);
    ASSERT_NE(s, nullptr);
    // Cut the file in the middle of layer 1: its later experts can no longer be read.
    std::filesystem::resize_file(path_, parts_[(1 * kExperts + 4) * kParts].offset);
    const void* ptrs[kParts];
    sl_error err{};
    uint32_t late = 6;
    EXPECT_EQ(api_->acquire(s, 1, &late, 1, ptrs, &err), SL_ERR_IO) << options;
    EXPECT_NE(std::string(err.message).find("short read"), std::string::npos) << err.message;
    EXPECT_NE(std::string(err.message).find(path_), std::string::npos) << err.message;
    uint32_t early = 2;
    ASSERT_EQ(api_->acquire(s, 0, &early, 1, ptrs, &err), SL_OK) << err.message;
    expect_expert_bytes(ptrs, 0, 2);
    api_->release(s, 0, &early, 1);
    api_->destroy(s);
    TearDown();
  }
}

TEST_F(UringStore, BadArgumentsAreErrorsWithMessages) {
  sl_expertstore* s = make(0, "");
  ASSERT_NE(s, nullptr);
  const void* ptrs[kParts];
  sl_error err{};
  uint32_t e = kExperts;
  EXPECT_EQ(api_->acquire(s, 0, &e, 1, ptrs, &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("expert"), std::string::npos);
  e = 0;
  EXPECT_EQ(api_->acquire(s, kLayers, &e, 1, ptrs, &err), SL_ERR_INVALID_ARGUMENT);
  api_->destroy(s);
  const char* files[] = {path_.c_str()};
  sl_expertstore_config cfg{sizeof(cfg), 1, files, kLayers, kExperts, kParts, parts_.data(), 0, "qd=banana"};
  sl_expertstore* bad = nullptr;
  EXPECT_EQ(api_->create(&cfg, &bad, &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("qd"), std::string::npos);
}

}  // namespace
}  // namespace sluice
