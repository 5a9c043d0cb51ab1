// What a launch costs between dependent kernels on an in-order OpenCL queue, and whether a recorded
// command buffer (cl_khr_command_buffer) makes it cheaper. A decode step on the GPU is ~160 dependent
// launches (perf/NOTES.md); each pays the device's launch latency between the end of one kernel and the
// start of the next. This times chains of --chain launches of two shapes: `tiny` (one work-group that
// adds 1 to 256 floats: the launch alone) and `stream` (--groups work-groups of 128 reading --mb MB,
// a small product's size), each alone and alternated with a kernel that uses 40 KB of local memory
// (does changing the L1 / local-memory split between kernels cost time?), issued one by one; queued behind a user event and released (the device's
// own pace, and the host's cost of an enqueue call); and — where the device has the extension —
// recorded once into a command buffer and replayed. Per launch: the wall time of --reps chains, each
// waited for, over reps × chain (the host's wait, ~10 µs a chain, is in every column).
// Results: perf/results/fused_decode_gpu/run65 (H100: 4–5 µs a launch; no command buffers there).
// Not the backend: the OpenCL C API directly, on the first GPU (else the first device).
//   bench_cl_launch [--chain 160] [--reps 50] [--mb 9] [--groups 1056]
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include "cl_first_device.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

const char* kSource = R"CL(
__kernel void tiny(__global float* x) { x[get_global_id(0)] += 1.0f; }
// tiny with LOCAL_FLOATS of local memory in use: alternated with tiny, it shows whether changing the
// compute units' split between L1 and local memory from one kernel to the next costs time.
__kernel void tiny_local(__global float* x) {
  __local float s[LOCAL_FLOATS];
  const uint lid = get_local_id(0);
  for (uint i = lid; i < LOCAL_FLOATS; i += get_local_size(0)) s[i] = (float)i;
  barrier(CLK_LOCAL_MEM_FENCE);
  x[get_global_id(0)] += s[(lid * 97u) % LOCAL_FLOATS];
}
// Reads its share of n uint4 words (grid-stride), folds them into one value so the loads stay, and adds
// it to x so that each launch depends on the last.
__kernel void stream(__global const uint4* p, ulong n, __global uint* x) {
  uint4 acc = (uint4)(0u);
  for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) acc ^= p[i];
  if (get_local_id(0) == 0) x[get_group_id(0) % 256u] += acc.x ^ acc.y ^ acc.z ^ acc.w;
}
)CL";

[[noreturn]] void fail(const char* what, cl_int e) {
  std::fprintf(stderr, "bench_cl_launch: %s failed (%d)\n", what, e);
  std::exit(1);
}
void check(cl_int e, const char* what) {
  if (e != CL_SUCCESS) fail(what, e);
}

// The command-buffer entry points, as cl_ext.h declares them (provisional; checked by name at run time).
struct CommandBufferApi {
  clCreateCommandBufferKHR_fn create = nullptr;
  clCommandNDRangeKernelKHR_fn ndrange = nullptr;
  clFinalizeCommandBufferKHR_fn finalize = nullptr;
  clEnqueueCommandBufferKHR_fn enqueue = nullptr;
  clReleaseCommandBufferKHR_fn release = nullptr;
  bool complete() const { return create && ndrange && finalize && enqueue && release; }
};

template <class F>
F entry(cl_platform_id p, const char* name) {
  return reinterpret_cast<F>(clGetExtensionFunctionAddressForPlatform(p, name));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Kernel {
  cl_kernel kernel;
  size_t global, local;
};

// A chain's launches: kernels[i % size] for launch i.
struct Shape {
  std::string name;
  std::vector<Kernel> kernels;
  cl_int enqueue(cl_command_queue q, int i, cl_uint n_wait = 0, const cl_event* wait = nullptr) const {
    const Kernel& k = kernels[i % kernels.size()];
    return clEnqueueNDRangeKernel(q, k.kernel, 1, nullptr, &k.global, &k.local, n_wait, wait, nullptr);
  }
};

// Microseconds a launch: `reps` chains of `chain` launches issued one by one, each waited for (as a
// command buffer without simultaneous use must be), after one untimed chain.
double issued(cl_command_queue q, const Shape& s, int chain, int reps) {
  auto run = [&] {
    for (int i = 0; i < chain; ++i) check(s.enqueue(q, i), "enqueue");
    check(clFinish(q), "clFinish");
  };
  run();
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) run();
  return seconds_since(t0) * 1e6 / (double(reps) * chain);
}

