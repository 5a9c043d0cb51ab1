// The built-in resident expert store: experts stay in the mapped model file; acquire is pointer
// arithmetic into it.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "plugin/expert_store_handle.h"
#include "plugin/resident_store.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

// A temp file whose byte i is (i * 7 + 3) mod 256, removed at the end of the test.
class TempModelFile {
 public:
  explicit TempModelFile(std::size_t size) {
    path_ = fs::temp_directory_path() / ("sluice-resident-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(reinterpret_cast<std::uintptr_t>(this)) + ".bin");
    std::vector<unsigned char> bytes(size);
    for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>((i * 7 + 3) % 256);
    std::ofstream(path_, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(size));
  }
  ~TempModelFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  const fs::path& path() const { return path_; }
  static unsigned char byte_at(std::size_t i) { return static_cast<unsigned char>((i * 7 + 3) % 256); }

 private:
  fs::path path_;
};

constexpr uint32_t kLayers = 2, kExperts = 3, kParts = 2;
constexpr uint64_t kPartBytes = 100;

// Expert (l, e) part p at offset 16 + ((l * kExperts + e) * kParts + p) * kPartBytes.
uint64_t part_offset(uint32_t l, uint32_t e, uint32_t p) { return 16 + ((l * kExperts + e) * kParts + p) * kPartBytes; }

class ResidentStore : public ::testing::Test {
 protected:
  void SetUp() override {
    for (uint32_t l = 0; l < kLayers; ++l)
      for (uint32_t e = 0; e < kExperts; ++e)
        for (uint32_t p = 0; p < kParts; ++p) parts_.push_back({0, part_offset(l, e, p), kPartBytes});
    path_ = file_.path().string();
    files_[0] = path_.c_str();
    config_.struct_size = sizeof(config_);
    config_.n_files = 1;
    config_.files = files_;
    config_.n_layers = kLayers;
    config_.n_experts = kExperts;
    config_.n_parts = kParts;
    config_.parts = parts_.data();
    config_.options = "";
  }
  void TearDown() override {
    if (store_) api_->destroy(store_);
  }

