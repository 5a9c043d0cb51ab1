#pragma once
// Backend conformance: every op of a backend plugin against plain double-precision reference math on
// random inputs of several shapes, with an error bound per op and weight form. Shared by
// `sluice conformance` (per-op table for plugin authors) and the backend tests (tests/opencl).
#include <cstdint>
#include <string>
#include <vector>

#include "plugin/backend_handle.h"

namespace sluice::conformance {

struct OpResult {
  std::string op;        // "matmul q4", "attention f16", ...
  std::string status;    // "pass", "FAIL", "skipped: <why>"
  int cases = 0;         // shapes/variants run
  double max_error = 0;  // largest |got - ref| seen
  double worst_ratio = 0;  // largest |got - ref| / bound (pass: <= 1)
  double seconds = 0;    // wall time on the backend (upload, op, download)
  std::string detail;    // first failure: case and values
  bool passed() const { return status == "pass" || status.rfind("skipped", 0) == 0; }
};

struct Options {
  uint32_t seed = 1234;
  bool quick = false;  // fewer and smaller shapes (for slow devices such as PoCL in CI)
};

std::vector<OpResult> run_all(const BackendHandle& backend, const Options& options = {});

}  // namespace sluice::conformance
