// Bounded reads: a file, pipe or device larger than the limit is an error naming it, found without
// reading the whole input (/dev/zero never ends).
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "util/file_io.h"
#include "util/json.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

std::filesystem::path temp_file(const std::string& contents) {
  std::random_device rd;
  auto path = std::filesystem::temp_directory_path() / ("sluice_util_test_" + std::to_string(rd()) + std::to_string(rd()));
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

TEST(ReadTextFile, FileOverTheLimitIsRefusedAndOneAtItIsRead) {
  const auto path = temp_file("0123456789");
  auto over = read_text_file(path, 9);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.message(), HasSubstr(path.string()));
  EXPECT_THAT(over.message(), HasSubstr("larger than the 9-byte limit"));
  auto at = read_text_file(path, 10);
  ASSERT_TRUE(at.ok()) << at.message();
  EXPECT_EQ(*at, "0123456789");
  std::filesystem::remove(path);
}

TEST(ReadTextFile, EndlessDeviceStopsAtTheLimit) {
  if (!std::filesystem::exists("/dev/zero")) GTEST_SKIP() << "no /dev/zero";
  auto r = read_text_file("/dev/zero", 1 << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("more than 1048576 bytes"));
}

TEST(ReadAll, PipeIsReadToItsEndWithinTheLimit) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "hello", 5), 5);
  ::close(fds[1]);
  auto r = read_all(fds[0], 5, "the pipe");
  ::close(fds[0]);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, "hello");

  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "hello!", 6), 6);
  ::close(fds[1]);
  auto over = read_all(fds[0], 5, "the pipe");
  ::close(fds[0]);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.message(), HasSubstr("the pipe: more than 5 bytes"));
}

TEST(JsonParseFile, AppliesTheByteLimitBeforeParsing) {
  const auto path = temp_file("[1,2,3,4,5,6,7,8,9]");
  json::JsonLimits limits;
  limits.max_bytes = 8;
  auto r = json::parse_file(path, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.message(), HasSubstr("8-byte limit"));
  auto ok = json::parse_file(path);
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->Size(), 9u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace sluice
