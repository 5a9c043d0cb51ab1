// The backend op suite (tests/backend) run against the OpenCL plugin from the build tree, on the
// plugin's best device (PoCL on a machine without a GPU). Skips with the probe's reason when no
// OpenCL device is present.
#include "backend_fixture.h"
#include "reference.h"

namespace sluice::test {

std::vector<BackendUnderTest> backends_under_test() { return {BackendUnderTest{"opencl", binary_path("lib"), ""}}; }

}  // namespace sluice::test
