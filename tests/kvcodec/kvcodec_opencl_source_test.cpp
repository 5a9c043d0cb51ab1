// The OpenCL C that the turbo and q8 codecs hand to device backends (docs/PLUGINS-kvcodec.md):
// a K and a V instance's sources compile together in one program, and the device functions give the
// host codec's numbers — scores from score_local after rotate_local, and rows rebuilt with value +
// unrotate_local equal to decode(). Skipped where no OpenCL device exists.
#include <CL/cl.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "plugin/plugin_registry.h"
#include "reference.h"

namespace sluice {
namespace {

const char* kCheckKernels = R"CL(
/* buf: n_rot slots of HEAD_DIM (the rotated query), then one slot of scratch. */
__kernel void tq_check(__global const uchar* krows, uint k_row_bytes, __global const uchar* vrows, uint v_row_bytes,
                       __global const float* q, uint n_rows, __global float* scores, __global float* decoded,
                       __local float* buf) {
  const uint lid = get_local_id(0), lsize = get_local_size(0), d = HEAD_DIM;
  for (uint r = 0; r < sl_tq_k_n_rot; ++r) {
    for (uint i = lid; i < d; i += lsize) buf[r * d + i] = q[i];
    sl_tq_k_rotate_local(buf + r * d, r, lid, lsize);
  }
  for (uint r = lid; r < n_rows; r += lsize) scores[r] = sl_tq_k_score_local(krows + r * k_row_bytes, buf);
  __local float* tmp = buf + sl_tq_k_n_rot * d;
  for (uint row = 0; row < n_rows; ++row) {
    __global const uchar* v = vrows + row * v_row_bytes;
    float out[2] = {0.0f, 0.0f};  /* this work-item's coordinates lid and lid + lsize (d <= 2 * lsize) */
    for (uint r = 0; r < sl_tq_v_n_rot; ++r) {
      barrier(CLK_LOCAL_MEM_FENCE);
      for (uint i = lid; i < d; i += lsize)
        tmp[i] = sl_tq_v_rotation_of(v, sl_tq_v_block_of(i)) == r ? sl_tq_v_value(v, i) : 0.0f;
      sl_tq_v_unrotate_local(tmp, r, lid, lsize);
      for (uint k = 0, i = lid; i < d; i += lsize, ++k) out[k] += tmp[i];
    }
    for (uint k = 0, i = lid; i < d; i += lsize, ++k) decoded[row * d + i] = out[k];
  }
}
__kernel void q8_check(__global const uchar* rows, uint row_bytes, uint n_rows, __global float* out) {
  const uint i = get_global_id(0);
  if (i < n_rows * HEAD_DIM) out[i] = sl_q8_k_value(rows + (i / HEAD_DIM) * row_bytes, i % HEAD_DIM) +
                                     0.0f * sl_q8_v_value(rows, 0);
}
)CL";

struct Host {
  const sl_kvcodec_api* api = nullptr;
  sl_kvcodec* codec = nullptr;
  sl_kv_format format{};
  Host(const PluginRegistry& reg, const std::string& name, uint32_t d, sl_kv_role role) {
    const auto* rec = reg.find(SL_PLUGIN_KVCODEC, name);
    if (!rec) return;
    api = static_cast<const sl_kvcodec_api*>(rec->descriptor->api);
    sl_error err{};
    if (api->create(d, role, "", &codec, &err) != SL_OK) return;
    format.struct_size = sizeof(format);
    api->get_format(codec, &format);
  }
  ~Host() {
    if (codec) api->destroy(codec);
  }
  std::vector<std::byte> encode(const std::vector<float>& x, uint32_t rows) const {
    std::vector<std::byte> out(static_cast<std::size_t>(rows) * format.row_bytes);
    sl_error err{};
    api->encode(codec, x.data(), rows, out.data(), &err);
    return out;
  }
};

class OpenCl {
 public:
  OpenCl() {
    cl_uint n = 0;
    if (clGetPlatformIDs(0, nullptr, &n) != CL_SUCCESS || n == 0) return;
    std::vector<cl_platform_id> platforms(n);
    clGetPlatformIDs(n, platforms.data(), nullptr);
    for (auto p : platforms)
      if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &device_, nullptr) == CL_SUCCESS) break;
    if (!device_) return;
    cl_int e;
    ctx_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &e);
    queue_ = clCreateCommandQueue(ctx_, device_, 0, &e);
  }
  ~OpenCl() {
    if (program_) clReleaseProgram(program_);
    if (queue_) clReleaseCommandQueue(queue_);
    if (ctx_) clReleaseContext(ctx_);
  }
  bool ok() const { return queue_ != nullptr; }
  std::string build(const std::string& source) {
    const char* text = source.c_str();
    cl_int e;
    program_ = clCreateProgramWithSource(ctx_, 1, &text, nullptr, &e);
    if (clBuildProgram(program_, 1, &device_, "", nullptr, nullptr) == CL_SUCCESS) return "";
    std::size_t size = 0;
    clGetProgramBuildInfo(program_, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::string log(size, '\0');
    clGetProgramBuildInfo(program_, device_, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    return log.empty() ? "build failed" : log;
  }
  cl_mem buffer(const void* data, std::size_t bytes) {
    cl_int e;
    return clCreateBuffer(ctx_, CL_MEM_READ_WRITE | (data ? CL_MEM_COPY_HOST_PTR : 0), bytes, const_cast<void*>(data), &e);
  }
  cl_kernel kernel(const char* name) {
    cl_int e;
    return clCreateKernel(program_, name, &e);
  }
  void run(cl_kernel k, std::size_t global, std::size_t local) {
    ASSERT_EQ(clEnqueueNDRangeKernel(queue_, k, 1, nullptr, &global, local ? &local : nullptr, 0, nullptr, nullptr), CL_SUCCESS);
    clFinish(queue_);
  }
  std::vector<float> read(cl_mem m, std::size_t n) {
    std::vector<float> out(n);
    clEnqueueReadBuffer(queue_, m, CL_TRUE, 0, n * 4, out.data(), 0, nullptr, nullptr);
    return out;
  }

 private:
  cl_device_id device_ = nullptr;
  cl_context ctx_ = nullptr;
  cl_command_queue queue_ = nullptr;
  cl_program program_ = nullptr;
};

std::vector<float> gaussian(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

struct Pair {
  const char* k;
  const char* v;
  uint32_t head_dim;
};

class KvCodecOpenClSource : public ::testing::TestWithParam<Pair> {};

TEST_P(KvCodecOpenClSource, DeviceFunctionsMatchTheHostCodec) {
  PluginRegistry reg;
  reg.scan(test::binary_path("lib"));
  const auto [kname, vname, d] = GetParam();
  Host k(reg, kname, d, SL_KV_KEYS), v(reg, vname, d, SL_KV_VALUES), q8k(reg, "q8", d, SL_KV_KEYS), q8v(reg, "q8", d, SL_KV_VALUES);
  ASSERT_TRUE(k.codec && v.codec && q8k.codec && q8v.codec);
  OpenCl cl;
  if (!cl.ok()) GTEST_SKIP() << "no OpenCL device";
  const std::string source = std::string("#define HEAD_DIM ") + std::to_string(d) + "u\n" + k.api->opencl_source(k.codec) +
                             v.api->opencl_source(v.codec) + q8k.api->opencl_source(q8k.codec) +
                             q8v.api->opencl_source(q8v.codec) + kCheckKernels;
  const std::string log = cl.build(source);
  ASSERT_EQ(log, "") << log;

  const uint32_t rows = 9;
  const auto x = gaussian(static_cast<std::size_t>(rows) * d, d), q = gaussian(d, d + 1);
  const auto krows = k.encode(x, rows), vrows = v.encode(x, rows);
  cl_mem kb = cl.buffer(krows.data(), krows.size()), vb = cl.buffer(vrows.data(), vrows.size());
  cl_mem qb = cl.buffer(q.data(), q.size() * 4), sb = cl.buffer(nullptr, rows * 4), db = cl.buffer(nullptr, rows * d * 4);
  cl_kernel kern = cl.kernel("tq_check");
  const cl_uint kbytes = k.format.row_bytes, vbytes = v.format.row_bytes, n = rows;
  clSetKernelArg(kern, 0, sizeof(cl_mem), &kb);
  clSetKernelArg(kern, 1, sizeof(cl_uint), &kbytes);
  clSetKernelArg(kern, 2, sizeof(cl_mem), &vb);
  clSetKernelArg(kern, 3, sizeof(cl_uint), &vbytes);
  clSetKernelArg(kern, 4, sizeof(cl_mem), &qb);
  clSetKernelArg(kern, 5, sizeof(cl_uint), &n);
  clSetKernelArg(kern, 6, sizeof(cl_mem), &sb);
  clSetKernelArg(kern, 7, sizeof(cl_mem), &db);
  clSetKernelArg(kern, 8, (16 + 1) * d * 4, nullptr);
  cl.run(kern, 128, 128);
  const auto scores = cl.read(sb, rows), decoded = cl.read(db, static_cast<std::size_t>(rows) * d);

  std::vector<std::byte> state(k.api->query_state_bytes(k.codec));
  k.api->prepare_query(k.codec, q.data(), state.data());
  std::vector<float> host_scores(rows), host_decoded(static_cast<std::size_t>(rows) * d);
  k.api->score_keys(k.codec, state.data(), krows.data(), kbytes, rows, host_scores.data());
  sl_error err{};
  v.api->decode(v.codec, vrows.data(), rows, host_decoded.data(), &err);
  for (uint32_t r = 0; r < rows; ++r) EXPECT_NEAR(scores[r], host_scores[r], 1e-4 * (1 + std::fabs(host_scores[r]))) << r;
  for (std::size_t i = 0; i < host_decoded.size(); ++i) EXPECT_NEAR(decoded[i], host_decoded[i], 1e-5) << i;

  const auto q8rows = q8k.encode(x, rows);
  cl_mem q8b = cl.buffer(q8rows.data(), q8rows.size()), ob = cl.buffer(nullptr, rows * d * 4);
  cl_kernel q8 = cl.kernel("q8_check");
  const cl_uint q8bytes = q8k.format.row_bytes;
  clSetKernelArg(q8, 0, sizeof(cl_mem), &q8b);
  clSetKernelArg(q8, 1, sizeof(cl_uint), &q8bytes);
  clSetKernelArg(q8, 2, sizeof(cl_uint), &n);
  clSetKernelArg(q8, 3, sizeof(cl_mem), &ob);
  cl.run(q8, rows * d, 0);
  const auto q8out = cl.read(ob, static_cast<std::size_t>(rows) * d);
  std::vector<float> q8host(static_cast<std::size_t>(rows) * d);
  q8k.api->decode(q8k.codec, q8rows.data(), rows, q8host.data(), &err);
  for (std::size_t i = 0; i < q8host.size(); ++i) EXPECT_EQ(q8out[i], q8host[i]) << i;

  for (cl_mem m : {kb, vb, qb, sb, db, q8b, ob}) clReleaseMemObject(m);
  clReleaseKernel(kern);
  clReleaseKernel(q8);
}

INSTANTIATE_TEST_SUITE_P(All, KvCodecOpenClSource,
                         ::testing::Values(Pair{"turbo4", "turbo3", 64}, Pair{"turbo3", "turbo2", 80},
                                           Pair{"turbo4", "turbo4", 96}, Pair{"turbo2", "turbo4", 128},
                                           Pair{"turbo3", "turbo3", 256}),
                         [](const auto& info) {
                           return std::string(info.param.k) + "_" + info.param.v + "_" + std::to_string(info.param.head_dim);
                         });

}  // namespace
}  // namespace sluice