// The chain queued behind a user event first, then released: {host µs an enqueue call, µs a launch
// from the release to the chain's end} — the device's own pace, with the host already done.
std::pair<double, double> queued_first(cl_context ctx, cl_command_queue q, const Shape& s, int chain, int reps) {
  double host = 0, device = 0;
  for (int r = 0; r <= reps; ++r) {  // r == 0: untimed
    cl_int e = CL_SUCCESS;
    cl_event gate = clCreateUserEvent(ctx, &e);
    check(e, "clCreateUserEvent");
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < chain; ++i)
      check(s.enqueue(q, i, i == 0 ? 1 : 0, i == 0 ? &gate : nullptr), "enqueue");
    const double issued_s = seconds_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    check(clSetUserEventStatus(gate, CL_COMPLETE), "clSetUserEventStatus");
    check(clFinish(q), "clFinish");
    const double ran_s = seconds_since(t1);
    clReleaseEvent(gate);
    if (r > 0) {
      host += issued_s;
      device += ran_s;
    }
  }
  return {host * 1e6 / (double(reps) * chain), device * 1e6 / (double(reps) * chain)};
}

// The same chain recorded once into a command buffer, replayed `reps` times; -1 where recording fails.
double recorded(cl_command_queue q, const CommandBufferApi& api, const Shape& s, int chain, int reps) {
  cl_int e = CL_SUCCESS;
  cl_command_buffer_khr cb = api.create(1, &q, nullptr, &e);  // no simultaneous use: one replay at a time
  if (e != CL_SUCCESS) {
    std::printf("  clCreateCommandBufferKHR: error %d\n", e);
    return -1;
  }
  for (int i = 0; i < chain && e == CL_SUCCESS; ++i) {
    const Kernel& k = s.kernels[i % s.kernels.size()];
    e = api.ndrange(cb, nullptr, nullptr, k.kernel, 1, nullptr, &k.global, &k.local, 0, nullptr, nullptr, nullptr);
  }
  if (e == CL_SUCCESS) e = api.finalize(cb);
  if (e != CL_SUCCESS) {
    std::printf("  recording the chain: error %d\n", e);
    api.release(cb);
    return -1;
  }
  e = api.enqueue(1, &q, cb, 0, nullptr, nullptr);
  if (e != CL_SUCCESS) {
    std::printf("  clEnqueueCommandBufferKHR: error %d\n", e);
    api.release(cb);
    return -1;
  }
  check(clFinish(q), "clFinish");
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) {
    check(api.enqueue(1, &q, cb, 0, nullptr, nullptr), "clEnqueueCommandBufferKHR");
    check(clFinish(q), "clFinish");
  }
  const double us = seconds_since(t0) * 1e6 / (double(reps) * chain);
  api.release(cb);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  int chain = 160, reps = 50, groups = 1056;
  double mb = 9;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_cl_launch: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--chain") chain = std::atoi(next());
    else if (a == "--reps") reps = std::atoi(next());
    else if (a == "--mb") mb = std::atof(next());
    else if (a == "--groups") groups = std::atoi(next());
    else {
      std::fprintf(stderr, "usage: bench_cl_launch [--chain 160] [--reps 50] [--mb 9] [--groups 1056]\n");
      return 2;
    }
  }
  if (chain < 1 || reps < 1 || groups < 1 || mb <= 0) {
    std::fprintf(stderr, "bench_cl_launch: --chain, --reps, --groups and --mb must be positive\n");
    return 2;
  }

  const auto [platform, device] = perf::first_cl_device();
  if (!device) {
    std::fprintf(stderr, "bench_cl_launch: no OpenCL device\n");
    return 1;
  }
  char name[256] = {}, version[256] = {}, driver[256] = {};
  clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name, name, nullptr);
  clGetDeviceInfo(device, CL_DEVICE_VERSION, sizeof version, version, nullptr);
  clGetDeviceInfo(device, CL_DRIVER_VERSION, sizeof driver, driver, nullptr);
  size_t ext_bytes = 0;
  clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, 0, nullptr, &ext_bytes);
  std::string extensions(ext_bytes, '\0');
  clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, ext_bytes, extensions.data(), nullptr);
  const bool has_cb = extensions.find("cl_khr_command_buffer") != std::string::npos;
  std::printf("device: %s (%s, driver %s)\ncl_khr_command_buffer: %s\n", name, version, driver, has_cb ? "yes" : "no");
  // The extensions' versions (OpenCL 3.0), for the command-buffer ones: the provisional API changed.
  size_t ver_bytes = 0;
  if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS_WITH_VERSION, 0, nullptr, &ver_bytes) == CL_SUCCESS && ver_bytes) {
    std::vector<cl_name_version> vs(ver_bytes / sizeof(cl_name_version));
    clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS_WITH_VERSION, ver_bytes, vs.data(), nullptr);
    for (const auto& v : vs)
      if (std::strstr(v.name, "command_buffer") || std::strstr(v.name, "graph"))
        std::printf("  %s %u.%u.%u\n", v.name, CL_VERSION_MAJOR(v.version), CL_VERSION_MINOR(v.version),
                    CL_VERSION_PATCH(v.version));
  }
  cl_command_queue_properties required = 0;
  if (has_cb)
    clGetDeviceInfo(device, CL_DEVICE_COMMAND_BUFFER_REQUIRED_QUEUE_PROPERTIES_KHR, sizeof required, &required, nullptr);
  if (has_cb) std::printf("  queue properties a command buffer needs: 0x%llx\n", static_cast<unsigned long long>(required));

  cl_int e = CL_SUCCESS;
  cl_context ctx = clCreateContext(nullptr, 1, &device, nullptr, nullptr, &e);
  check(e, "clCreateContext");
  const cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, required, 0};
  cl_command_queue q = clCreateCommandQueueWithProperties(ctx, device, props, &e);
  check(e, "clCreateCommandQueueWithProperties");
  cl_program prog = clCreateProgramWithSource(ctx, 1, &kSource, nullptr, &e);
  check(e, "clCreateProgramWithSource");
  cl_ulong local_bytes = 0;
  clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_bytes, &local_bytes, nullptr);
  const cl_ulong local_floats = std::min<cl_ulong>(40 * 1024, local_bytes > 2048 ? local_bytes - 1024 : 1024) / 4;
  const std::string options = "-DLOCAL_FLOATS=" + std::to_string(local_floats) + "u";
  check(clBuildProgram(prog, 1, &device, options.c_str(), nullptr, nullptr), "clBuildProgram");
  cl_kernel tiny = clCreateKernel(prog, "tiny", &e);
  check(e, "clCreateKernel tiny");
  cl_kernel tiny_local = clCreateKernel(prog, "tiny_local", &e);
  check(e, "clCreateKernel tiny_local");
  cl_kernel stream = clCreateKernel(prog, "stream", &e);
  check(e, "clCreateKernel stream");

  const cl_ulong words = static_cast<cl_ulong>(mb * 1e6 / 16);
  cl_mem x = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 256 * sizeof(float), nullptr, &e);
  check(e, "clCreateBuffer");
  cl_mem p = clCreateBuffer(ctx, CL_MEM_READ_ONLY, words * 16, nullptr, &e);
  check(e, "clCreateBuffer");
  const cl_uint zero = 0;
  check(clEnqueueFillBuffer(q, x, &zero, sizeof zero, 0, 256 * sizeof(float), 0, nullptr, nullptr), "fill");
  check(clEnqueueFillBuffer(q, p, &zero, sizeof zero, 0, words * 16, 0, nullptr, nullptr), "fill");
  check(clSetKernelArg(tiny, 0, sizeof x, &x), "arg");
  check(clSetKernelArg(tiny_local, 0, sizeof x, &x), "arg");
  check(clSetKernelArg(stream, 0, sizeof p, &p), "arg");
  check(clSetKernelArg(stream, 1, sizeof words, &words), "arg");
  check(clSetKernelArg(stream, 2, sizeof x, &x), "arg");
  check(clFinish(q), "clFinish");

  CommandBufferApi api;
  if (has_cb) {
    api.create = entry<clCreateCommandBufferKHR_fn>(platform, "clCreateCommandBufferKHR");
    api.ndrange = entry<clCommandNDRangeKernelKHR_fn>(platform, "clCommandNDRangeKernelKHR");
    api.finalize = entry<clFinalizeCommandBufferKHR_fn>(platform, "clFinalizeCommandBufferKHR");
    api.enqueue = entry<clEnqueueCommandBufferKHR_fn>(platform, "clEnqueueCommandBufferKHR");
    api.release = entry<clReleaseCommandBufferKHR_fn>(platform, "clReleaseCommandBufferKHR");
    if (!api.complete()) std::printf("  the extension's entry points are not all there\n");
  }

  const Kernel k_tiny{tiny, 256, 256}, k_local{tiny_local, 256, 256}, k_stream{stream, size_t(groups) * 128, 128};
  char stream_name[64];
  std::snprintf(stream_name, sizeof stream_name, "stream, %d groups, %.0f MB", groups, mb);
  const std::string local_name = "tiny with " + std::to_string(local_floats * 4 / 1024) + " KB of local memory";
  const Shape shapes[] = {{"tiny", {k_tiny}},
                          {local_name, {k_local}},
                          {"tiny and " + local_name + ", alternating", {k_tiny, k_local}},
                          {stream_name, {k_stream}},
                          {std::string(stream_name) + " and " + local_name + ", alternating", {k_stream, k_local}}};
  std::printf("\n| kernel | chain | issued, µs a launch | queued first: host µs an enqueue | queued first: µs a launch after the release | command buffer, µs a launch |\n| --- | --- | --- | --- | --- | --- |\n");
  for (const Shape& s : shapes) {
    const double a = issued(q, s, chain, reps);
    const auto [host, device] = queued_first(ctx, q, s, chain, reps);
    const double b = api.complete() ? recorded(q, api, s, chain, reps) : -1;
    char recorded_us[32] = "—";
    if (b > 0) std::snprintf(recorded_us, sizeof recorded_us, "%.2f", b);
    std::printf("| %s | %d | %.2f | %.2f | %.2f | %s |\n", s.name.c_str(), chain, a, host, device, recorded_us);
  }
  clReleaseMemObject(p);
  clReleaseMemObject(x);
  clReleaseKernel(stream);
  clReleaseKernel(tiny_local);
  clReleaseKernel(tiny);
  clReleaseProgram(prog);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  return 0;
}
