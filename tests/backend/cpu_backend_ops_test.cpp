// The backend op suite run against the reference CPU backend plugin from the build tree.
#include "backend_fixture.h"
#include "reference.h"

namespace sluice::test {

std::vector<BackendUnderTest> backends_under_test() { return {BackendUnderTest{"cpu", binary_path("lib"), ""}}; }

}  // namespace sluice::test
