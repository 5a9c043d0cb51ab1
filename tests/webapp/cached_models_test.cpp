// The local Hugging Face cache as the Models tab lists it: repos found by their folder names, the
// snapshot refs/main points at, complete or what is missing, and the memory a model needs to serve.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "server/cached_models.h"

namespace sluice::server {
namespace {

namespace fs = std::filesystem;
const fs::path kModel = fs::path(SLUICE_SOURCE_DIR) / "models" / "tiny-code-qwen2";
const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

class CacheDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-cached-models-XXXXXX";
    root_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(root_); }

  // models--org--name/{blobs,refs/main,snapshots/<commit>/file -> ../../blobs/<name>}, as huggingface_hub writes it.
  fs::path add_repo(const std::string& folder, bool with_ref, const std::vector<std::string>& skip = {}) {
    const fs::path repo = root_ / folder;
    fs::create_directories(repo / "blobs");
    fs::create_directories(repo / "snapshots" / kCommit);
    if (with_ref) {
      fs::create_directories(repo / "refs");
      std::ofstream(repo / "refs" / "main") << kCommit;
    }
    int n = 0;
    for (const auto& entry : fs::directory_iterator(kModel)) {
      const std::string name = entry.path().filename().string();
      if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
      const std::string blob = "blob" + std::to_string(n++);
      fs::copy_file(entry.path(), repo / "blobs" / blob);
      fs::create_symlink(fs::path("..") / ".." / "blobs" / blob, repo / "snapshots" / kCommit / name);
    }
    return repo;
  }

  fs::path root_;
};

TEST_F(CacheDir, ListsACompleteModelWithItsNeeds) {
  add_repo("models--sluice-test--tiny", true);
  const auto models = list_cached_models(root_);
  ASSERT_EQ(models.size(), 1u);
  const CachedModel& m = models[0];
  EXPECT_EQ(m.id, "sluice-test/tiny");
  EXPECT_EQ(m.commit, kCommit);
  EXPECT_TRUE(m.complete) << m.missing;
  EXPECT_EQ(m.snapshot_dir, (root_ / "models--sluice-test--tiny" / "snapshots" / kCommit).string());
  EXPECT_GT(m.disk_bytes, 18'000'000u);  // the links are followed to the blobs
  EXPECT_GT(m.weights_bytes, 18'000'000u);
  EXPECT_GT(m.kv_bytes_per_token, 0u);
  EXPECT_EQ(m.needed_bytes, m.weights_bytes + m.kv_bytes_per_token * kEstimateContext);
}

TEST_F(CacheDir, ASnapshotWithoutRefsIsStillFound) {
  add_repo("models--org--no-ref", false);
  const auto models = list_cached_models(root_);
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].commit, kCommit);
  EXPECT_TRUE(models[0].complete);
}

TEST_F(CacheDir, AnIncompleteSnapshotSaysWhatItLacks) {
  add_repo("models--org--partial", true, {"model-00002-of-00002.safetensors"});
  const auto models = list_cached_models(root_);
  ASSERT_EQ(models.size(), 1u);
  EXPECT_FALSE(models[0].complete);
  EXPECT_NE(models[0].missing.find("model-00002-of-00002.safetensors"), std::string::npos) << models[0].missing;
  EXPECT_EQ(models[0].needed_bytes, 0u);  // unknown: not estimated from part of a model
}

TEST_F(CacheDir, OtherFoldersAreIgnored) {
  fs::create_directories(root_ / "datasets--org--data" / "snapshots" / kCommit);
  fs::create_directories(root_ / "models--bad..name--x" / "snapshots" / kCommit);
  fs::create_directories(root_ / "models--org--empty" / "snapshots");
  fs::create_directories(root_ / ".locks");
  std::ofstream(root_ / "CACHEDIR.TAG") << "Signature: 8a477f597d28d172789f06886806bc55";
  EXPECT_TRUE(list_cached_models(root_).empty());
  EXPECT_TRUE(list_cached_models(root_ / "does-not-exist").empty());
}

}  // namespace
}  // namespace sluice::server
