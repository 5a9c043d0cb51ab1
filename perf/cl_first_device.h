// The device the standalone OpenCL probes (bench_cl_bandwidth, bench_cl_launch) measure: the first
// GPU of any platform, else the first device of any kind — through the OpenCL C API, not the backend.
#pragma once

#include <CL/cl.h>

#include <vector>

namespace perf {

struct FirstDevice {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;  // nullptr: no platform has a device
};

inline FirstDevice first_cl_device() {
  cl_uint n_platforms = 0;
  if (clGetPlatformIDs(0, nullptr, &n_platforms) != CL_SUCCESS || n_platforms == 0) return {};
  std::vector<cl_platform_id> platforms(n_platforms);
  if (clGetPlatformIDs(n_platforms, platforms.data(), nullptr) != CL_SUCCESS) return {};
  for (cl_device_type type : {cl_device_type(CL_DEVICE_TYPE_GPU), cl_device_type(CL_DEVICE_TYPE_ALL)})
    for (cl_platform_id p : platforms) {
      cl_device_id d = nullptr;
      if (clGetDeviceIDs(p, type, 1, &d, nullptr) == CL_SUCCESS && d) return {p, d};
    }
  return {};
}

}  // namespace perf
