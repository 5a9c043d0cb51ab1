#pragma once
// The OpenCL C sources of kernels_cl/, embedded into the plugin at build time (embed_kernels.cmake).
#include <cstddef>

namespace sluice::ocl::kernels_cl {

struct Source {
  const char* name;  // file name without .cl: "common", "matvec", ...
  const char* text;
};
extern const Source kSources[];
extern const std::size_t kSourceCount;

}  // namespace sluice::ocl::kernels_cl