  const sl_expertstore_api* api_ = builtin_resident_store();
  TempModelFile file_{16 + kLayers * kExperts * kParts * kPartBytes + 5};
  std::string path_;
  const char* files_[1] = {nullptr};
  std::vector<sl_expert_part> parts_;
  sl_expertstore_config config_{};
  sl_expertstore* store_ = nullptr;
};

TEST_F(ResidentStore, TableHasEveryRequiredFunction) {
  EXPECT_EQ(api_->struct_size, sizeof(sl_expertstore_api));
  EXPECT_NE(api_->create, nullptr);
  EXPECT_NE(api_->destroy, nullptr);
  EXPECT_NE(api_->acquire, nullptr);
  EXPECT_NE(api_->release, nullptr);
  EXPECT_NE(api_->get_stats, nullptr);
}

TEST_F(ResidentStore, AcquireReturnsPointersToEachPartsBytes) {
  sl_error err{};
  ASSERT_EQ(api_->create(&config_, &store_, &err), SL_OK) << err.message;
  const uint32_t experts[] = {2, 0};
  const void* parts[2 * kParts] = {};
  ASSERT_EQ(api_->acquire(store_, 1, experts, 2, parts, &err), SL_OK) << err.message;
  for (uint32_t i = 0; i < 2; ++i) {
    for (uint32_t p = 0; p < kParts; ++p) {
      const auto* bytes = static_cast<const unsigned char*>(parts[i * kParts + p]);
      ASSERT_NE(bytes, nullptr);
      const uint64_t offset = part_offset(1, experts[i], p);
      for (uint64_t b = 0; b < kPartBytes; ++b)
        ASSERT_EQ(bytes[b], TempModelFile::byte_at(offset + b)) << "expert " << experts[i] << " part " << p;
    }
  }
  // Parts of one expert are where the file has them relative to each other.
  EXPECT_EQ(static_cast<const std::byte*>(parts[1]) - static_cast<const std::byte*>(parts[0]),
            static_cast<std::ptrdiff_t>(kPartBytes));
  api_->release(store_, 1, experts, 2);
}

TEST_F(ResidentStore, OutOfRangeLayerOrExpertIsAnErrorWithAMessage) {
  sl_error err{};
  ASSERT_EQ(api_->create(&config_, &store_, &err), SL_OK) << err.message;
  const void* parts[kParts] = {};
  const uint32_t bad_expert[] = {kExperts};
  EXPECT_EQ(api_->acquire(store_, 0, bad_expert, 1, parts, &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("expert"), std::string::npos) << err.message;
  err = {};
  const uint32_t good_expert[] = {0};
  EXPECT_EQ(api_->acquire(store_, kLayers, good_expert, 1, parts, &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("layer"), std::string::npos) << err.message;
}

TEST_F(ResidentStore, StatsCountHitsAndNoReads) {
  sl_error err{};
  ASSERT_EQ(api_->create(&config_, &store_, &err), SL_OK) << err.message;
  const uint32_t experts[] = {0, 1, 2};
  const void* parts[3 * kParts];
  ASSERT_EQ(api_->acquire(store_, 0, experts, 3, parts, &err), SL_OK);
  api_->release(store_, 0, experts, 3);
  ASSERT_EQ(api_->acquire(store_, 1, experts, 1, parts, &err), SL_OK);
  api_->release(store_, 1, experts, 1);
  sl_expertstore_stats stats{};
  stats.struct_size = sizeof(stats);
  api_->get_stats(store_, &stats);
  EXPECT_EQ(stats.struct_size, sizeof(stats));
  EXPECT_EQ(stats.hits, 4u);
  EXPECT_EQ(stats.misses, 0u);
  EXPECT_EQ(stats.bytes_read, 0u);
}

TEST_F(ResidentStore, StatsRespectAnOlderCallersSmallerStruct) {
  sl_error err{};
  ASSERT_EQ(api_->create(&config_, &store_, &err), SL_OK) << err.message;
  const uint32_t experts[] = {1};
  const void* parts[kParts];
  ASSERT_EQ(api_->acquire(store_, 0, experts, 1, parts, &err), SL_OK);
  // A caller that only knows the members up to `hits`: nothing past them may be written.
  struct {
    sl_expertstore_stats stats;
    unsigned char guard[64];
  } small{};
  std::memset(&small, 0xAB, sizeof(small));
  small.stats.struct_size = offsetof(sl_expertstore_stats, misses);
  api_->get_stats(store_, &small.stats);
  EXPECT_EQ(small.stats.struct_size, offsetof(sl_expertstore_stats, misses));
  EXPECT_EQ(small.stats.hits, 1u);
  const auto* tail = reinterpret_cast<const unsigned char*>(&small.stats) + offsetof(sl_expertstore_stats, misses);
  EXPECT_EQ(*tail, 0xAB);
}

TEST_F(ResidentStore, MissingFileIsAnIoError) {
  const char* missing[] = {"/nonexistent/sluice/model.safetensors"};
  config_.files = missing;
  sl_error err{};
  EXPECT_EQ(api_->create(&config_, &store_, &err), SL_ERR_IO);
  EXPECT_STRNE(err.message, "");
  EXPECT_EQ(store_, nullptr);
}

TEST_F(ResidentStore, PartOutsideItsFileIsRejected) {
  parts_.back().offset = fs::file_size(file_.path());  // starts at the end: its bytes lie past it
  sl_error err{};
  EXPECT_EQ(api_->create(&config_, &store_, &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("outside"), std::string::npos) << err.message;
  EXPECT_EQ(store_, nullptr);
}

// The transformer binds every expert to a device once when the store lends memory that stays put
// (Transformer::attach_expert_store); only the built-in store promises that — the same functions
// reached through any other table (a plugin's) are not taken at their word.
TEST_F(ResidentStore, OnlyTheBuiltInStoreLendsStableMemory) {
  auto resident = ExpertStoreHandle::open(api_, "resident", config_);
  ASSERT_TRUE(resident.ok()) << resident.message();
  EXPECT_TRUE((*resident)->lends_stable_memory());
  std::vector<const void*> first, again;
  ASSERT_TRUE((*resident)->acquire(1, {2, 0}, first).ok());
  (*resident)->release(1, {2, 0});
  ASSERT_TRUE((*resident)->acquire(1, {2, 0}, again).ok());
  (*resident)->release(1, {2, 0});
  EXPECT_EQ(first, again);
  const sl_expertstore_api copy = *api_;
  auto plugin = ExpertStoreHandle::open(&copy, "copy", config_);
  ASSERT_TRUE(plugin.ok()) << plugin.message();
  EXPECT_FALSE((*plugin)->lends_stable_memory());
}

}  // namespace
}  // namespace sluice
