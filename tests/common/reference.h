#pragma once
// Locating the reference data (../shared by default; CMake option SLUICE_REFERENCE_DIR).
// A test that needs a file calls SLUICE_REQUIRE_REFERENCE(path): when the file is absent the test is
// reported as skipped with a message naming what is missing, and the rest of the suite still runs.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace sluice::test {

inline std::filesystem::path reference_dir() { return SLUICE_REFERENCE_DIR; }
inline std::filesystem::path reference_path(const std::string& relative) { return reference_dir() / relative; }
inline std::filesystem::path source_path(const std::string& relative) {
  return std::filesystem::path(SLUICE_SOURCE_DIR) / relative;
}
inline std::filesystem::path binary_path(const std::string& relative) {
  return std::filesystem::path(SLUICE_BINARY_DIR) / relative;
}

}  // namespace sluice::test

#define SLUICE_REQUIRE_REFERENCE(relative)                                                          \
  do {                                                                                              \
    if (!std::filesystem::exists(::sluice::test::reference_path(relative)))                         \
      GTEST_SKIP() << "reference data missing: " << ::sluice::test::reference_path(relative).string() \
                   << " (set -DSLUICE_REFERENCE_DIR)";                                              \
  } while (0)
