// --calibrate's disk read (server/disk_read.h): the model files read the way the uring expert store
// reads them — io_uring with the asked queue depth where the kernel has it — bounded by bytes,
// counting short reads at a file's end, and only *.safetensors files.
#include <gtest/gtest.h>
#include <liburing.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "server/disk_read.h"

namespace sluice::server {
namespace {
namespace fs = std::filesystem;

class DiskReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sluice_disk_read_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, std::size_t bytes) {
    std::ofstream f(dir_ / name, std::ios::binary);
    std::vector<char> data(bytes, 'x');
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  static bool kernel_has_uring() {
    io_uring ring{};
    if (io_uring_queue_init(4, &ring, 0) != 0) return false;
    io_uring_queue_exit(&ring);
    return true;
  }
  fs::path dir_;
};

TEST_F(DiskReadTest, NoModelFilesReadsNothing) {
  write("model.bin", 1 << 20);  // not a safetensors file: not what the expert store reads
  const DiskRead r = measure_disk_read(dir_.string(), {});
  EXPECT_EQ(r.bytes, 0u);
  EXPECT_EQ(r.gbps, 0.0);
  EXPECT_FALSE(r.direct);
}

TEST_F(DiskReadTest, KeepsTheAskedDepthInFlightUntilTheBytesAreRead) {
  write("model-00001-of-00002.safetensors", 3 << 20);
  write("model-00002-of-00002.safetensors", (2 << 20) + 12345);
  DiskReadOptions o;
  o.most_bytes = 8 << 20;
  o.most_seconds = 60;
  o.request_bytes = 1 << 20;
  o.queue_depth = 4;
  const DiskRead r = measure_disk_read(dir_.string(), o);
  // Whole requests fit inside both files, so every read returns a request; the reads in flight when
  // the budget is reached still land (at most depth − 1 more).
  EXPECT_GE(r.bytes, o.most_bytes);
  EXPECT_LE(r.bytes, o.most_bytes + (o.queue_depth - 1) * o.request_bytes);
  EXPECT_EQ(r.bytes % o.request_bytes, 0u);
  EXPECT_GT(r.gbps, 0.0);
  EXPECT_EQ(r.uring, kernel_has_uring());
  EXPECT_EQ(r.queue_depth, r.uring ? 4u : 1u);
}

TEST_F(DiskReadTest, AFileShorterThanARequestCountsWhatItHas) {
  write("tiny.safetensors", 1000);
  DiskReadOptions o;
  o.most_bytes = 50'000;
  o.request_bytes = 1 << 20;
  o.queue_depth = 3;
  const DiskRead r = measure_disk_read(dir_.string(), o);
  EXPECT_GE(r.bytes, o.most_bytes);
  EXPECT_EQ(r.bytes % 1000, 0u);  // every read returned the whole (short) file
}

TEST_F(DiskReadTest, StopsAtTheTimeBudget) {
  write("model.safetensors", 1 << 20);
  DiskReadOptions o;
  o.most_bytes = ~0ull;  // never enough bytes: only the time ends it
  o.most_seconds = 0.2;
  o.queue_depth = 2;
  const auto t0 = std::chrono::steady_clock::now();
  const DiskRead r = measure_disk_read(dir_.string(), o);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_GT(r.bytes, 0u);
}

}  // namespace
}  // namespace sluice::server
