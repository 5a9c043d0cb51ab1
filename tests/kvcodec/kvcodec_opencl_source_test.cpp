// The OpenCL C that the q8/q4/turbo codecs hand to device backends, built the way the OpenCL
// backend builds it (SL_KV_FN = sl_k_ / sl_v_ before the K and V sources; docs/PLUGINS.md): the
// contract functions give the host codec's numbers — encode_row writes the rows encode() writes,
// load(row, i) equals decode() — and so do the turbo codecs' fused functions (docs/PLUGINS-kvcodec.md):
// scores from score_local after rotate_local, rows rebuilt with value + unrotate_local. Skipped where
// no OpenCL device exists.
#include <CL/cl.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "plugin/builtin_codecs.h"
#include "codec_spec.h"
#include "plugin/plugin_registry.h"
#include "reference.h"

namespace sluice {
namespace {

const char* kContractKernels = R"CL(
__kernel void encode_rows(__global const float* x, uint n_rows, __global uchar* krows, uint k_row_bytes,
                          __global uchar* vrows, uint v_row_bytes) {
  const uint r = get_global_id(0);
  if (r >= n_rows) return;
  sl_k_encode_row(x + r * HEAD_DIM, krows + r * k_row_bytes, HEAD_DIM);
  sl_v_encode_row(x + r * HEAD_DIM, vrows + r * v_row_bytes, HEAD_DIM);
}
__kernel void load_rows(__global const uchar* krows, uint k_row_bytes, __global const uchar* vrows, uint v_row_bytes,
                        uint n_rows, __global float* kout, __global float* vout) {
  const uint i = get_global_id(0);
  if (i >= n_rows * HEAD_DIM) return;
  kout[i] = sl_k_load(krows + (i / HEAD_DIM) * k_row_bytes, i % HEAD_DIM);
  vout[i] = sl_v_load(vrows + (i / HEAD_DIM) * v_row_bytes, i % HEAD_DIM);
}
)CL";

const char* kFusedKernels = R"CL(
/* encode_row_group: one work-group of 64 per row. */
__kernel void encode_rows_group(__global const float* x, __global uchar* krows, uint k_row_bytes, __global uchar* vrows,
                                uint v_row_bytes) {
  __local float scratch[32 * HEAD_DIM + 128];
  const uint r = get_group_id(0), lid = get_local_id(0);
  sl_k_encode_row_group(x + r * HEAD_DIM, krows + r * k_row_bytes, HEAD_DIM, lid, 64, scratch);
  sl_v_encode_row_group(x + r * HEAD_DIM, vrows + r * v_row_bytes, HEAD_DIM, lid, 64, scratch);
}
/* buf: n_rot slots of HEAD_DIM (the rotated query), then the V codec's n_rot slots (a row split by
 * rotation, rotated back and summed by fused_finish). */
__kernel void tq_check(__global const uchar* krows, uint k_row_bytes, __global const uchar* vrows, uint v_row_bytes,
                       __global const float* q, uint n_rows, __global float* scores, __global float* decoded,
                       __local float* buf) {
  const uint lid = get_local_id(0), lsize = get_local_size(0), d = HEAD_DIM;
  for (uint r = 0; r < sl_k_tq_n_rot; ++r) {
    for (uint i = lid; i < d; i += lsize) buf[r * d + i] = q[i];
    sl_k_tq_rotate_local(buf + r * d, r, lid, lsize);
  }
  for (uint r = lid; r < n_rows; r += lsize) scores[r] = sl_k_tq_score_local(krows + r * k_row_bytes, buf);
  __local float* slots = buf + sl_k_tq_n_rot * d;
  for (uint row = 0; row < n_rows; ++row) {
    __global const uchar* v = vrows + row * v_row_bytes;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint i = lid; i < sl_v_tq_n_rot * d; i += lsize) {
      const uint r = i / d, c = i % d;
      slots[i] = sl_v_tq_rotation_of(v, sl_v_tq_block_of(c)) == r ? sl_v_tq_value(v, c) : 0.0f;
    }
    sl_v_fused_finish(slots, lid, lsize);
    for (uint i = lid; i < d; i += lsize) decoded[row * d + i] = slots[i];
  }
}
)CL";

