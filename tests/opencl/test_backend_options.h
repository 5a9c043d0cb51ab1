#pragma once
// Backend options a ctest run (or a person measuring on a GPU) gives every OpenCL backend a test
// opens: SLUICE_TEST_BACKEND_OPTIONS, e.g. "tune.att_shfl_local=1" (tests/opencl/CMakeLists.txt runs
// the attention tests once more so). The backend reads no environment for its tuning; the tests pass
// this through sl_backend_config.options and read it to know which paths they expect.
#include <cstdlib>
#include <string>

namespace sluice::test {

inline std::string test_backend_options() {
  const char* e = std::getenv("SLUICE_TEST_BACKEND_OPTIONS");
  return e ? e : "";
}

// `options` followed by the test's own (the later of a setting given twice counts).
inline std::string with_test_options(const std::string& options) {
  const std::string extra = test_backend_options();
  if (extra.empty()) return options;
  return options.empty() ? extra : options + " " + extra;
}

// The value of tune.KEY=VALUE in the test options (the last one), or "" where it is not set.
inline std::string test_tuning(const std::string& key) {
  const std::string options = " " + test_backend_options();
  const std::string needle = "tune." + key + "=";
  std::string value;
  for (std::size_t at = options.find(needle); at != std::string::npos; at = options.find(needle, at + 1)) {
    const char before = options[at - 1];
    if (before != ' ' && before != ',' && before != '\t') continue;
    const std::size_t from = at + needle.size(), end = options.find_first_of(" ,\t\n", from);
    value = options.substr(from, end == std::string::npos ? std::string::npos : end - from);
  }
  return value;
}

}  // namespace sluice::test
