#pragma once
// Backend conformance: every op of a backend plugin against plain double-precision reference math on
// random inputs of several shapes, with an error bound per op and weight form, and — given a second
// backend to compare with (Options::against, normally the CPU plugin) — against that backend on the
// same inputs. Shared by `sluice conformance` (per-op table for plugin authors) and the backend tests
// (tests/opencl, tests/backend).
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
  double seconds = 0;    // wall time on the backend under test (upload, op, download)
  std::string detail;    // first failure: case and values

  // Against the second backend (Options::against), which runs the op's cases first on the same inputs
  // and is held to the same reference math. Both values are within their bounds of the exact value,
  // so they must lie within the sum of the two bounds of each other — which holds whenever both meet
  // the reference math: what the comparison adds is the second backend checked on the same cases, a
  // check that both ran the same cases (count, inputs), and the measured difference.
  std::string against;  // "" (no second backend), "compared", "FAIL" (it failed reference math itself),
                        // or why it did not run the op ("unsupported", "not implemented")
  int compared = 0;                 // values compared with it
  double against_max_diff = 0;      // largest |got - its value|
  double against_worst_ratio = 0;   // largest |got - its value| / (bound + its bound) (pass: <= 1)

  bool passed() const { return status == "pass" || status.rfind("skipped", 0) == 0; }
};

struct Options {
  uint32_t seed = 1234;
  bool quick = false;  // fewer and smaller shapes (for slow devices such as PoCL in CI)
  const BackendHandle* against = nullptr;  // a second backend to compare with (the CPU's), or none
};

std::vector<OpResult> run_all(const BackendHandle& backend, const Options& options = {});

}  // namespace sluice::conformance
