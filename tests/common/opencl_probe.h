#pragma once
// Whether this build's OpenCL backend plugin loads here (PoCL on the CI machine): "" when it does,
// else why not — for tests that skip with that message.
#include <string>

#include "plugin/plugin_registry.h"
#include "reference.h"

namespace sluice::test {

inline std::string opencl_unavailable() {
  PluginRegistry registry;
  registry.scan(binary_path("lib"));
  for (const auto& r : registry.records())
    if (r.kind == "backend" && r.name == "opencl") return r.loaded ? "" : r.status;
  return "no sluice-backend-opencl.so in " + binary_path("lib").string();
}

}  // namespace sluice::test
