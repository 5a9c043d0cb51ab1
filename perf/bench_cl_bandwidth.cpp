// The memory bandwidth an OpenCL device gives a plain kernel, to set the decode matvec's figures
// against: a read-only stream (every 16-byte word read once, folded into one value so the loads stay)
// and a copy (read + write), over a buffer of --mb megabytes, best of --reps launches timed by events.
// Not the backend: the OpenCL C API directly, on the first GPU (else the first device).
//   bench_cl_bandwidth [--mb 1024] [--reps 20] [--items-per-cu 2048]
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

const char* kSource = R"CL(
__kernel void read_words(__global const uint4* p, ulong n, __global uint* sink) {
  uint4 acc = (uint4)(0u);
  for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) acc ^= p[i];
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u) sink[0] = 1u;  // never true for the zero fill
}
__kernel void copy_words(__global const uint4* p, __global uint4* q, ulong n) {
  for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) q[i] = p[i];
}
)CL";

void check(cl_int e, const char* what) {
  if (e == CL_SUCCESS) return;
  std::fprintf(stderr, "bench_cl_bandwidth: %s failed (%d)\n", what, e);
  std::exit(1);
}

// Seconds of the fastest of `reps` launches.
double best_of(cl_command_queue q, cl_kernel k, size_t global, size_t local, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    cl_event ev;
    check(clEnqueueNDRangeKernel(q, k, 1, nullptr, &global, &local, 0, nullptr, &ev), "launch");
    check(clWaitForEvents(1, &ev), "wait");
    cl_ulong t0 = 0, t1 = 0;
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof(t0), &t0, nullptr);
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof(t1), &t1, nullptr);
    clReleaseEvent(ev);
    best = std::min(best, (t1 - t0) * 1e-9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mb = 1024, per_cu = 2048;
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mb") mb = std::stoul(argv[i + 1]);
    else if (a == "--reps") reps = std::stoi(argv[i + 1]);
    else if (a == "--items-per-cu") per_cu = std::stoul(argv[i + 1]);
    else {
      std::fprintf(stderr, "bench_cl_bandwidth: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  cl_uint n_platforms = 0;
  check(clGetPlatformIDs(0, nullptr, &n_platforms), "clGetPlatformIDs");
  std::vector<cl_platform_id> platforms(n_platforms);
  check(clGetPlatformIDs(n_platforms, platforms.data(), nullptr), "clGetPlatformIDs");
  cl_device_id device = nullptr;
  for (cl_device_type type : {cl_device_type(CL_DEVICE_TYPE_GPU), cl_device_type(CL_DEVICE_TYPE_ALL)})
    for (auto p : platforms)
      if (!device && clGetDeviceIDs(p, type, 1, &device, nullptr) != CL_SUCCESS) device = nullptr;
  if (!device) {
    std::fprintf(stderr, "bench_cl_bandwidth: no OpenCL device\n");
    return 1;
  }
  char name[256] = {};
  cl_uint cus = 0;
  clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof(name), name, nullptr);
  clGetDeviceInfo(device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(cus), &cus, nullptr);
  cl_int e = CL_SUCCESS;
  cl_context ctx = clCreateContext(nullptr, 1, &device, nullptr, nullptr, &e);
  check(e, "clCreateContext");
  cl_command_queue q = clCreateCommandQueue(ctx, device, CL_QUEUE_PROFILING_ENABLE, &e);
  check(e, "clCreateCommandQueue");
  cl_program prog = clCreateProgramWithSource(ctx, 1, &kSource, nullptr, &e);
  check(e, "clCreateProgramWithSource");
  check(clBuildProgram(prog, 1, &device, "-cl-std=CL1.2", nullptr, nullptr), "clBuildProgram");
  const size_t bytes = mb << 20;
  const cl_ulong words = bytes / 16;
  cl_mem src = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, nullptr, &e);
  check(e, "clCreateBuffer");
  cl_mem dst = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, nullptr, &e);
  check(e, "clCreateBuffer");
  cl_mem sink = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4, nullptr, &e);
  check(e, "clCreateBuffer");
  const cl_uint zero = 0;
  check(clEnqueueFillBuffer(q, src, &zero, 4, 0, bytes, 0, nullptr, nullptr), "fill");
  check(clFinish(q), "clFinish");
  cl_kernel rk = clCreateKernel(prog, "read_words", &e);
  check(e, "read_words");
  clSetKernelArg(rk, 0, sizeof(cl_mem), &src);
  clSetKernelArg(rk, 1, sizeof(cl_ulong), &words);
  clSetKernelArg(rk, 2, sizeof(cl_mem), &sink);
  cl_kernel ck = clCreateKernel(prog, "copy_words", &e);
  check(e, "copy_words");
  clSetKernelArg(ck, 0, sizeof(cl_mem), &src);
  clSetKernelArg(ck, 1, sizeof(cl_mem), &dst);
  clSetKernelArg(ck, 2, sizeof(cl_ulong), &words);
  const size_t local = 256, global = std::max<size_t>(local, size_t(cus) * per_cu / local * local);
  const double tr = best_of(q, rk, global, local, reps), tc = best_of(q, ck, global, local, reps);
  std::printf("| device | buffer MB | work-items | read GB/s | copy GB/s (read + write) |\n|---|---|---|---|---|\n");
  std::printf("| %s | %zu | %zu | %.1f | %.1f |\n", name, mb, global, bytes / tr * 1e-9, 2.0 * bytes / tc * 1e-9);
  for (cl_mem m : {src, dst, sink}) clReleaseMemObject(m);
  clReleaseKernel(rk);
  clReleaseKernel(ck);
  clReleaseProgram(prog);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  return 0;
}