struct Host {
  const sl_kvcodec_api* api = nullptr;
  sl_kvcodec* codec = nullptr;
  sl_kv_format format{};
  // spec: "name" or "name:options" (as --kv-codec).
  Host(const PluginRegistry& reg, const std::string& spec, uint32_t d, sl_kv_role role) {
    const auto [name, options] = test::split_codec_spec(spec);
    if (name == "f16") {
      api = builtin_f16_codec();
    } else {
      const auto* rec = reg.find(SL_PLUGIN_KVCODEC, name);
      if (!rec) return;
      api = static_cast<const sl_kvcodec_api*>(rec->descriptor->api);
    }
    sl_error err{};
    if (api->create(d, role, options.c_str(), &codec, &err) != SL_OK) return;
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
  void read_bytes(cl_mem m, void* out, std::size_t bytes) {
    clEnqueueReadBuffer(queue_, m, CL_TRUE, 0, bytes, out, 0, nullptr, nullptr);
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

void set_args(cl_kernel k, std::initializer_list<std::pair<std::size_t, const void*>> args) {
  cl_uint i = 0;
  for (const auto& [size, value] : args) ASSERT_EQ(clSetKernelArg(k, i++, size, value), CL_SUCCESS) << "argument " << i - 1;
}

TEST_P(KvCodecOpenClSource, DeviceFunctionsMatchTheHostCodec) {
  PluginRegistry reg;
  reg.scan(test::binary_path("lib"));
  const auto [kname, vname, d] = GetParam();
  Host k(reg, kname, d, SL_KV_KEYS), v(reg, vname, d, SL_KV_VALUES);
  ASSERT_TRUE(k.codec && v.codec);
  OpenCl cl;
  if (!cl.ok()) GTEST_SKIP() << "no OpenCL device";
  const bool fused = std::string(kname).rfind("turbo", 0) == 0 && std::string(vname).rfind("turbo", 0) == 0;
  const std::string source = std::string("#define HEAD_DIM ") + std::to_string(d) + "u\n#define SL_KV_FN(name) sl_k_##name\n" +
                             k.api->opencl_source(k.codec) + "\n#undef SL_KV_FN\n#define SL_KV_FN(name) sl_v_##name\n" +
                             v.api->opencl_source(v.codec) + "\n#undef SL_KV_FN\n" + kContractKernels +
                             (fused ? kFusedKernels : "");
  const std::string log = cl.build(source);
  ASSERT_EQ(log, "") << log;

  const uint32_t rows = 9;
  const auto x = gaussian(static_cast<std::size_t>(rows) * d, d), q = gaussian(d, d + 1);
  const auto krows = k.encode(x, rows), vrows = v.encode(x, rows);
  const cl_uint kbytes = k.format.row_bytes, vbytes = v.format.row_bytes, n = rows;
  sl_error err{};
  std::vector<float> k_host(static_cast<std::size_t>(rows) * d), v_host(k_host.size());
  k.api->decode(k.codec, krows.data(), rows, k_host.data(), &err);
  v.api->decode(v.codec, vrows.data(), rows, v_host.data(), &err);

  // encode_row: the device writes the host's rows (turbo: a boundary case may round the other way,
  // so compare what the rows decode to).
  cl_mem xb = cl.buffer(x.data(), x.size() * 4), kdev = cl.buffer(nullptr, krows.size()), vdev = cl.buffer(nullptr, vrows.size());
  cl_kernel enc = cl.kernel("encode_rows");
  set_args(enc, {{sizeof(cl_mem), &xb}, {sizeof(cl_uint), &n}, {sizeof(cl_mem), &kdev}, {sizeof(cl_uint), &kbytes},
                 {sizeof(cl_mem), &vdev}, {sizeof(cl_uint), &vbytes}});
  cl.run(enc, rows, 0);
  std::vector<std::byte> kdev_rows(krows.size()), vdev_rows(vrows.size());
  cl.read_bytes(kdev, kdev_rows.data(), kdev_rows.size());
  cl.read_bytes(vdev, vdev_rows.data(), vdev_rows.size());
  std::vector<float> k_dev_decoded(k_host.size()), v_dev_decoded(v_host.size());
  k.api->decode(k.codec, kdev_rows.data(), rows, k_dev_decoded.data(), &err);
  v.api->decode(v.codec, vdev_rows.data(), rows, v_dev_decoded.data(), &err);
  int same_rows = 0;
  for (uint32_t r = 0; r < rows; ++r)
    same_rows += std::memcmp(kdev_rows.data() + r * kbytes, krows.data() + r * kbytes, kbytes) == 0;
  EXPECT_GE(same_rows, static_cast<int>(rows) - 1) << kname << ": device rows differ from the host's";
  for (std::size_t i = 0; i < k_host.size(); ++i) EXPECT_NEAR(k_dev_decoded[i], k_host[i], 0.05 * (1 + std::fabs(x[i]))) << i;
  for (std::size_t i = 0; i < v_host.size(); ++i) EXPECT_NEAR(v_dev_decoded[i], v_host[i], 0.05 * (1 + std::fabs(x[i]))) << i;

  // load: element i of a host-written row equals decode().
  cl_mem kb = cl.buffer(krows.data(), krows.size()), vb = cl.buffer(vrows.data(), vrows.size());
  cl_mem ko = cl.buffer(nullptr, k_host.size() * 4), vo = cl.buffer(nullptr, v_host.size() * 4);
  cl_kernel load = cl.kernel("load_rows");
  set_args(load, {{sizeof(cl_mem), &kb}, {sizeof(cl_uint), &kbytes}, {sizeof(cl_mem), &vb}, {sizeof(cl_uint), &vbytes},
                  {sizeof(cl_uint), &n}, {sizeof(cl_mem), &ko}, {sizeof(cl_mem), &vo}});
  cl.run(load, rows * d, 0);
  const auto k_loaded = cl.read(ko, k_host.size()), v_loaded = cl.read(vo, v_host.size());
  for (std::size_t i = 0; i < k_host.size(); ++i) EXPECT_NEAR(k_loaded[i], k_host[i], 1e-5 * (1 + std::fabs(k_host[i]))) << i;
  for (std::size_t i = 0; i < v_host.size(); ++i) EXPECT_NEAR(v_loaded[i], v_host[i], 1e-5 * (1 + std::fabs(v_host[i]))) << i;

  if (fused) {
    // encode_row_group: a work-group writes the very bytes one work-item's encode_row writes.
    cl_mem kg = cl.buffer(nullptr, krows.size()), vg = cl.buffer(nullptr, vrows.size());
    cl_kernel grp = cl.kernel("encode_rows_group");
    set_args(grp, {{sizeof(cl_mem), &xb}, {sizeof(cl_mem), &kg}, {sizeof(cl_uint), &kbytes}, {sizeof(cl_mem), &vg},
                   {sizeof(cl_uint), &vbytes}});
    cl.run(grp, rows * 64, 64);
    std::vector<std::byte> kg_rows(krows.size()), vg_rows(vrows.size());
    cl.read_bytes(kg, kg_rows.data(), kg_rows.size());
    cl.read_bytes(vg, vg_rows.data(), vg_rows.size());
    EXPECT_EQ(std::memcmp(kg_rows.data(), kdev_rows.data(), kg_rows.size()), 0) << kname << ": group encode differs";
    EXPECT_EQ(std::memcmp(vg_rows.data(), vdev_rows.data(), vg_rows.size()), 0) << vname << ": group encode differs";
    for (cl_mem m : {kg, vg}) clReleaseMemObject(m);
    clReleaseKernel(grp);

    cl_mem qb = cl.buffer(q.data(), q.size() * 4), sb = cl.buffer(nullptr, rows * 4), db = cl.buffer(nullptr, rows * d * 4);
    cl_kernel kern = cl.kernel("tq_check");
    set_args(kern, {{sizeof(cl_mem), &kb}, {sizeof(cl_uint), &kbytes}, {sizeof(cl_mem), &vb}, {sizeof(cl_uint), &vbytes},
                    {sizeof(cl_mem), &qb}, {sizeof(cl_uint), &n}, {sizeof(cl_mem), &sb}, {sizeof(cl_mem), &db},
                    {(16 + 16) * d * 4, nullptr}});
    cl.run(kern, 128, 128);
    const auto scores = cl.read(sb, rows), decoded = cl.read(db, static_cast<std::size_t>(rows) * d);
    std::vector<std::byte> state(k.api->query_state_bytes(k.codec));
    k.api->prepare_query(k.codec, q.data(), state.data());
    std::vector<float> host_scores(rows);
    k.api->score_keys(k.codec, state.data(), krows.data(), kbytes, rows, host_scores.data());
    for (uint32_t r = 0; r < rows; ++r) EXPECT_NEAR(scores[r], host_scores[r], 1e-4 * (1 + std::fabs(host_scores[r]))) << r;
    for (std::size_t i = 0; i < v_host.size(); ++i) EXPECT_NEAR(decoded[i], v_host[i], 1e-5) << i;
    for (cl_mem m : {qb, sb, db}) clReleaseMemObject(m);
    clReleaseKernel(kern);
  }
  for (cl_mem m : {xb, kdev, vdev, kb, vb, ko, vo}) clReleaseMemObject(m);
  clReleaseKernel(enc);
  clReleaseKernel(load);
}

INSTANTIATE_TEST_SUITE_P(All, KvCodecOpenClSource,
                         ::testing::Values(Pair{"turbo4", "turbo3", 64}, Pair{"turbo3", "turbo2:rot=2", 80},
                                           Pair{"turbo4", "turbo4:rot=4", 96}, Pair{"turbo3:rot=1", "turbo3:rot=16", 128}, Pair{"turbo2", "turbo4", 128},
                                           Pair{"turbo3", "turbo3", 256}, Pair{"q8", "q4", 64}, Pair{"q4", "q8", 128},
                                           Pair{"q8", "q8", 80}, Pair{"turbo4", "f16", 64}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.k) + "_" + info.param.v + "_" + std::to_string(info.param.head_dim);
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace sluice
