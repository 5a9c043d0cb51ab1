// The memory bandwidth an OpenCL device gives a plain kernel, to set the decode matvec's figures
// against: a read-only stream (every 16-byte word read once, folded into one value so the loads stay)
// and a copy (read + write), over a buffer of --mb megabytes, best of --reps launches timed by events.
// Then the same bytes read the way the decode products read their weights (kernels_cl/matvec.cl): a
// warp a row, lane l taking the row's 16-byte words l, l + 32, ..., a work-group's warps on
// consecutive rows — with no side loads, and with the 4-bit layout's two side streams (a 2-byte scale
// and bias a 64-column group from arrays apart from the words) — for rows of --row-bytes (2048: 4096
// columns at 4 bits, 7168: 14336) and work-groups of --wg items. Whatever the products lose to the
// plain stream beyond these patterns' own loss is in their arithmetic or their activation loads:
// the table adds them a column at a time (the activation's four 16-byte planes a step, then the dp4a
// arithmetic on NVIDIA). --launch-mb 9,33,66: launches of those sizes (the o, down and gate/up
// matrices of llama3-8b at 4 bits), each over other rows than the last, as a model's layers are; 0
// (the default) the whole buffer.
// Not the backend: the OpenCL C API directly, on the first GPU (else the first device).
//   bench_cl_bandwidth [--mb 1024] [--reps 20] [--items-per-cu 2048] [--row-bytes 2048,7168] [--wg 128,1024]
//                      [--launch-mb 0,9,66]
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "cl_first_device.h"

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
// A warp a row of row_words words, rows from base_row on. `what` adds, a step: 1 the step's 64-column
// group's 2-byte scale and bias from arrays s and b, as the 4-bit products read them; 2 the
// activation's four 16-byte planes of the step from x (one row of them, shared by every warp: L1);
// 4 the dp4a products' arithmetic on them (NVIDIA, built with -DPTX; elsewhere an xor). dp4a_word
// restates kernels_cl/matvec.cl's: this program uses the OpenCL API alone, not the backend's sources.
#ifdef PTX
inline int dp4a_us(uint a, int b, int c) {
  int d;
  asm volatile("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
#else
inline int dp4a_us(uint a, int b, int c) { return (int)(a ^ (uint)b) + c; }
#endif
inline int dp4a_word(uint w, uint even, uint odd, int acc) {
  return dp4a_us((w >> 4) & 0x0f0f0f0fu, as_int(odd), dp4a_us(w & 0x0f0f0f0fu, as_int(even), acc));
}
__kernel void read_rows(__global const uint4* p, ulong base_row, uint row_words, __global const ushort* s,
                        __global const ushort* b, __global const uint4* x, uint what, __global uint* sink) {
  const uint lane = get_local_id(0) % 32u;
  const ulong row = base_row + get_global_id(0) / 32u;
  __global const uint4* w = p + row * row_words;
  const ulong groups = row_words / 2u;
  uint4 acc = (uint4)(0u);
  float facc = 0.0f;
  for (uint i = lane; i < row_words; i += 32u) {
    const uint4 wv = w[i];
    float sc = 0.0f, bi = 0.0f;
    if (what & 1u) {
      sc = (float)s[row * groups + i / 2u];
      bi = (float)b[row * groups + i / 2u];
    }
    uint4 h0 = (uint4)(0u), h1 = h0, l0 = h0, l1 = h0;
    if (what & 2u) {
      h0 = x[i];
      h1 = x[row_words + i];
      l0 = x[2u * row_words + i];
      l1 = x[3u * row_words + i];
    }
    if (what & 4u) {
      int dh = dp4a_word(wv.x, h0.x, h0.y, 0);
      dh = dp4a_word(wv.y, h0.z, h0.w, dh);
      dh = dp4a_word(wv.z, h1.x, h1.y, dh);
      dh = dp4a_word(wv.w, h1.z, h1.w, dh);
      int dl = dp4a_word(wv.x, l0.x, l0.y, 0);
      dl = dp4a_word(wv.y, l0.z, l0.w, dl);
      dl = dp4a_word(wv.z, l1.x, l1.y, dl);
      dl = dp4a_word(wv.w, l1.z, l1.w, dl);
      facc += sc * (float)(dh * 128 + dl) + bi;
    } else {
      acc ^= wv ^ h0 ^ h1 ^ l0 ^ l1;
      facc += sc + bi;
    }
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u || facc == 12345.0f) sink[0] = 1u;
}
)CL";

std::vector<size_t> size_list(const std::string& text) {
  std::vector<size_t> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t comma = text.find(',', at);
    out.push_back(std::stoul(text.substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

void check(cl_int e, const char* what) {
  if (e == CL_SUCCESS) return;
  std::fprintf(stderr, "bench_cl_bandwidth: %s failed (%d)\n", what, e);
  std::exit(1);
}

// Seconds of the fastest of `reps` launches; before_each(r) runs before launch r.
template <class Fn>
double best_of(cl_command_queue q, cl_kernel k, size_t global, size_t local, int reps, Fn&& before_each) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    before_each(r);
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
  std::vector<size_t> row_bytes = {2048, 7168}, wgs = {128, 1024}, launch_mb = {0};
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mb") mb = std::stoul(argv[i + 1]);
    else if (a == "--reps") reps = std::stoi(argv[i + 1]);
    else if (a == "--items-per-cu") per_cu = std::stoul(argv[i + 1]);
    else if (a == "--row-bytes") row_bytes = size_list(argv[i + 1]);
    else if (a == "--wg") wgs = size_list(argv[i + 1]);
    else if (a == "--launch-mb") launch_mb = size_list(argv[i + 1]);
    else {
      std::fprintf(stderr, "bench_cl_bandwidth: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  cl_device_id device = perf::first_cl_device().device;
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
  char vendor[256] = {};
  clGetDeviceInfo(device, CL_DEVICE_VENDOR, sizeof(vendor), vendor, nullptr);
  const bool nvidia = std::string(vendor).find("NVIDIA") != std::string::npos;  // inline PTX: dp4a
  check(clBuildProgram(prog, 1, &device, nvidia ? "-cl-std=CL1.2 -DPTX" : "-cl-std=CL1.2", nullptr, nullptr), "clBuildProgram");
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
  const auto none = [](int) {};
  const double tr = best_of(q, rk, global, local, reps, none), tc = best_of(q, ck, global, local, reps, none);
  std::printf("| device | buffer MB | work-items | read GB/s | copy GB/s (read + write) |\n|---|---|---|---|---|\n");
  std::printf("| %s | %zu | %zu | %.1f | %.1f |\n", name, mb, global, bytes / tr * 1e-9, 2.0 * bytes / tc * 1e-9);

  // Row streams. The side arrays: one 2-byte value a 64-column group (32 bytes of 4-bit words).
  const size_t side_bytes = bytes / 16;
  cl_mem sc = clCreateBuffer(ctx, CL_MEM_READ_WRITE, side_bytes, nullptr, &e);
  check(e, "clCreateBuffer");
  cl_mem bi = clCreateBuffer(ctx, CL_MEM_READ_WRITE, side_bytes, nullptr, &e);
  check(e, "clCreateBuffer");
  check(clEnqueueFillBuffer(q, sc, &zero, 4, 0, side_bytes, 0, nullptr, nullptr), "fill");
  check(clEnqueueFillBuffer(q, bi, &zero, 4, 0, side_bytes, 0, nullptr, nullptr), "fill");
  // The activation's planes for the longest row: four of row_words 16-byte words.
  size_t longest = 0;
  for (size_t rb : row_bytes) longest = std::max(longest, rb);
  cl_mem x = clCreateBuffer(ctx, CL_MEM_READ_WRITE, std::max<size_t>(longest * 4, 16), nullptr, &e);
  check(e, "clCreateBuffer");
  check(clEnqueueFillBuffer(q, x, &zero, 4, 0, std::max<size_t>(longest * 4, 16), 0, nullptr, nullptr), "fill");
  cl_kernel wk = clCreateKernel(prog, "read_rows", &e);
  check(e, "read_rows");
  std::printf("\n| pattern | row bytes | work-group | MB a launch | words GB/s | + scales, biases | + activation | + dp4a | "
              "µs a launch (all) |\n|---|---|---|---|---|---|---|---|---|\n");
  for (size_t rb : row_bytes)
    for (size_t wg : wgs)
      for (size_t lmb : launch_mb) {
        if (rb % 64 || wg % 32) continue;
        const size_t launch_bytes = lmb ? std::min(lmb << 20, bytes) : bytes;
        const size_t rows = launch_bytes / rb / (wg / 32) * (wg / 32), all_rows = bytes / rb;
        if (rows == 0) continue;
        const cl_uint row_words = static_cast<cl_uint>(rb / 16);
        double gbs[4], last_us = 0;
        const cl_uint whats[4] = {0u, 1u, 3u, 7u};
        for (int v = 0; v < 4; ++v) {
          clSetKernelArg(wk, 0, sizeof(cl_mem), &src);
          clSetKernelArg(wk, 2, sizeof(cl_uint), &row_words);
          clSetKernelArg(wk, 3, sizeof(cl_mem), &sc);
          clSetKernelArg(wk, 4, sizeof(cl_mem), &bi);
          clSetKernelArg(wk, 5, sizeof(cl_mem), &x);
          clSetKernelArg(wk, 6, sizeof(cl_uint), &whats[v]);
          clSetKernelArg(wk, 7, sizeof(cl_mem), &sink);
          // Each launch reads other rows than the one before it (a model's next matrix), so a launch
          // smaller than L2 is not served from there.
          const auto place = [&](int r) {
            const cl_ulong base = all_rows > rows ? cl_ulong(r) * rows % (all_rows - rows) : 0;
            clSetKernelArg(wk, 1, sizeof(cl_ulong), &base);
          };
          const double t = best_of(q, wk, rows * 32, wg, reps, place);
          gbs[v] = double(rows) * rb * (whats[v] & 1u ? 1.0 + 2.0 / 16 : 1.0) / t * 1e-9;
          last_us = t * 1e6;
        }
        std::printf("| a warp a row | %zu | %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", rb, wg,
                    double(rows) * rb / (1 << 20), gbs[0], gbs[1], gbs[2], gbs[3], last_us);
      }
  clReleaseKernel(wk);
  for (cl_mem m : {src, dst, sink, sc, bi, x}) clReleaseMemObject(m);
  clReleaseKernel(rk);
  clReleaseKernel(ck);
  clReleaseProgram(prog);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  return 0;
}
