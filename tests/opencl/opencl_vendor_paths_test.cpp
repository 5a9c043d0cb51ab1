// Vendor fast paths (inline PTX on NVIDIA: warp-shuffle reductions in the matvec kernels, the
// tensor-core prefill GEMM) against the portable kernels they replace or a float64 reference. Runs where the device has a fast path (the GPU
// machine); elsewhere it skips with a message — the portable kernels are checked by the other tests.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "f16_kv_layout.h"
#include "plugin/op_calls.h"
#include "plugin/plugin_registry.h"
#include "reference.h"
#include "test_backend_options.h"

namespace sluice {
namespace {

// An opened backend and its ops (plugin/op_calls.h). The tests that follow a decode step's calls
// record them (begin_one_token) and run them as one graph before anything is read back, so the
// backend's fusion pass sees the step's nodes together, as in a forward pass.
struct Opened {
  const sl_backend_api* api = nullptr;
  sl_backend* be = nullptr;
  std::unique_ptr<OpCalls> ops;
  ~Opened() {
    ops.reset();
    if (be) api->destroy(be);
  }
};

bool open(const sl_backend_api* api, const char* options, Opened& out, std::string& why) {
  const std::string all = test::with_test_options(options);  // e.g. tune.mma_bk=32 (perf/)
  sl_backend_config cfg{};
  cfg.struct_size = sizeof(cfg);
  cfg.device = "";
  cfg.options = all.c_str();
  sl_error err{};
  out.api = api;
  if (api->create(&cfg, &out.be, &err) != SL_OK) {
    why = err.message;
    return false;
  }
  out.ops = std::make_unique<OpCalls>(api, out.be);
  return true;
}

// The OpenCL plugin's API from the build's plugin folder, or null when it was not built.
const sl_backend_api* opencl_api(PluginRegistry& registry) {
  registry.scan(test::binary_path("lib"));
  const PluginRecord* rec = registry.find(SL_PLUGIN_BACKEND, "opencl");
  return rec ? static_cast<const sl_backend_api*>(rec->descriptor->api) : nullptr;
}

// The device description of an open backend.
sl_status device_info(const Opened& o, sl_device_info& info) {
  info = sl_device_info{};
  info.struct_size = sizeof(info);
  sl_error err{};
  return o.api->get_device_info(o.be, &info, &err);
}

// Whether one-row 4-bit products take the dp4a kernel on o's device: NVIDIA, unless tune.dp4a=0.
bool dp4a_runs(const Opened& o) {
  sl_device_info info{};
  EXPECT_EQ(device_info(o, info), SL_OK);
  return std::string(info.vendor).find("NVIDIA") != std::string::npos && test::test_tuning("dp4a") != "0";
}

// A device buffer holding a copy of `bytes` bytes at data.
sl_buffer* device_copy(const Opened& o, const void* data, std::size_t bytes) {
  sl_buffer* b = nullptr;
  sl_error err{};
  EXPECT_EQ(o.api->alloc(o.be, bytes, &b, &err), SL_OK) << err.message;
  EXPECT_EQ(o.api->upload(o.be, b, 0, data, bytes, &err), SL_OK) << err.message;
  return b;
}

// Runs out = x · Wᵀ for a 4-bit weight and a bf16 weight on one backend.
std::vector<float> products(const Opened& o, const std::vector<uint32_t>& words, const std::vector<uint16_t>& scales,
                            const std::vector<uint16_t>& bf16, const std::vector<float>& x, uint32_t rows, uint32_t cols,
                            uint32_t n_rows) {
  auto buffer = [&](const void* data, std::size_t bytes) { return device_copy(o, data, bytes); };
  sl_buffer* dw = buffer(words.data(), words.size() * 4);
  sl_buffer* ds = buffer(scales.data(), scales.size() * 2);
  sl_buffer* dh = buffer(bf16.data(), bf16.size() * 2);
  sl_buffer* dx = buffer(x.data(), x.size() * 4);
  std::vector<float> zero(std::size_t(n_rows) * rows, 0.0f);
  sl_buffer* dout = buffer(zero.data(), zero.size() * 4);
  sl_weight q{};
  q.struct_size = sizeof(q);
  q.data = dw;
  q.dtype = SL_DTYPE_U32;
  q.rows = rows;
  q.cols = cols;
  q.bits = 4;
  q.group_size = 64;
  q.scale_dtype = SL_DTYPE_BF16;
  q.scales = ds;
  q.biases = ds;
  sl_weight h{};
  h.struct_size = sizeof(h);
  h.data = dh;
  h.dtype = SL_DTYPE_BF16;
  h.rows = rows;
  h.cols = cols;
  std::vector<float> out(2 * zero.size());
  sl_error err{};
  EXPECT_EQ(o.ops->matmul(dx, n_rows, &q, nullptr, dout, &err), SL_OK) << err.message;
  EXPECT_EQ(o.api->download(o.be, dout, 0, out.data(), zero.size() * 4, &err), SL_OK);
  EXPECT_EQ(o.ops->matmul(dx, n_rows, &h, nullptr, dout, &err), SL_OK) << err.message;
  EXPECT_EQ(o.api->download(o.be, dout, 0, out.data() + zero.size(), zero.size() * 4, &err), SL_OK);
  for (sl_buffer* b : {dw, ds, dh, dx, dout}) o.api->free(o.be, b);
  return out;
}

// Every test here: the OpenCL plugin from the build tree and a backend on its best device, opened
// with no options (skipped with the reason where there is none), and whether the dp4a fast paths
// run there (NVIDIA).
class OpenclVendorPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    api = opencl_api(registry);
    if (!api) GTEST_SKIP() << "OpenCL backend unavailable";
    if (!open(api, "", probe, why)) GTEST_SKIP() << why;
    dp4a = dp4a_runs(probe);
  }
  PluginRegistry registry;  // first: the plugin stays mapped until the backends are gone
  const sl_backend_api* api = nullptr;
  Opened probe;
  std::string why;
  bool dp4a = false;
};

TEST_F(OpenclVendorPaths, FastPathMatvecAgreesWithThePortableKernels) {
  Opened& fast = probe;
  Opened portable;
  sl_device_info info{};
  ASSERT_EQ(device_info(fast, info), SL_OK);
  if (std::string(info.vendor).find("NVIDIA") == std::string::npos)
    GTEST_SKIP() << "no vendor fast path on " << info.name << " (" << info.vendor << "): portable kernels only";
  ASSERT_TRUE(open(api, "portable", portable, why)) << why;

  // 8200 × 4096: past the size where one-row 4-bit products take the dp4a kernel (2^25 weights), and
  // not a multiple of any row tile.
  const uint32_t rows = 8200, cols = 4096;
  std::mt19937 rng(7);
  std::vector<uint32_t> words(std::size_t(rows) * cols / 8);
  for (auto& w : words) w = rng();
  std::vector<uint16_t> scales(std::size_t(rows) * cols / 64, 0x3c00), bf16(std::size_t(rows) * cols);
  for (auto& s : scales) s = static_cast<uint16_t>(0x3b00 + rng() % 256);  // bf16 around 0.002..0.008
  for (auto& h : bf16) h = static_cast<uint16_t>(0x3e00 + rng() % 512) | (rng() % 2 ? 0x8000 : 0);
  for (uint32_t n_rows : {1u, 4u}) {
    std::normal_distribution<float> d(0, 1);
    std::vector<float> x(std::size_t(n_rows) * cols);
    for (auto& v : x) v = d(rng);
    const auto a = products(fast, words, scales, bf16, x, rows, cols, n_rows);
    const auto b = products(portable, words, scales, bf16, x, rows, cols, n_rows);
    // One activation row against the 4-bit weight takes the dp4a kernel, which rounds the activation
    // to 15-bit integers per block of 32 columns (step = max|x| / 16383 of the block): each product
    // may move by |w| · step / 2, so the bound adds Σ |w_c| · step(c) / 2 over the row.
    std::vector<double> int_bound(rows, 0.0);
    if (n_rows == 1) {
      std::vector<float> step(cols / 32);
      for (uint32_t blk = 0; blk < cols / 32; ++blk) {
        float m = 0.0f;
        for (uint32_t c = 0; c < 32; ++c) m = std::max(m, std::abs(x[blk * 32 + c]));
        step[blk] = m / 16383.0f;
      }
      for (uint32_t r = 0; r < rows; ++r)
        for (uint32_t c = 0; c < cols; ++c) {
          const uint32_t code = (words[(std::size_t(r) * cols + c) / 8] >> (4 * (c % 8))) & 15u;
          const uint32_t bits = uint32_t(scales[std::size_t(r) * (cols / 64) + c / 64]) << 16;
          float sc;
          std::memcpy(&sc, &bits, 4);
          int_bound[r] += std::abs(double(sc) * code + sc) * step[c / 32] / 2;  // biases = scales here
        }
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double bound = 1e-4 * (std::abs(b[i]) + 1.0) + (i < rows ? int_bound[i] : 0.0);
      ASSERT_NEAR(a[i], b[i], bound) << "value " << i;
    }
  }

  // The dp4a kernel is what ran for the one-row 4-bit product (unless tune.dp4a=0): the profile of
  // a fresh fast backend names it.
  if (test::test_tuning("dp4a") != "0") {
    ::testing::internal::CaptureStderr();
    setenv("SLUICE_OPENCL_PROFILE", "1", 1);
    {
      Opened profiled;
      ASSERT_TRUE(open(api, "", profiled, why)) << why;
      std::vector<float> x(cols, 0.5f);
      products(profiled, words, scales, bf16, x, rows, cols, 1);
    }
    unsetenv("SLUICE_OPENCL_PROFILE");
    const std::string profile = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(profile.find("matvec_q4_dp4a"), std::string::npos) << profile;
  }
}

// A random affine-quantized weight (the MLX layout: codes packed low bits first into uint32 words,
// one scale and one bias per group) with its float values, for the GEMM test below.
struct QuantWeight {
  uint32_t rows, cols, bits, group;
  sl_dtype scale_dtype;
  std::vector<uint32_t> words;
  std::vector<uint8_t> scales, biases;  // scale_dtype elements
  std::vector<float> values;            // rows × cols, as the backend dequantizes them
};

float to_scale_form(float v, sl_dtype dtype, std::vector<uint8_t>& out) {
  if (dtype == SL_DTYPE_F32) {
    out.insert(out.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4);
    return v;
  }
  uint16_t h;
  float back;
  if (dtype == SL_DTYPE_BF16) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    h = static_cast<uint16_t>(u >> 16);
    u = uint32_t(h) << 16;
    std::memcpy(&back, &u, 4);
  } else {  // f16 of a normal value in [2⁻¹⁴, 65504), truncated: exact either way
    int e;
    const float m = std::frexp(std::abs(v), &e);  // |v| = m · 2^e, m in [0.5, 1)
    const uint32_t mant = static_cast<uint32_t>(std::ldexp(m, 11)) & 0x3ffu;
    h = static_cast<uint16_t>((v < 0 ? 0x8000u : 0u) | uint32_t(e - 1 + 15) << 10 | mant);
    back = std::copysign(std::ldexp(1.0f + mant / 1024.0f, e - 1), v);
  }
  out.push_back(static_cast<uint8_t>(h & 0xff));
  out.push_back(static_cast<uint8_t>(h >> 8));
  return back;
}

QuantWeight random_quant(uint32_t rows, uint32_t cols, uint32_t bits, uint32_t group, sl_dtype scale_dtype, std::mt19937& rng) {
  QuantWeight w{rows, cols, bits, group, scale_dtype, {}, {}, {}, {}};
  w.words.resize(std::size_t(rows) * cols * bits / 32);
  for (auto& v : w.words) v = rng();
  const uint32_t levels = (1u << bits) - 1, groups = cols / group;
  std::vector<float> scale(std::size_t(rows) * groups), bias(scale.size());
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (std::size_t i = 0; i < scale.size(); ++i) {
    // Weights spread over about ±0.05 around a per-group offset, as in a trained 4-bit matrix.
    scale[i] = to_scale_form(0.1f / levels * u(rng), scale_dtype, w.scales);
    bias[i] = to_scale_form(-0.05f * u(rng), scale_dtype, w.biases);
  }
  w.values.resize(std::size_t(rows) * cols);
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t c = 0; c < cols; ++c) {
      const uint64_t bit = (uint64_t(r) * cols + c) * bits;
      const uint32_t q = (w.words[bit / 32] >> (bit % 32)) & levels;
      const std::size_t g = std::size_t(r) * groups + c / group;
      w.values[std::size_t(r) * cols + c] = std::fma(scale[g], float(q), bias[g]);  // as the kernels do
    }
  return w;
}

// The sl_weight describing w's shape and form; buffers and offsets are the caller's to set.
sl_weight describe(const QuantWeight& w) {
  sl_weight q{};
  q.struct_size = sizeof(q);
  q.dtype = SL_DTYPE_U32;
  q.rows = w.rows;
  q.cols = w.cols;
  q.bits = w.bits;
  q.group_size = w.group;
  q.scale_dtype = w.scale_dtype;
  return q;
}

// out = x · Wᵀ on one backend (m activation rows).
std::vector<float> quant_gemm(const Opened& o, const QuantWeight& w, const std::vector<float>& x, uint32_t m) {
  auto buffer = [&](const void* data, std::size_t bytes) { return device_copy(o, data, bytes); };
  sl_buffer* dw = buffer(w.words.data(), w.words.size() * 4);
  sl_buffer* ds = buffer(w.scales.data(), w.scales.size());
  sl_buffer* db = buffer(w.biases.data(), w.biases.size());
  sl_buffer* dx = buffer(x.data(), x.size() * 4);
  std::vector<float> out(std::size_t(m) * w.rows, 0.0f);
  sl_buffer* dout = buffer(out.data(), out.size() * 4);
  sl_weight q = describe(w);
  q.data = dw;
  q.scales = ds;
  q.biases = db;
  sl_error err{};
  EXPECT_EQ(o.ops->matmul(dx, m, &q, nullptr, dout, &err), SL_OK) << err.message;
  EXPECT_EQ(o.api->download(o.be, dout, 0, out.data(), out.size() * 4, &err), SL_OK);
  for (sl_buffer* b : {dw, ds, db, dx, dout}) o.api->free(o.be, b);
  return out;
}

// Batched decode products (matvec_q4_batch, kernels_cl/matvec_batch.cl) on any device, PoCL included:
// every chunk size and team shape the tuning accepts, batches that fill chunks, leave them partial or
// span several, and a weight whose rows are no multiple of a team's — against float64 sums of the
// dequantized weights (float32 sums here: the bound is a few float32 roundings of Σ |terms|).
TEST_F(OpenclVendorPaths, BatchedFourBitProductsMatchAFloat64ReferenceForEveryChunkShape) {
  std::mt19937 rng(11);
  // 512 columns: 64 words, two whole passes of a team's 32 lanes; 288 columns in groups of 32: 36
  // words, the second pass only partly filled.
  const QuantWeight wide = random_quant(301, 512, 4, 64, SL_DTYPE_BF16, rng), ragged = random_quant(37, 288, 4, 32, SL_DTYPE_F32, rng);
  std::normal_distribution<float> d(0, 1);
  // Every batch size here takes the batch kernel, whatever the device's limit (8 rows on Hopper: past
  // it the tensor-core GEMM, whose f16 rounding is checked by its own test).
  // (The tensor-core form, where it runs, has its own test below: tune.q4_batch_mma=0 here.)
  for (const char* tuning : {"tune.q4_batch_mma=0 tune.q4_batch_max_rows=64",
                             "tune.q4_batch_mma=0 tune.q4_batch_max_rows=64 tune.q4_batch_chunk=2 tune.q4_batch_team_rows=1",
                             "tune.q4_batch_mma=0 tune.q4_batch_max_rows=64 tune.q4_batch_chunk=4 tune.q4_batch_team_rows=4",
                             "tune.q4_batch_mma=0 tune.q4_batch_max_rows=64 tune.q4_batch_chunk=16 tune.q4_batch_team_rows=2",
                             "tune.q4_batch_mma=0 tune.q4_batch_max_rows=64 tune.q4_batch_dp4a=0"}) {
    Opened o;
    ASSERT_TRUE(open(api, tuning, o, why)) << why;
    // On NVIDIA the batch kernel reads each activation row's 15-bit form (matvec_q4_batch_dp4a): each
    // product may then move by |w| · step / 2, step = max |x| / 16383 of the row's 32-column block.
    const bool int15 = dp4a_runs(o) && test::test_tuning("q4_batch_dp4a") != "0" &&
                       std::string(tuning).find("q4_batch_dp4a=0") == std::string::npos;
    for (const QuantWeight* wp : {&wide, &ragged})
    for (uint32_t m : {2u, 3u, 8u, 9u, 17u, 64u}) {
      const QuantWeight& w = *wp;
      SCOPED_TRACE(std::string("options '") + tuning + "', rows " + std::to_string(m) + ", cols " + std::to_string(w.cols));
      std::vector<float> x(std::size_t(m) * w.cols);
      for (auto& v : x) v = d(rng);
      const auto got = quant_gemm(o, w, x, m);
      std::vector<double> step(std::size_t(m) * (w.cols / 32), 0.0);  // max |x| / 16383 a row's block
      for (std::size_t i = 0; i < x.size(); ++i) step[i / 32] = std::max(step[i / 32], std::abs(double(x[i])) / 16383.0);
      for (uint32_t t = 0; t < m; ++t)
        for (uint32_t r = 0; r < w.rows; ++r) {
          double ref = 0, mag = 0, rounding = 0;
          for (uint32_t c = 0; c < w.cols; ++c) {
            const double v = w.values[std::size_t(r) * w.cols + c], term = double(x[std::size_t(t) * w.cols + c]) * v;
            ref += term;
            mag += std::abs(term);
            if (int15) rounding += std::abs(v) * step[std::size_t(t) * (w.cols / 32) + c / 32] / 2;
          }
          ASSERT_NEAR(got[std::size_t(t) * w.rows + r], ref, 1e-5 * mag + 1e-6 + rounding) << "row " << t << " out " << r;
        }
    }
  }
  // And the batch kernel is what ran: a profiled backend names it.
  ::testing::internal::CaptureStderr();
  setenv("SLUICE_OPENCL_PROFILE", "1", 1);
  {
    Opened profiled;
    ASSERT_TRUE(open(api, "tune.q4_batch_mma=0", profiled, why)) << why;
    quant_gemm(profiled, wide, std::vector<float>(std::size_t(4) * wide.cols, 0.25f), 4);
  }
  unsetenv("SLUICE_OPENCL_PROFILE");
  const std::string profile = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(profile.find("matvec_q4_batch"), std::string::npos) << profile;
  if (dp4a && test::test_tuning("q4_batch_dp4a") != "0") {
    EXPECT_NE(profile.find("matvec_q4_batch_dp4a"), std::string::npos) << profile;
    EXPECT_NE(profile.find("matvec_x_int15_rows"), std::string::npos) << profile;
  }
}

// A scale or bias of w's (scale_dtype element i) as a float.
double scale_at(const std::vector<uint8_t>& bytes, sl_dtype dtype, std::size_t i) {
  if (dtype == SL_DTYPE_F32) {
    float v;
    std::memcpy(&v, bytes.data() + 4 * i, 4);
    return v;
  }
  const uint32_t h = bytes[2 * i] | uint32_t(bytes[2 * i + 1]) << 8;
  if (dtype == SL_DTYPE_BF16) {
    const uint32_t u = h << 16;
    float v;
    std::memcpy(&v, &u, 4);
    return v;
  }
  const double m = std::ldexp(1.0 + (h & 0x3ff) / 1024.0, int((h >> 10) & 0x1f) - 15);  // normal f16
  return h & 0x8000 ? -m : m;
}

// Why the tensor-core batch products do not run on this device or tuning ("" where they do).
std::string batch_mma_unavailable(const Opened& probe) {
  sl_device_info info{};
  if (device_info(probe, info) != SL_OK) return "the device's info could not be read";
  if (!(info.caps & SL_CAP_MATRIX))
    return std::string("no tensor-core batch products on ") + info.name + " (" + info.vendor +
           "): they need inline PTX mma.sync on an sm_80+ NVIDIA device";
  if (test::test_tuning("q4_batch_mma") == "0") return "tune.q4_batch_mma=0: the tensor-core batch products are off";
  return {};
}

// Batched decode products on tensor cores (matvec_q4_batch_mma, kernels_cl/matvec_batch_mma.cl): every
// shape the tuning accepts (m tiles, warps, steps in flight), 32- and 64-column steps, batches that fill
// n tiles, leave them partial or span several chunks, weight rows no multiple of a tile's, against
// float64 sums within the kernel's own bound — x rounded to f16 (2⁻¹¹ relative) and the float32 sums of
// each step's 1024-offset codes (kernels_cl/matvec_batch_mma.cl's header).
TEST_F(OpenclVendorPaths, BatchedFourBitProductsOnTensorCoresMatchAFloat64ReferenceWithinTheirBound) {
  if (const std::string why = batch_mma_unavailable(probe); !why.empty()) GTEST_SKIP() << why;
  std::mt19937 rng(12);
  const QuantWeight wide = random_quant(301, 512, 4, 64, SL_DTYPE_BF16, rng), ragged = random_quant(37, 288, 4, 32, SL_DTYPE_F32, rng),
                    odd = random_quant(130, 1088, 4, 64, SL_DTYPE_F16, rng), tall = random_quant(1000, 4096, 4, 128, SL_DTYPE_BF16, rng);
  std::normal_distribution<float> d(0, 1);
  for (const char* tuning : {"tune.q4_batch_max_rows=64 tune.q4_batch_mma_min_rows=2", "tune.q4_batch_max_rows=64 tune.q4_batch_mma_min_rows=2 tune.q4_batch_mma_m_tiles=2",
                             "tune.q4_batch_max_rows=64 tune.q4_batch_mma_min_rows=2 tune.q4_batch_mma_warps=2 tune.q4_batch_mma_unroll=1",
                             "tune.q4_batch_max_rows=64 tune.q4_batch_mma_min_rows=2 tune.q4_batch_mma_warps=16 tune.q4_batch_mma_unroll=4",
                             "tune.q4_batch_max_rows=64 tune.q4_batch_mma_min_rows=2 tune.q4_batch_mma_warps=4 tune.q4_batch_mma_m_tiles=2 tune.q4_batch_mma_unroll=4",
                             // m-warps as tuned even where the weight is too small to fill the device with them
                             "tune.q4_batch_max_rows=64 tune.q4_batch_mma_min_rows=2 tune.q4_batch_mma_groups_per_cu=0",
                             "tune.q4_batch_max_rows=64 tune.q4_batch_mma_min_rows=2 tune.q4_batch_mma_groups_per_cu=0 tune.q4_batch_mma_m_warps=8 tune.q4_batch_mma_m_tiles=2",
                             "tune.q4_batch_max_rows=64 tune.q4_batch_mma_min_rows=2 tune.q4_batch_mma_groups_per_cu=0 tune.q4_batch_mma_m_warps=2 tune.q4_batch_mma_warps=16",
                             // a step's MMAs interleaved over the tiles
                             "tune.q4_batch_max_rows=64 tune.q4_batch_mma_min_rows=2 tune.q4_batch_mma_interleave=1",
                             "tune.q4_batch_max_rows=64 tune.q4_batch_mma_min_rows=2 tune.q4_batch_mma_interleave=1 tune.q4_batch_mma_m_tiles=2 tune.q4_batch_mma_unroll=2"}) {
    Opened o;
    ASSERT_TRUE(open(api, tuning, o, why)) << why;
    for (const QuantWeight* wp : {&wide, &ragged, &odd, &tall})
      for (uint32_t m : {2u, 3u, 8u, 9u, 17u, 32u, 33u, 64u}) {
        if (wp == &tall && m != 3 && m != 33) continue;  // a model-sized row (float64 sums are slow)
        const QuantWeight& w = *wp;
        SCOPED_TRACE(std::string("options '") + tuning + "', rows " + std::to_string(m) + ", weight " + std::to_string(w.rows) + " × " +
                     std::to_string(w.cols));
        std::vector<float> x(std::size_t(m) * w.cols);
        for (auto& v : x) v = d(rng);
        const auto got = quant_gemm(o, w, x, m);
        const uint32_t step = w.group % 64 == 0 && w.cols % 64 == 0 ? 64 : 32, groups = w.cols / w.group;
        const double x_rounding = std::ldexp(1.0, -11), step_sums = step * std::ldexp(1.0, -23);
        std::size_t exact_bits = 0;
        for (uint32_t t = 0; t < m; ++t)
          for (uint32_t r = 0; r < w.rows; ++r) {
            double ref = 0, mag = 0, bound = 0;
            for (uint32_t c = 0; c < w.cols; ++c) {
              const double v = w.values[std::size_t(r) * w.cols + c], xv = x[std::size_t(t) * w.cols + c];
              const std::size_t g = std::size_t(r) * groups + c / w.group;
              const double s = std::abs(scale_at(w.scales, w.scale_dtype, g)), b = std::abs(scale_at(w.biases, w.scale_dtype, g));
              ref += xv * v;
              mag += std::abs(xv * v);
              bound += std::abs(xv) * (std::abs(v) * x_rounding + (2080 * s + b) * step_sums);
            }
            const float out = got[std::size_t(t) * w.rows + r];
            ASSERT_NEAR(out, ref, bound + 1e-5 * mag + 1e-6) << "row " << t << " out " << r;
            exact_bits += out == static_cast<float>(ref);
          }
        // f16 activations move almost every sum's last bits: all equal to the float sums would mean a
        // kernel without the rounding ran, and this test checked nothing of the tensor-core one.
        EXPECT_LT(exact_bits, std::size_t(m) * w.rows / 2);
      }
  }
  // And the tensor-core kernel is what ran: a profiled backend names it.
  ::testing::internal::CaptureStderr();
  setenv("SLUICE_OPENCL_PROFILE", "1", 1);
  {
    Opened profiled;
    ASSERT_TRUE(open(api, "tune.q4_batch_mma_min_rows=2", profiled, why)) << why;
    quant_gemm(profiled, wide, std::vector<float>(std::size_t(4) * wide.cols, 0.25f), 4);
  }
  unsetenv("SLUICE_OPENCL_PROFILE");
  const std::string profile = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(profile.find("matvec_q4_batch_mma"), std::string::npos) << profile;
  EXPECT_NE(profile.find("matvec_batch_mma_pack_x"), std::string::npos) << profile;
}

TEST_F(OpenclVendorPaths, TensorCoreGemmMatchesAFloat64ReferenceWithinF16Rounding) {
  Opened& fast = probe;
  Opened portable;
  sl_device_info info{};
  ASSERT_EQ(device_info(fast, info), SL_OK);
  if (!(info.caps & SL_CAP_MATRIX))
    GTEST_SKIP() << "no tensor-core GEMM on " << info.name << " (" << info.vendor
                 << "): it needs inline PTX mma.sync on an sm_80+ NVIDIA device";
  if (test::test_tuning("mma") == "0") GTEST_SKIP() << "tune.mma=0: the tensor-core GEMM is off";
  ASSERT_TRUE(open(api, "portable", portable, why)) << why;

  struct Shape {
    uint32_t m, n, k, bits, group;
    sl_dtype scale_dtype;
  };
  // Ragged m (one partial 128-row block, several), n not a multiple of the 128-row tile, each group
  // size and scale form, 8-bit codes, and the kernel's shapes (run with SLUICE_TEST_BACKEND_OPTIONS=tune.mma_bk=32 /
  // tune.mma_bm=64 to cover each).
  const Shape shapes[] = {{9, 200, 512, 4, 32, SL_DTYPE_F16},      {100, 333, 1024, 4, 64, SL_DTYPE_BF16},
                          {512, 260, 2048, 4, 128, SL_DTYPE_BF16}, {130, 129, 768, 4, 64, SL_DTYPE_F32},
                          {257, 136, 1024, 8, 64, SL_DTYPE_F16},   {64, 4096, 256, 4, 128, SL_DTYPE_F16},
                          {40, 150, 96, 4, 32, SL_DTYPE_BF16}};  // k not a multiple of 64: 32-column steps
  std::mt19937 rng(11);
  for (const Shape& s : shapes) {
    SCOPED_TRACE("m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " + std::to_string(s.k) + " bits " +
                 std::to_string(s.bits) + " group " + std::to_string(s.group) + " scale dtype " + std::to_string(s.scale_dtype));
    const QuantWeight w = random_quant(s.n, s.k, s.bits, s.group, s.scale_dtype, rng);
    std::normal_distribution<float> d(0, 1);
    std::vector<float> x(std::size_t(s.m) * s.k);
    for (auto& v : x) v = d(rng);
    const auto got = quant_gemm(fast, w, x, s.m);
    const auto f32 = quant_gemm(portable, w, x, s.m);
    // The kernel rounds x and w to f16 (relative error ≤ 2⁻¹¹ each, so ≤ 2⁻¹⁰ + 2⁻²² a product) and
    // sums in f32 (≤ k·2⁻²⁴ relative to Σ|x·w| for any order): its error is bounded by
    // (2⁻¹⁰ + k·2⁻²⁴)·Σ|x·w|, nothing widened.
    const double rel = std::ldexp(1.0, -10) + std::ldexp(1.0, -22) + s.k * std::ldexp(1.0, -24);
    std::size_t differs = 0;
    for (uint32_t i = 0; i < s.m; ++i)
      for (uint32_t j = 0; j < s.n; ++j) {
        double exact = 0, magnitude = 0;
        for (uint32_t c = 0; c < s.k; ++c) {
          const double p = double(x[std::size_t(i) * s.k + c]) * w.values[std::size_t(j) * s.k + c];
          exact += p;
          magnitude += std::abs(p);
        }
        const std::size_t at = std::size_t(i) * s.n + j;
        ASSERT_NEAR(got[at], exact, rel * magnitude) << "row " << i << " col " << j;
        ASSERT_NEAR(f32[at], exact, s.k * std::ldexp(1.0, -23) * magnitude) << "portable, row " << i << " col " << j;
        differs += got[at] != f32[at];
      }
    // f16 inputs change almost every sum's last bits: equal results would mean the GEMM fell back to
    // the portable path (e.g. its program failed to build) and this test checked nothing.
    EXPECT_GT(differs, std::size_t(s.m) * s.n / 2) << "the tensor-core GEMM did not run";
  }
}


// Weights stored back to back in shared device buffers (as a model's tensors are), for matmul_multi.
struct Packed {
  std::vector<uint32_t> words;
  std::vector<uint8_t> scales, biases;
  std::vector<sl_weight> weights;  // their buffers set once the copies exist
  void add(const QuantWeight& w) {
    sl_weight q = describe(w);
    q.offset = words.size() * 4;
    q.scales_offset = scales.size();
    q.biases_offset = biases.size();
    words.insert(words.end(), w.words.begin(), w.words.end());
    scales.insert(scales.end(), w.scales.begin(), w.scales.end());
    biases.insert(biases.end(), w.biases.begin(), w.biases.end());
    weights.push_back(q);
  }
  std::vector<sl_buffer*> upload(const Opened& o) {
    std::vector<sl_buffer*> b = {device_copy(o, words.data(), words.size() * 4), device_copy(o, scales.data(), scales.size()),
                                 device_copy(o, biases.data(), biases.size())};
    for (auto& w : weights) {
      w.data = b[0];
      w.scales = b[1];
      w.biases = b[2];
    }
    return b;
  }
};

// |got − Σ w·a| for every row of a 4-bit product, against its bound: the float32 sums' rounding
// (cols · 2⁻²³ of Σ (|s·q| + |b|)·|a|, what the kernels add) and, where the dp4a kernel ran, the
// activation's 15-bit rounding (Σ |w| · step/2, step = max|a| / 16383 of each 32-column block).
void expect_product(const QuantWeight& w, const std::vector<float>& a, const std::vector<float>& bias,
                    const std::vector<float>& got, bool dp4a, const char* what) {
  std::vector<double> step(w.cols / 32);
  for (uint32_t blk = 0; blk < w.cols / 32; ++blk) {
    float m = 0.0f;
    for (uint32_t c = 0; c < 32; ++c) m = std::max(m, std::abs(a[blk * 32 + c]));
    step[blk] = m / 16383.0;
  }
  for (uint32_t r = 0; r < w.rows; ++r) {
    double exact = bias.empty() ? 0.0 : bias[r], magnitude = 0.0, rounding = 0.0;
    for (uint32_t c = 0; c < w.cols; ++c) {
      const double v = w.values[std::size_t(r) * w.cols + c];
      exact += v * a[c];
      magnitude += (std::abs(v) + 0.2) * std::abs(a[c]);  // |s·q| + |b| <= |w| + 2|b|, |b| <= 0.075 here
      rounding += std::abs(v) * step[c / 32] / 2;
    }
    ASSERT_NEAR(got[r], exact, w.cols * std::ldexp(1.0, -23) * magnitude + (dp4a ? rounding : 0.0)) << what << " row " << r;
  }
}

// What SLUICE_OPENCL_PROFILE prints when a backend opened with `options` runs fn(backend) and closes.
template <class Fn>
std::string profile_of(const sl_backend_api* api, const char* options, Fn&& fn) {
  ::testing::internal::CaptureStderr();
  setenv("SLUICE_OPENCL_PROFILE", "1", 1);
  {
    Opened profiled;
    std::string why;
    EXPECT_TRUE(open(api, options, profiled, why)) << why;
    if (profiled.be) fn(profiled);
  }
  unsetenv("SLUICE_OPENCL_PROFILE");
  return ::testing::internal::GetCapturedStderr();
}

// Launches of one kernel in a SLUICE_OPENCL_PROFILE report (0 when absent).
long profile_launches(const std::string& profile, const std::string& name) {
  const std::string key = "\n  " + name + " ";
  const auto at = profile.find(key);
  return at == std::string::npos ? 0L : std::stol(profile.substr(profile.find_first_not_of(' ', at + key.size())));
}

// A float32 vector weight (a norm's, a bias) of n values in b.
sl_weight f32_vector(sl_buffer* b, uint32_t n) {
  sl_weight w{};
  w.struct_size = sizeof(w);
  w.data = b;
  w.dtype = SL_DTYPE_F32;
  w.rows = 1;
  w.cols = n;
  return w;
}

// A batch of one token at position 0 of one sequence (decode: the fused paths take one row).
void begin_one_token(const Opened& o) {
  static const int32_t zero = 0;
  sl_batch batch{};
  batch.struct_size = sizeof(batch);
  batch.n_tokens = 1;
  batch.positions = &zero;
  batch.seq_slots = &zero;
  batch.n_seqs = 1;
  batch.max_pages = 1;
  batch.page_table = &zero;
  sl_error err{};
  EXPECT_EQ(o.ops->run_recorded(&err), SL_OK) << err.message;
  EXPECT_EQ(o.ops->begin_batch(&batch, &err), SL_OK) << err.message;
  o.ops->record();
}

// A decode batch of n sequences' tokens, each at position 0 of its own sequence.
void begin_tokens(const Opened& o, uint32_t n) {
  static const std::vector<int32_t> zeros(64, 0), slots = [] {
    std::vector<int32_t> v(64);
    for (int32_t i = 0; i < 64; ++i) v[i] = i;
    return v;
  }();
  sl_batch batch{};
  batch.struct_size = sizeof(batch);
  batch.n_tokens = n;
  batch.positions = zeros.data();
  batch.seq_slots = slots.data();
  batch.n_seqs = n;
  batch.max_pages = 1;
  batch.page_table = slots.data();
  sl_error err{};
  EXPECT_EQ(o.ops->run_recorded(&err), SL_OK) << err.message;
  EXPECT_EQ(o.ops->begin_batch(&batch, &err), SL_OK) << err.message;
  o.ops->record();
}

// Batched products of one input as one launch (q/k/v, gate/up: the batch kernels' parts,
// BATCH_PARTS_ARGS) on each batch kernel the device runs — tensor cores (matvec_q4_batch_mma), dp4a
// (matvec_q4_batch_dp4a, NVIDIA) and the portable float kernel (matvec_q4_batch, every device): each
// part's outputs bit for bit those of its weight alone where the launch and the single products have
// one shape — on tensor cores m-warps as tuned, or a model's q/k/v (384/128/128 rows: one m-warp either
// way) with a bf16 bias on every part; a bias on one part only, a part whose rows end inside a
// work-group's block, batches of one chunk and of several; one product launch in all.
TEST_F(OpenclVendorPaths, BatchedProductsOfOneInputRunAsOneLaunchEqualToEachAlone) {
  struct Kernel {
    const char* name;
    std::string unavailable;
    const char* options;  // in place of a case's tensor-core tunings
  };
  const Kernel kernels[] = {
      {"matvec_q4_batch_mma", batch_mma_unavailable(probe), nullptr},
      {"matvec_q4_batch_dp4a", dp4a ? "" : "no dp4a on this device", "tune.q4_batch_max_rows=64 tune.q4_batch_mma=0"},
      {"matvec_q4_batch", "", "tune.q4_batch_max_rows=64 tune.q4_batch_mma=0 tune.q4_batch_dp4a=0"},
  };
  std::mt19937 rng(31);
  std::normal_distribution<float> d(0, 1);
  struct Case {
    Packed packed;
    std::vector<bool> biased;
    sl_dtype bias_dtype;
    std::vector<const char*> tunings;
    std::vector<uint32_t> batches;
  };
  std::vector<Case> cases(2);
  cases[0].packed.add(random_quant(150, 512, 4, 64, SL_DTYPE_BF16, rng));  // rows ending inside a 32-row block
  cases[0].packed.add(random_quant(64, 512, 4, 64, SL_DTYPE_BF16, rng));
  cases[0].packed.add(random_quant(96, 512, 4, 64, SL_DTYPE_BF16, rng));
  cases[0].biased = {false, true, false};
  cases[0].bias_dtype = SL_DTYPE_F32;
  cases[0].tunings = {"tune.q4_batch_max_rows=64 tune.q4_batch_mma_min_rows=2 tune.q4_batch_mma_groups_per_cu=0",
                      "tune.q4_batch_max_rows=64 tune.q4_batch_mma_min_rows=2 tune.q4_batch_mma_groups_per_cu=0 tune.q4_batch_mma_m_warps=1"};
  cases[0].batches = {3, 33};
  for (uint32_t rows : {384u, 128u, 128u}) cases[1].packed.add(random_quant(rows, 384, 4, 64, SL_DTYPE_BF16, rng));
  cases[1].biased = {true, true, true};
  cases[1].bias_dtype = SL_DTYPE_BF16;
  cases[1].tunings = {"tune.q4_batch_max_rows=64 tune.q4_batch_mma_min_rows=2"};
  cases[1].batches = {4, 10, 31};
  for (const Kernel& kernel : kernels) {
    if (!kernel.unavailable.empty()) {
      std::printf("  %s: not run (%s)\n", kernel.name, kernel.unavailable.c_str());
      continue;
    }
    for (Case& c : cases)
      for (const char* tuning : kernel.options ? std::vector<const char*>{kernel.options} : c.tunings)
        for (uint32_t m : c.batches) {
          SCOPED_TRACE(std::string("options '") + tuning + "', rows " + std::to_string(m) + ", first weight " +
                       std::to_string(c.packed.weights[0].rows) + " × " + std::to_string(c.packed.weights[0].cols));
          const uint32_t cols = c.packed.weights[0].cols;
          std::vector<float> x(std::size_t(m) * cols);
          for (auto& v : x) v = d(rng);
          std::vector<std::vector<uint8_t>> bias_bytes(3);
          for (uint32_t i = 0; i < 3; ++i)
            for (uint32_t r = 0; r < c.packed.weights[i].rows; ++r) {
              const float v = d(rng);
              uint32_t bits;
              std::memcpy(&bits, &v, 4);
              const auto* b = reinterpret_cast<const uint8_t*>(&v);
              if (c.bias_dtype == SL_DTYPE_BF16) {
                bias_bytes[i].push_back(static_cast<uint8_t>(bits >> 16));
                bias_bytes[i].push_back(static_cast<uint8_t>(bits >> 24));
              } else {
                bias_bytes[i].insert(bias_bytes[i].end(), b, b + 4);
              }
            }
          std::vector<std::vector<float>> together(3), alone(3);
          const std::string profile = profile_of(api, tuning, [&](const Opened& o) {
            std::vector<sl_buffer*> held = c.packed.upload(o);
            sl_buffer* dx = device_copy(o, x.data(), x.size() * 4);
            const sl_weight* ws[3];
            const sl_weight* biases[3];
            sl_weight bias_w[3];
            sl_buffer *outs[3], *singles[3];
            for (uint32_t i = 0; i < 3; ++i) {
              ws[i] = &c.packed.weights[i];
              sl_buffer* db = device_copy(o, bias_bytes[i].data(), bias_bytes[i].size());
              held.push_back(db);
              bias_w[i] = f32_vector(db, ws[i]->rows);
              bias_w[i].dtype = c.bias_dtype;
              biases[i] = c.biased[i] ? &bias_w[i] : nullptr;
              std::vector<float> zero(std::size_t(m) * ws[i]->rows, 0.0f);
              outs[i] = device_copy(o, zero.data(), zero.size() * 4);
              singles[i] = device_copy(o, zero.data(), zero.size() * 4);
            }
            sl_error err{};
            EXPECT_EQ(o.ops->matmul_multi(dx, m, 3, ws, biases, outs, &err), SL_OK) << err.message;
            for (uint32_t i = 0; i < 3; ++i) {
              EXPECT_EQ(o.ops->matmul(dx, m, ws[i], biases[i], singles[i], &err), SL_OK) << err.message;
              together[i].resize(std::size_t(m) * ws[i]->rows);
              alone[i].resize(together[i].size());
              EXPECT_EQ(o.api->download(o.be, outs[i], 0, together[i].data(), together[i].size() * 4, &err), SL_OK);
              EXPECT_EQ(o.api->download(o.be, singles[i], 0, alone[i].data(), alone[i].size() * 4, &err), SL_OK);
              o.api->free(o.be, outs[i]);
              o.api->free(o.be, singles[i]);
            }
            for (sl_buffer* b : held) o.api->free(o.be, b);
            o.api->free(o.be, dx);
          });
          for (uint32_t i = 0; i < 3; ++i) {
            std::size_t differ = 0, first = together[i].size();
            for (std::size_t j = 0; j < together[i].size(); ++j)
              if (together[i][j] != alone[i][j]) {
                ++differ;
                first = std::min(first, j);
              }
            EXPECT_EQ(differ, 0u) << "part " << i << ": first at batch row " << first / c.packed.weights[i].rows << ", weight row "
                                  << first % c.packed.weights[i].rows << " (" << (first < together[i].size() ? together[i][first] : 0.0f)
                                  << " against " << (first < together[i].size() ? alone[i][first] : 0.0f) << ")";
            EXPECT_NE(std::count(alone[i].begin(), alone[i].end(), 0.0f), static_cast<std::ptrdiff_t>(alone[i].size())) << "part " << i;
          }
          // One launch for the three, then one each.
          EXPECT_EQ(profile_launches(profile, kernel.name), 4L) << profile;
        }
  }
}

// Decode's fused path (two hidden sizes, one for each way a norm rounds): rms_norm, add_rms_norm and
// gated_activation write their output's 15-bit form on NVIDIA, and the 4-bit products right after
// them (matmul_multi's q/k/v and gate/up in one launch each, the down product) read it with dp4a
// instead of rounding x in a launch of their own — below the 2²⁴ weights where a product would round
// x itself. Every result is held to the float64 product of the activation the backend produced (on
// any device: the several-weight launch, a ragged last part and a bias in the middle part are checked
// on PoCL too); a form gone stale (the activation overwritten by an upload) must not be read; gate/up
// products read back before any activation must still run; and on NVIDIA the profile shows the
// products ran as dp4a launches with no separate rounding, the gate/up pair before the activation
// joined with it in one launch.
TEST_F(OpenclVendorPaths, ProducersRoundTheActivationForTheDp4aProducts) {

  // 1024: the norms round from registers; 1088 (not whole 1024-value runs): from memory after a fence.
  for (uint32_t H : {1024u, 1088u}) {
    const uint32_t F = 2048;
    SCOPED_TRACE("hidden size " + std::to_string(H));
    std::mt19937 rng(23);
    const QuantWeight wq = random_quant(512, H, 4, 64, SL_DTYPE_F16, rng), wk = random_quant(128, H, 4, 64, SL_DTYPE_F16, rng),
                      wv = random_quant(130, H, 4, 64, SL_DTYPE_F16, rng), wg = random_quant(F, H, 4, 64, SL_DTYPE_BF16, rng),
                      wu = random_quant(F, H, 4, 64, SL_DTYPE_BF16, rng), wd = random_quant(H, F, 4, 64, SL_DTYPE_BF16, rng);
    std::normal_distribution<float> d(0, 1);
    auto normal = [&](std::size_t n, float scale) {
      std::vector<float> v(n);
      for (auto& e : v) e = scale * d(rng);
      return v;
    };
    const std::vector<float> x = normal(H, 1.0f), delta = normal(H, 0.5f), norm_w = normal(H, 0.3f), k_bias = normal(128, 0.1f),
                             stale = normal(H, 2.0f);

    struct Run {
      std::vector<float> h, h2, act, stale_h, q, k, v, gate, up, down, q_stale, h3, gate3, up3;
    };
    // The norm as the kernels compute it (float32 values, double sum of squares: within their rounding).
    auto host_norm = [&](const std::vector<float>& xv, float offset) {
      double ss = 0;
      for (float e : xv) ss += double(e) * e;
      const float inv = 1.0f / std::sqrt(float(ss / H) + 1e-5f);
      std::vector<float> h(H);
      for (uint32_t c = 0; c < H; ++c) h[c] = (norm_w[c] + offset) * (xv[c] * inv);
      return h;
    };
    auto run = [&](const Opened& o) {
      Run r;
      Packed qkv, gu, dn;
      qkv.add(wq), qkv.add(wk), qkv.add(wv), gu.add(wg), gu.add(wu), dn.add(wd);
      std::vector<sl_buffer*> owned;
      for (Packed* p : {&qkv, &gu, &dn})
        for (sl_buffer* b : p->upload(o)) owned.push_back(b);
      auto buf = [&](const std::vector<float>& v) {
        owned.push_back(device_copy(o, v.data(), v.size() * 4));
        return owned.back();
      };
      sl_buffer *dx = buf(x), *dd = buf(delta), *dnw = buf(norm_w), *dkb = buf(k_bias), *dh = buf(std::vector<float>(H)),
                *dh2 = buf(std::vector<float>(H)), *dq = buf(std::vector<float>(512)), *dk = buf(std::vector<float>(128)),
                *dv = buf(std::vector<float>(130)), *dg = buf(std::vector<float>(F)), *du = buf(std::vector<float>(F)),
                *dact = buf(std::vector<float>(F)), *ddown = buf(std::vector<float>(H)), *dqs = buf(std::vector<float>(512)),
                *dh3 = buf(std::vector<float>(H)), *dg3 = buf(std::vector<float>(F)), *du3 = buf(std::vector<float>(F));
      const sl_weight nw = f32_vector(dnw, H), kb = f32_vector(dkb, 128);
      begin_one_token(o);
      sl_error err{};
      const sl_weight* qkv_w[] = {&qkv.weights[0], &qkv.weights[1], &qkv.weights[2]};
      const sl_weight* qkv_b[] = {nullptr, &kb, nullptr};
      sl_buffer* qkv_out[] = {dq, dk, dv};
      const sl_weight* gu_w[] = {&gu.weights[0], &gu.weights[1]};
      sl_buffer* gu_out[] = {dg, du};
      EXPECT_EQ(o.ops->rms_norm(dx, &nw, 0.0f, dh, 1, H, 1e-5f, &err), SL_OK) << err.message;
      EXPECT_EQ(o.ops->matmul_multi(dh, 1, 3, qkv_w, qkv_b, qkv_out, &err), SL_OK) << err.message;
      EXPECT_EQ(o.ops->add_rms_norm(dx, dd, &nw, 1.0f, dh2, 1, H, 1e-5f, &err), SL_OK) << err.message;
      EXPECT_EQ(o.ops->matmul_multi(dh2, 1, 2, gu_w, nullptr, gu_out, &err), SL_OK) << err.message;
      EXPECT_EQ(o.ops->gated_activation(SL_ACT_SILU, dg, du, dact, F, &err), SL_OK) << err.message;
      EXPECT_EQ(o.ops->matmul(dact, 1, &dn.weights[0], nullptr, ddown, &err), SL_OK) << err.message;
      // The norm writes h's form; the upload replaces h, so the product must read the new values.
      EXPECT_EQ(o.ops->rms_norm(dx, &nw, 0.0f, dh, 1, H, 1e-5f, &err), SL_OK) << err.message;
      EXPECT_EQ(o.ops->run_recorded(&err), SL_OK) << err.message;  // the upload comes after the norm, as asked
      EXPECT_EQ(o.api->upload(o.be, dh, 0, stale.data(), H * 4, &err), SL_OK) << err.message;
      o.ops->record();
      EXPECT_EQ(o.ops->matmul(dh, 1, &qkv.weights[0], nullptr, dqs, &err), SL_OK) << err.message;
      // gate/up products read back before any activation: NVIDIA defers them to join a
      // gated_activation (one launch), so the download must run them first, as asked.
      sl_buffer* gu3_out[] = {dg3, du3};
      EXPECT_EQ(o.ops->rms_norm(dx, &nw, 0.0f, dh3, 1, H, 1e-5f, &err), SL_OK) << err.message;
      EXPECT_EQ(o.ops->matmul_multi(dh3, 1, 2, gu_w, nullptr, gu3_out, &err), SL_OK) << err.message;
      auto get = [&](sl_buffer* b, std::size_t n) {
        std::vector<float> v(n);
        EXPECT_EQ(o.ops->run_recorded(&err), SL_OK) << err.message;
        EXPECT_EQ(o.api->download(o.be, b, 0, v.data(), n * 4, &err), SL_OK) << err.message;
        o.ops->record();
        return v;
      };
      r.h2 = get(dh2, H), r.act = get(dact, F), r.q = get(dq, 512), r.k = get(dk, 128), r.v = get(dv, 130);
      r.gate3 = get(dg3, F), r.up3 = get(du3, F), r.h3 = get(dh3, H);
      r.gate = get(dg, F), r.up = get(du, F), r.down = get(ddown, H), r.q_stale = get(dqs, 512);
      r.h = host_norm(x, 0.0f);  // h before the upload: the norm of the original x
      for (sl_buffer* b : owned) o.api->free(o.be, b);
      return r;
    };

    const Run r = run(probe);
    expect_product(wq, r.h, {}, r.q, dp4a, "q");
    expect_product(wk, r.h, k_bias, r.k, dp4a, "k (with a bias)");
    expect_product(wv, r.h, {}, r.v, dp4a, "v (130 rows: a ragged last part)");
    expect_product(wg, r.h2, {}, r.gate, dp4a, "gate");
    expect_product(wu, r.h2, {}, r.up, dp4a, "up");
    expect_product(wd, r.act, {}, r.down, dp4a, "down");
    expect_product(wq, stale, {}, r.q_stale, false, "q of an activation replaced after its norm");
    expect_product(wg, r.h3, {}, r.gate3, dp4a, "gate read back before an activation");
    expect_product(wu, r.h3, {}, r.up3, dp4a, "up read back before an activation");
    // The activation of the joined launch (NVIDIA) or of gated_activation: act(gate) · up of the
    // products it returned. OpenCL's exp may be 3 ulp off and its division 2.5, the product 0.5: 8 ulp.
    for (uint32_t i = 0; i < F; ++i) {
      const double g = r.gate[i], want = g / (1.0 + std::exp(-g)) * r.up[i];
      ASSERT_NEAR(r.act[i], want, std::abs(want) * 8 * std::ldexp(1.0, -23) + 1e-30) << "act " << i;
    }
    if (!dp4a) continue;

    const std::string profile = profile_of(api, "", run);
    auto launches = [&](const std::string& name) { return profile_launches(profile, name); };
    // q/k/v, down, the gate/up pair read back; the first gate/up pair joined with its activation.
    EXPECT_EQ(launches("matvec_q4_dp4a"), 3) << profile;
    EXPECT_EQ(launches("matvec_q4_dp4a_glu_blocks"), 1) << profile;
    EXPECT_EQ(launches("matvec_q4_dp4a_glu"), 0) << profile;
    EXPECT_EQ(launches("gated_activation_int15") + launches("gated_activation"), 0) << profile;
    EXPECT_EQ(launches("matvec_x_int15"), 0) << profile;
    EXPECT_EQ(launches("matvec_q4_rows"), 1) << profile;  // the product after the upload
  }
}

// The same for a decode batch the dp4a batch kernel takes (2 and 3 rows, under the tensor-core
// kernel's): rms_norm, add_rms_norm and gated_activation write every row's 15-bit form, and the
// 4-bit batch product after each reads it instead of rounding x in a launch of its own — its outputs
// bit for bit those of the same product of a copy of the activation (which the product rounds itself:
// the form is one function of the values, whichever kernel writes it); the profile shows the three
// joined products ran with no rounding launch, the three on copies with one each.
TEST_F(OpenclVendorPaths, ProducersRoundABatchsRowsForTheDp4aBatchProducts) {
  if (!dp4a) GTEST_SKIP() << "no dp4a on this device";
  for (uint32_t H : {1024u, 1088u})
    for (uint32_t n : {2u, 3u}) {
      const uint32_t F = 2048;
      SCOPED_TRACE("hidden size " + std::to_string(H) + ", rows " + std::to_string(n));
      std::mt19937 rng(41);
      const QuantWeight wq = random_quant(512, H, 4, 64, SL_DTYPE_F16, rng), wd = random_quant(H, F, 4, 64, SL_DTYPE_BF16, rng);
      std::normal_distribution<float> d(0, 1);
      auto normal = [&](std::size_t count, float scale) {
        std::vector<float> v(count);
        for (auto& e : v) e = scale * d(rng);
        return v;
      };
      const std::vector<float> x = normal(std::size_t(n) * H, 1.0f), delta = normal(std::size_t(n) * H, 0.5f), norm_w = normal(H, 0.3f),
                               gate = normal(std::size_t(n) * F, 1.0f), up = normal(std::size_t(n) * F, 1.0f);
      // Joined and on copies: q of the norm, q of the add-norm, down of the activation.
      std::vector<std::vector<float>> joined(3), copied(3);
      const std::string profile = profile_of(api, "tune.q4_batch_mma_min_rows=4", [&](const Opened& o) {
        Packed pq, pd;
        pq.add(wq), pd.add(wd);
        std::vector<sl_buffer*> owned;
        for (Packed* p : {&pq, &pd})
          for (sl_buffer* b : p->upload(o)) owned.push_back(b);
        auto buf = [&](const std::vector<float>& v) {
          owned.push_back(device_copy(o, v.data(), v.size() * 4));
          return owned.back();
        };
        auto zeros = [&](std::size_t count) { return buf(std::vector<float>(count)); };
        sl_buffer *dx = buf(x), *dd = buf(delta), *dnw = buf(norm_w), *dg = buf(gate), *du = buf(up);
        const sl_weight nw = f32_vector(dnw, H);
        sl_buffer* acts[3] = {zeros(std::size_t(n) * H), zeros(std::size_t(n) * H), zeros(std::size_t(n) * F)};
        sl_buffer* copies[3] = {zeros(std::size_t(n) * H), zeros(std::size_t(n) * H), zeros(std::size_t(n) * F)};
        const sl_weight* ws[3] = {&pq.weights[0], &pq.weights[0], &pd.weights[0]};
        sl_buffer *outs[3], *outs_copied[3];
        for (uint32_t i = 0; i < 3; ++i) {
          outs[i] = zeros(std::size_t(n) * ws[i]->rows);
          outs_copied[i] = zeros(std::size_t(n) * ws[i]->rows);
        }
        begin_tokens(o, n);
        sl_error err{};
        EXPECT_EQ(o.ops->rms_norm(dx, &nw, 0.0f, acts[0], n, H, 1e-5f, &err), SL_OK) << err.message;
        EXPECT_EQ(o.ops->matmul(acts[0], n, ws[0], nullptr, outs[0], &err), SL_OK) << err.message;
        EXPECT_EQ(o.ops->add_rms_norm(dx, dd, &nw, 1.0f, acts[1], n, H, 1e-5f, &err), SL_OK) << err.message;
        EXPECT_EQ(o.ops->matmul(acts[1], n, ws[1], nullptr, outs[1], &err), SL_OK) << err.message;
        EXPECT_EQ(o.ops->gated_activation(SL_ACT_SILU, dg, du, acts[2], std::size_t(n) * F, &err), SL_OK) << err.message;
        EXPECT_EQ(o.ops->matmul(acts[2], n, ws[2], nullptr, outs[2], &err), SL_OK) << err.message;
        for (uint32_t i = 0; i < 3; ++i) {
          const uint64_t values = uint64_t(n) * ws[i]->cols;
          EXPECT_EQ(o.ops->copy(acts[i], 0, copies[i], 0, values, &err), SL_OK) << err.message;
          EXPECT_EQ(o.ops->matmul(copies[i], n, ws[i], nullptr, outs_copied[i], &err), SL_OK) << err.message;
        }
        EXPECT_EQ(o.ops->run_recorded(&err), SL_OK) << err.message;
        for (uint32_t i = 0; i < 3; ++i) {
          joined[i].resize(std::size_t(n) * ws[i]->rows);
          copied[i].resize(joined[i].size());
          EXPECT_EQ(o.api->download(o.be, outs[i], 0, joined[i].data(), joined[i].size() * 4, &err), SL_OK) << err.message;
          EXPECT_EQ(o.api->download(o.be, outs_copied[i], 0, copied[i].data(), copied[i].size() * 4, &err), SL_OK) << err.message;
        }
        o.ops->record();
        for (sl_buffer* b : owned) o.api->free(o.be, b);
      });
      const char* what[3] = {"q of rms_norm", "q of add_rms_norm", "down of gated_activation"};
      for (uint32_t i = 0; i < 3; ++i) {
        EXPECT_EQ(joined[i], copied[i]) << what[i];
        EXPECT_NE(std::count(joined[i].begin(), joined[i].end(), 0.0f), static_cast<std::ptrdiff_t>(joined[i].size())) << what[i];
      }
      EXPECT_EQ(profile_launches(profile, "matvec_q4_batch_dp4a"), 6L) << profile;
      EXPECT_EQ(profile_launches(profile, "matvec_x_int15_rows"), 3L) << profile;  // the copies' products only
    }
}
// The residual step in the products' launches (NVIDIA; the fusion pass's kResidual, cl_matmul.cpp residual_join): a product (o, down),
// the add_rms_norm of its output and the products that read the norm (gate/up with the activation,
// q/k/v) — the norm computed by no launch of its own: the product's work-groups finish the residual
// row a 32-row block each, and the readers scale their sums by 1/rms and write the normalised row in
// passing. Every result is held to float64 arithmetic on what the backend returned (the residual
// sums, the norms of the returned rows, the products within the 15-bit bound) on any device; a norm
// read back before any product reads it (a plain rms_norm runs then) and a product read back before
// its norm (it runs alone) are checked too. On NVIDIA the profile shows the joined launches and no
// add_rms_norm, and a backend opened with "no-res-join" runs the unjoined path.
TEST_F(OpenclVendorPaths, TheResidualStepRunsInTheProductsLaunches) {

  constexpr uint32_t H = 1024, F = 2048, A = 512;  // hidden, intermediate, attention output
  std::mt19937 rng(31);
  const QuantWeight wo = random_quant(H, A, 4, 64, SL_DTYPE_BF16, rng), wg = random_quant(F, H, 4, 64, SL_DTYPE_BF16, rng),
                    wu = random_quant(F, H, 4, 64, SL_DTYPE_BF16, rng), wd = random_quant(H, F, 4, 64, SL_DTYPE_BF16, rng),
                    wq = random_quant(512, H, 4, 64, SL_DTYPE_F16, rng), wk = random_quant(128, H, 4, 64, SL_DTYPE_F16, rng),
                    wv = random_quant(128, H, 4, 64, SL_DTYPE_F16, rng);
  std::normal_distribution<float> nd(0, 1);
  auto normal = [&](std::size_t n, float scale) {
    std::vector<float> v(n);
    for (auto& e : v) e = scale * nd(rng);
    return v;
  };
  const std::vector<float> x0 = normal(H, 1.0f), att_in = normal(H, 1.0f), nw0 = normal(H, 0.3f), nw1 = normal(H, 0.3f),
                           nw2 = normal(H, 0.3f);
  struct Run {
    std::vector<float> a, o, x1, h2, gate, up, act, down, x2, h3, q, k, v;  // the first sequence
    std::vector<float> o_b, o_b2, x1_b, h2_b, g_b, u_b;                     // the second: read back early
  };
  auto run = [&](const Opened& o) {
    Run r;
    Packed pk;
    for (const QuantWeight* w : {&wo, &wg, &wu, &wd, &wq, &wk, &wv}) pk.add(*w);
    std::vector<sl_buffer*> owned = pk.upload(o);
    auto buf = [&](const std::vector<float>& v) {
      owned.push_back(device_copy(o, v.data(), v.size() * 4));
      return owned.back();
    };
    auto zeros = [&](std::size_t n) { return buf(std::vector<float>(n)); };
    const sl_weight n0 = f32_vector(buf(nw0), H), n1 = f32_vector(buf(nw1), H), n2 = f32_vector(buf(nw2), H);
    begin_one_token(o);
    sl_error err{};
    auto get = [&](sl_buffer* b, std::size_t n) {
      std::vector<float> v(n);
      EXPECT_EQ(o.ops->run_recorded(&err), SL_OK) << err.message;
      EXPECT_EQ(o.api->download(o.be, b, 0, v.data(), n * 4, &err), SL_OK) << err.message;
      o.ops->record();
      return v;
    };
    const sl_weight *w_o = &pk.weights[0], *w_d = &pk.weights[3];
    const sl_weight* gu_w[] = {&pk.weights[1], &pk.weights[2]};
    const sl_weight* qkv_w[] = {&pk.weights[4], &pk.weights[5], &pk.weights[6]};
    // The attention output's form comes from a norm here (the first 512 of a 1024 row would not do:
    // the o projection reads A columns), so: a = rms_norm(att_in)[0..A) as the product's input.
    sl_buffer *dx = buf(x0), *din = buf(att_in), *da = zeros(H), *dout = zeros(H), *dh2 = zeros(H), *dg = zeros(F), *du = zeros(F),
              *dact = zeros(F), *ddown = zeros(H), *dh3 = zeros(H), *dq = zeros(512), *dk = zeros(128), *dv = zeros(128);
    sl_weight n0a = n0;
    n0a.cols = A;
    EXPECT_EQ(o.ops->rms_norm(din, &n0a, 0.0f, da, 1, A, 1e-5f, &err), SL_OK) << err.message;
    EXPECT_EQ(o.ops->matmul(da, 1, w_o, nullptr, dout, &err), SL_OK) << err.message;
    EXPECT_EQ(o.ops->add_rms_norm(dx, dout, &n1, 0.0f, dh2, 1, H, 1e-5f, &err), SL_OK) << err.message;
    sl_buffer* gu_out[] = {dg, du};
    EXPECT_EQ(o.ops->matmul_multi(dh2, 1, 2, gu_w, nullptr, gu_out, &err), SL_OK) << err.message;
    EXPECT_EQ(o.ops->gated_activation(SL_ACT_SILU, dg, du, dact, F, &err), SL_OK) << err.message;
    r.x1 = get(dx, H);  // after the first residual step (a graph ends here)
    EXPECT_EQ(o.ops->matmul(dact, 1, w_d, nullptr, ddown, &err), SL_OK) << err.message;
    EXPECT_EQ(o.ops->add_rms_norm(dx, ddown, &n2, 1.0f, dh3, 1, H, 1e-5f, &err), SL_OK) << err.message;
    sl_buffer* qkv_out[] = {dq, dk, dv};
    EXPECT_EQ(o.ops->matmul_multi(dh3, 1, 3, qkv_w, nullptr, qkv_out, &err), SL_OK) << err.message;
    r.a = get(da, A), r.o = get(dout, H), r.h2 = get(dh2, H), r.gate = get(dg, F), r.up = get(du, F), r.act = get(dact, F);
    r.down = get(ddown, H), r.x2 = get(dx, H), r.h3 = get(dh3, H), r.q = get(dq, 512), r.k = get(dk, 128), r.v = get(dv, 128);
    // Read back early: the norm before any product reads it, then gate/up of it; and the o product
    // before its add_rms_norm.
    sl_buffer *dx_b = buf(x0), *dout_b = zeros(H), *dh2_b = zeros(H), *dg_b = zeros(F), *du_b = zeros(F);
    EXPECT_EQ(o.ops->rms_norm(din, &n0a, 0.0f, da, 1, A, 1e-5f, &err), SL_OK) << err.message;
    EXPECT_EQ(o.ops->matmul(da, 1, w_o, nullptr, dout_b, &err), SL_OK) << err.message;
    r.o_b = get(dout_b, H);
    EXPECT_EQ(o.ops->add_rms_norm(dx_b, dout_b, &n1, 0.0f, dh2_b, 1, H, 1e-5f, &err), SL_OK) << err.message;
    // Again, with a's form made anew (the norm above replaced it): the product joins its norm this time.
    EXPECT_EQ(o.ops->rms_norm(din, &n0a, 0.0f, da, 1, A, 1e-5f, &err), SL_OK) << err.message;
    EXPECT_EQ(o.ops->matmul(da, 1, w_o, nullptr, dout_b, &err), SL_OK) << err.message;
    EXPECT_EQ(o.ops->add_rms_norm(dx_b, dout_b, &n1, 0.0f, dh2_b, 1, H, 1e-5f, &err), SL_OK) << err.message;
    r.h2_b = get(dh2_b, H);
    sl_buffer* gu_out_b[] = {dg_b, du_b};
    EXPECT_EQ(o.ops->matmul_multi(dh2_b, 1, 2, gu_w, nullptr, gu_out_b, &err), SL_OK) << err.message;
    r.g_b = get(dg_b, F), r.u_b = get(du_b, F), r.x1_b = get(dx_b, H), r.o_b2 = get(dout_b, H);
    for (sl_buffer* b : owned) o.api->free(o.be, b);
    return r;
  };

  // The norm of a returned row, in double (the kernels' float sums are within its rounding).
  auto host_norm = [&](const std::vector<float>& xv, const std::vector<float>& w, float offset) {
    double ss = 0;
    for (float e : xv) ss += double(e) * e;
    const double inv = 1.0 / std::sqrt(ss / H + 1e-5);
    std::vector<double> h(H);
    for (uint32_t c = 0; c < H; ++c) h[c] = (double(w[c]) + offset) * xv[c] * inv;
    return h;
  };
  auto expect_norm = [&](const std::vector<float>& got, const std::vector<float>& xv, const std::vector<float>& w, float offset,
                         const char* what) {
    const auto want = host_norm(xv, w, offset);
    for (uint32_t c = 0; c < H; ++c) ASSERT_NEAR(got[c], want[c], 1e-5 * (std::abs(want[c]) + 1e-3)) << what << " " << c;
  };
  auto expect_sum = [&](const std::vector<float>& got, const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    for (uint32_t c = 0; c < H; ++c) ASSERT_EQ(got[c], a[c] + b[c]) << what << " " << c;  // one float addition: exact
  };
  for (const char* options : {"", "no-res-join"}) {
    SCOPED_TRACE(std::string("options '") + options + "'");
    Opened o;
    ASSERT_TRUE(open(api, options, o, why)) << why;
    const Run r = run(o);
    expect_product(wo, r.a, {}, r.o, dp4a, "o");
    expect_sum(r.x1, x0, r.o, "x + o");
    expect_norm(r.h2, r.x1, nw1, 0.0f, "h2");
    expect_product(wg, r.h2, {}, r.gate, dp4a, "gate");
    expect_product(wu, r.h2, {}, r.up, dp4a, "up");
    for (uint32_t i = 0; i < F; ++i) {
      const double g = r.gate[i], want = g / (1.0 + std::exp(-g)) * r.up[i];
      ASSERT_NEAR(r.act[i], want, std::abs(want) * 8 * std::ldexp(1.0, -23) + 1e-30) << "act " << i;
    }
    expect_product(wd, r.act, {}, r.down, dp4a, "down");
    expect_sum(r.x2, r.x1, r.down, "x + down");
    expect_norm(r.h3, r.x2, nw2, 1.0f, "h3 (weight offset 1)");
    expect_product(wq, r.h3, {}, r.q, dp4a, "q");
    expect_product(wk, r.h3, {}, r.k, dp4a, "k");
    expect_product(wv, r.h3, {}, r.v, dp4a, "v");
    expect_product(wo, r.a, {}, r.o_b, dp4a, "o read back before its norm");
    std::vector<float> twice(H);
    for (uint32_t c = 0; c < H; ++c) twice[c] = x0[c] + r.o_b[c];
    expect_product(wo, r.a, {}, r.o_b2, dp4a, "o again");
    for (uint32_t c = 0; c < H; ++c) twice[c] += r.o_b2[c];
    expect_sum(r.x1_b, twice, std::vector<float>(H, 0.0f), "x + o + o");
    expect_norm(r.h2_b, r.x1_b, nw1, 0.0f, "a norm read back before its products");
    expect_product(wg, r.h2_b, {}, r.g_b, dp4a, "gate of a norm read back");
    expect_product(wu, r.h2_b, {}, r.u_b, dp4a, "up of a norm read back");
  }
  if (!dp4a) return;
  const std::string joined = profile_of(api, "", run), apart = profile_of(api, "no-res-join", run);
  // Joined: the first sequence's two steps — the second across a graph boundary, its input's form
  // kept from the graph before. The second sequence's steps end their graphs (the product, then the
  // norm, read back) with no product of the norm after them in the graph: plain add_rms_norm.
  EXPECT_EQ(profile_launches(joined, "matvec_q4_dp4a_res"), 2) << joined;
  EXPECT_EQ(profile_launches(joined, "add_rms_norm"), 2) << joined;
  EXPECT_EQ(profile_launches(joined, "rms_norm"), 3) << joined;  // the inputs' norms
  EXPECT_EQ(profile_launches(apart, "matvec_q4_dp4a_res"), 0) << apart;
  EXPECT_EQ(profile_launches(apart, "add_rms_norm"), 4) << apart;
  EXPECT_EQ(profile_launches(apart, "rms_norm"), 3) << apart;
}

// A decode step's embedding with layer 0's norm step (NVIDIA; cl_ops.cpp, embed_join): the embedding
// waits for the rms_norm of its row, and the two run as one launch that writes x, the next product's
// 15-bit input and the blocks' Σ x², the norm's 1/rms left to the product (as after res_join). Three
// sequences on one backend — ids from the host, an id outside the table from a device buffer (a row
// of zeros), and an embedding read back before its norm (which must run alone first) — each x held
// bit for bit to the table's row, each normalised row (written by the product) to double arithmetic,
// each product to the float64 product of it; the profile shows which launches ran.
TEST_F(OpenclVendorPaths, TheEmbeddingRunsWithTheFirstNormsStep) {
  const uint32_t H = 1024, V = 40;
  std::mt19937 rng(31);
  const QuantWeight table = random_quant(V, H, 4, 64, SL_DTYPE_BF16, rng), wq = random_quant(256, H, 4, 64, SL_DTYPE_F16, rng);
  std::normal_distribution<float> nd(0, 0.3f);
  std::vector<float> nw(H);
  for (auto& e : nw) e = nd(rng);
  const int32_t ids[] = {17, V + 3, 5};  // the second from a device buffer, outside the table
  struct Run {
    std::vector<float> x[3], h[3], q[3];
  };
  auto run = [&](const Opened& o) {
    Run r;
    Packed pk;
    pk.add(table);
    pk.add(wq);
    std::vector<sl_buffer*> owned = pk.upload(o);
    auto buf = [&](const void* p, std::size_t bytes) {
      owned.push_back(device_copy(o, p, bytes));
      return owned.back();
    };
    const std::vector<float> zero(H);
    const sl_weight w_norm = f32_vector(buf(nw.data(), H * 4), H);
    sl_buffer* dids = buf(ids, sizeof ids);
    sl_error err{};
    auto get = [&](sl_buffer* b, std::size_t n) {
      std::vector<float> v(n);
      EXPECT_EQ(o.ops->run_recorded(&err), SL_OK) << err.message;
      EXPECT_EQ(o.api->download(o.be, b, 0, v.data(), n * 4, &err), SL_OK) << err.message;
      o.ops->record();
      return v;
    };
    for (int i = 0; i < 3; ++i) {
      begin_one_token(o);
      sl_buffer *dx = buf(zero.data(), H * 4), *dh = buf(zero.data(), H * 4), *dq = buf(zero.data(), 256 * 4);
      if (i == 1) {
        EXPECT_EQ(o.ops->embed_device(&pk.weights[0], dids, 1, 1, dx, &err), SL_OK) << err.message;
      } else {
        EXPECT_EQ(o.ops->embed(&pk.weights[0], &ids[i], 1, dx, &err), SL_OK) << err.message;
      }
      if (i == 2) r.x[i] = get(dx, H);  // read back before its norm: the embedding runs alone
      EXPECT_EQ(o.ops->rms_norm(dx, &w_norm, 0.0f, dh, 1, H, 1e-5f, &err), SL_OK) << err.message;
      EXPECT_EQ(o.ops->matmul(dh, 1, &pk.weights[1], nullptr, dq, &err), SL_OK) << err.message;
      r.q[i] = get(dq, 256), r.h[i] = get(dh, H);
      if (i != 2) r.x[i] = get(dx, H);
    }
    for (sl_buffer* b : owned) o.api->free(o.be, b);
    return r;
  };
  const Run r = run(probe);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    const bool inside = ids[i] >= 0 && ids[i] < static_cast<int32_t>(V);
    for (uint32_t c = 0; c < H; ++c)
      ASSERT_EQ(r.x[i][c], inside ? table.values[std::size_t(ids[i]) * H + c] : 0.0f) << "x " << c;
    double ss = 0;
    for (float e : r.x[i]) ss += double(e) * e;
    const double inv = 1.0 / std::sqrt(ss / H + 1e-5);
    for (uint32_t c = 0; c < H; ++c) {
      const double want = double(nw[c]) * r.x[i][c] * inv;
      ASSERT_NEAR(r.h[i][c], want, 1e-5 * (std::abs(want) + 1e-3)) << "h " << c;
    }
    expect_product(wq, r.h[i], {}, r.q[i], dp4a, "q");
  }
  if (!dp4a) return;
  const std::string profile = profile_of(api, "", run);
  EXPECT_EQ(profile_launches(profile, "embed_norm_blocks"), 2) << profile;
  EXPECT_EQ(profile_launches(profile, "embed_rows_quant"), 1) << profile;  // the one read back before its norm
  EXPECT_EQ(profile_launches(profile, "rms_norm"), 1) << profile;
}

// The gate/up/activation launch in work-groups of four row pairs (NVIDIA; cl_matmul.cpp,
// matvec_q4_dp4a_glu_blocks): the last group of each 32-row block to finish writes the block's 15-bit
// form for the down product, counted on an atomic that each launch leaves at zero. Three layers on one
// backend, each with its own input, 256 blocks a launch: every gate, up, activation and down product
// held to float64 arithmetic on what the backend returned — a block whose form a launch did not write
// would leave down reading the layer before's — and bit for bit the results of a backend opened with
// "glu-whole-block" (one group of 1024 a block); on NVIDIA the profile shows which kernel ran.
TEST_F(OpenclVendorPaths, TheActivationFormIsWrittenOnceEveryBlockIsDone) {

  constexpr uint32_t H = 1024, F = 8192, kLayers = 3;
  std::mt19937 rng(53);
  const QuantWeight wg = random_quant(F, H, 4, 64, SL_DTYPE_BF16, rng), wu = random_quant(F, H, 4, 64, SL_DTYPE_BF16, rng),
                    wd = random_quant(H, F, 4, 64, SL_DTYPE_BF16, rng);
  std::normal_distribution<float> nd(0, 1);
  std::vector<std::vector<float>> xs(kLayers, std::vector<float>(H));
  std::vector<float> nw(H);
  for (auto& x : xs)
    for (auto& e : x) e = nd(rng);
  for (auto& e : nw) e = 0.3f * nd(rng);
  struct Layer {
    std::vector<float> h, gate, up, act, down;
  };
  auto run = [&](const Opened& o) {
    std::vector<Layer> layers;
    Packed pk;
    for (const QuantWeight* w : {&wg, &wu, &wd}) pk.add(*w);
    std::vector<sl_buffer*> owned = pk.upload(o);
    auto buf = [&](const std::vector<float>& v) {
      owned.push_back(device_copy(o, v.data(), v.size() * 4));
      return owned.back();
    };
    const sl_weight n = f32_vector(buf(nw), H);
    const sl_weight* gu_w[] = {&pk.weights[0], &pk.weights[1]};
    begin_one_token(o);
    sl_error err{};
    auto get = [&](sl_buffer* b, std::size_t count) {
      std::vector<float> v(count);
      EXPECT_EQ(o.ops->run_recorded(&err), SL_OK) << err.message;
      EXPECT_EQ(o.api->download(o.be, b, 0, v.data(), count * 4, &err), SL_OK) << err.message;
      o.ops->record();
      return v;
    };
    for (uint32_t l = 0; l < kLayers; ++l) {
      sl_buffer *dx = buf(xs[l]), *dh = buf(std::vector<float>(H)), *dg = buf(std::vector<float>(F)),
                *du = buf(std::vector<float>(F)), *dact = buf(std::vector<float>(F)), *ddown = buf(std::vector<float>(H));
      sl_buffer* gu_out[] = {dg, du};
      EXPECT_EQ(o.ops->rms_norm(dx, &n, 0.0f, dh, 1, H, 1e-5f, &err), SL_OK) << err.message;
      EXPECT_EQ(o.ops->matmul_multi(dh, 1, 2, gu_w, nullptr, gu_out, &err), SL_OK) << err.message;
      EXPECT_EQ(o.ops->gated_activation(SL_ACT_SILU, dg, du, dact, F, &err), SL_OK) << err.message;
      EXPECT_EQ(o.ops->matmul(dact, 1, &pk.weights[2], nullptr, ddown, &err), SL_OK) << err.message;
      layers.push_back(Layer{get(dh, H), get(dg, F), get(du, F), get(dact, F), get(ddown, H)});
    }
    for (sl_buffer* b : owned) o.api->free(o.be, b);
    return layers;
  };
  std::vector<Layer> small, whole;
  for (const char* options : {"", "glu-whole-block"}) {
    SCOPED_TRACE(std::string("options '") + options + "'");
    Opened o;
    ASSERT_TRUE(open(api, options, o, why)) << why;
    const std::vector<Layer> layers = run(o);
    ASSERT_EQ(layers.size(), kLayers);
    for (uint32_t l = 0; l < kLayers; ++l) {
      SCOPED_TRACE("layer " + std::to_string(l));
      const Layer& L = layers[l];
      expect_product(wg, L.h, {}, L.gate, dp4a, "gate");
      expect_product(wu, L.h, {}, L.up, dp4a, "up");
      for (uint32_t i = 0; i < F; ++i) {  // OpenCL's exp 3 ulp, its division 2.5, the product 0.5: 8 ulp
        const double g = L.gate[i], want = g / (1.0 + std::exp(-g)) * L.up[i];
        ASSERT_NEAR(L.act[i], want, std::abs(want) * 8 * std::ldexp(1.0, -23) + 1e-30) << "act " << i;
      }
      expect_product(wd, L.act, {}, L.down, dp4a, "down");
    }
    (*options ? whole : small) = layers;
  }
  for (uint32_t l = 0; l < kLayers; ++l)
    for (const auto& [a, b] : {std::pair{&small[l].act, &whole[l].act}, {&small[l].down, &whole[l].down}})
      ASSERT_EQ(0, std::memcmp(a->data(), b->data(), a->size() * 4)) << "layer " << l << ": the two launch shapes differ";
  if (!dp4a) return;
  const std::string one = profile_of(api, "", run), two = profile_of(api, "glu-whole-block", run);
  EXPECT_EQ(profile_launches(one, "matvec_q4_dp4a_glu_blocks"), kLayers) << one;
  EXPECT_EQ(profile_launches(one, "matvec_q4_dp4a_glu"), 0) << one;
  EXPECT_EQ(profile_launches(two, "matvec_q4_dp4a_glu"), kLayers) << two;
  EXPECT_EQ(profile_launches(two, "matvec_q4_dp4a_glu_blocks"), 0) << two;
}

// Downloads from 64 KB up go through pinned memory on a GPU (cl_backend.cpp, pinned_staging; decode's
// logits every token): one of 600 KB + 12 bytes from an offset, then a smaller one reusing the staging,
// arrive bit for bit and write nothing past their end (devices that share host memory read directly).
TEST_F(OpenclVendorPaths, DownloadsThroughPinnedMemoryArriveWhole) {
  const Opened& o = probe;
  std::mt19937 rng(5);
  std::vector<uint32_t> data(200000);
  for (auto& w : data) w = rng();
  sl_buffer* b = device_copy(o, data.data(), data.size() * 4);
  sl_error err{};
  for (const auto& [offset, bytes] : {std::pair<uint64_t, uint64_t>{4000, 600 * 1024 + 12}, {0, 256 * 1024}}) {
    std::vector<uint32_t> got(bytes / 4 + 1, 0);
    ASSERT_EQ(o.api->download(o.be, b, offset, got.data(), bytes, &err), SL_OK) << err.message;
    EXPECT_EQ(std::memcmp(got.data(), reinterpret_cast<const unsigned char*>(data.data()) + offset, bytes), 0) << "offset " << offset;
    EXPECT_EQ(got.back(), 0u) << "bytes past the download were written";
  }
  o.api->free(o.be, b);
}

// NVIDIA's argmax in one launch (the last part of a row to finish folds the row and sets its count
// back to zero) against the portable two launches and the reference: rows of a 128k vocabulary whose
// largest value appears in three parts (the lowest index must win), several launches in a row on
// one backend (a count not set back would show in the next).
TEST_F(OpenclVendorPaths, TheArgmaxInOneLaunchAgreesWithThePortableTwo) {
  if (!dp4a) GTEST_SKIP() << "no NVIDIA fast path on this device";
  Opened portable;
  ASSERT_TRUE(open(api, "portable", portable, why)) << why;
  std::mt19937 rng(11);
  std::normal_distribution<float> n01;
  const uint32_t dim = 128256;
  for (uint32_t rows : {1u, 3u, 1u, 2u}) {
    std::vector<float> x(std::size_t(rows) * dim);
    for (auto& v : x) v = n01(rng);
    std::vector<int32_t> want(rows);
    for (uint32_t r = 0; r < rows; ++r) {
      float* row = x.data() + std::size_t(r) * dim;
      for (uint32_t c : {120000u, 70000u + r, 100000u}) row[c] = 9.0f;
      want[r] = static_cast<int32_t>(std::max_element(row, row + dim) - row);
      ASSERT_EQ(want[r], static_cast<int32_t>(70000 + r));
    }
    for (const Opened* o : {&probe, &portable}) {
      sl_buffer* dx = device_copy(*o, x.data(), x.size() * 4);
      const std::vector<int32_t> init(rows + 1, -5);
      sl_buffer* di = device_copy(*o, init.data(), init.size() * 4);
      sl_error err{};
      ASSERT_EQ(o->ops->argmax(dx, rows, dim, di, 1, &err), SL_OK) << err.message;
      std::vector<int32_t> got(init.size());
      ASSERT_EQ(o->api->download(o->be, di, 0, got.data(), got.size() * 4, &err), SL_OK) << err.message;
      EXPECT_EQ(got[0], -5) << "an id before the offset was written";
      for (uint32_t r = 0; r < rows; ++r) EXPECT_EQ(got[1 + r], want[r]) << (o == &probe ? "fast" : "portable") << ", row " << r;
      o->api->free(o->be, dx);
      o->api->free(o->be, di);
    }
  }
}

// Decode attention writes its output's 15-bit form on NVIDIA (att_write, attention_merge), so the
// output projection right after reads it with dp4a — below the 2²⁴ weights where a product would
// round its input itself. At a short history (one key split: the attention kernel writes the form)
// and a longer one (several splits: the merge writes it), after a prefill, the product is held to
// the float64 product of the attention output the backend returned, within the 15-bit rounding's
// bound; on NVIDIA the profile shows dp4a products and no rounding launch. Elsewhere the float
// kernel runs and is held to the float32 bound. Then two more tokens as one batch: attention writes
// both rows' forms for the dp4a batch product, whose outputs are bit for bit those of the product of a
// copy of the attention output (which rounds x itself: matvec_x_int15_rows only for the copies).
TEST_F(OpenclVendorPaths, TheOutputProjectionReadsTheFormAttentionWrote) {

  constexpr uint32_t kHeads = 8, kKvHeads = 2, kDim = 128, kCols = kHeads * kDim, kPageTokens = 16, kPages = 32;
  std::mt19937 rng(41);
  const QuantWeight wo = random_quant(512, kCols, 4, 64, SL_DTYPE_BF16, rng);
  std::normal_distribution<float> nd(0, 1);
  auto normal = [&](std::size_t n) {
    std::vector<float> v(n);
    for (auto& e : v) e = nd(rng);
    return v;
  };
  struct Depth {
    int32_t history;  // positions before the decoded one
    std::vector<float> q, k, v, q1, k1, v1;
  };
  std::vector<Depth> depths;
  for (int32_t history : {40, 300}) {  // 300: more than two 128-key tiles, so the keys split
    Depth dd{history, normal(size_t(history) * kCols), normal(size_t(history) * kKvHeads * kDim),
             normal(size_t(history) * kKvHeads * kDim), normal(kCols), normal(kKvHeads * kDim), normal(kKvHeads * kDim)};
    depths.push_back(std::move(dd));
  }
  struct Result {
    std::vector<float> att, o, o2, o2_copied;  // o2: the two-token batch's projection
  };
  auto run = [&](const Opened& o) {
    std::vector<Result> results;
    sl_error err{};
    Packed pack;
    pack.add(wo);
    std::vector<sl_buffer*> owned = pack.upload(o);
    for (const Depth& dd : depths) {
      test::F16KvLayout kv(kKvHeads, kDim, kPageTokens, kPages);
      sl_kv_cache* cache = nullptr;
      EXPECT_EQ(o.api->kv_create(o.be, &kv.layout, &cache, &err), SL_OK) << err.message;
      std::vector<int32_t> table(kPages);
      for (uint32_t i = 0; i < kPages; ++i) table[i] = static_cast<int32_t>(i);
      sl_attention_params params{};
      params.struct_size = sizeof(params);
      params.n_heads = kHeads;
      params.n_kv_heads = kKvHeads;
      params.head_dim = kDim;
      params.scale = 1.0f / std::sqrt(static_cast<float>(kDim));
      // The history as one prefill, then one decode token, then two tokens as one batch.
      Result r;
      for (int pass = 0; pass < 3; ++pass) {
        const uint32_t n = pass == 0 ? static_cast<uint32_t>(dd.history) : pass == 1 ? 1 : 2;
        std::vector<int32_t> positions(n), slots(n, 0);
        for (uint32_t i = 0; i < n; ++i) positions[i] = pass == 0 ? static_cast<int32_t>(i) : dd.history + (pass == 1 ? 0 : 1 + int32_t(i));
        sl_batch batch{};
        batch.struct_size = sizeof(batch);
        batch.n_tokens = n;
        batch.positions = positions.data();
        batch.seq_slots = slots.data();
        batch.n_seqs = 1;
        batch.max_pages = kPages;
        batch.page_table = table.data();
        EXPECT_EQ(o.ops->begin_batch(&batch, &err), SL_OK) << err.message;
        o.ops->set_kv_layout(kv.layout);
        // Pass 2's q, k and v: pass 1's and more of the same distribution.
        std::vector<float> q2 = dd.q1, k2 = dd.k1, v2 = dd.v1;
        if (pass == 2) {
          for (float e : normal(kCols)) q2.push_back(e);
          for (float e : normal(kKvHeads * kDim)) k2.push_back(e);
          for (float e : normal(kKvHeads * kDim)) v2.push_back(e);
        }
        const auto& qh = pass == 0 ? dd.q : q2;
        const auto& kh = pass == 0 ? dd.k : k2;
        const auto& vh = pass == 0 ? dd.v : v2;
        sl_buffer* q = device_copy(o, qh.data(), qh.size() * 4);
        sl_buffer* k = device_copy(o, kh.data(), kh.size() * 4);
        sl_buffer* v = device_copy(o, vh.data(), vh.size() * 4);
        const std::vector<float> zeros(qh.size());
        sl_buffer* att = device_copy(o, zeros.data(), zeros.size() * 4);
        sl_buffer* att_copy = device_copy(o, zeros.data(), zeros.size() * 4);
        sl_buffer* out = device_copy(o, zeros.data(), 2 * 512 * 4);
        sl_buffer* out_copied = device_copy(o, zeros.data(), 2 * 512 * 4);
        o.ops->record();  // kv_write, attention and the product as one graph, as in a decode step
        EXPECT_EQ(o.ops->kv_write(cache, 0, k, v, &err), SL_OK) << err.message;
        EXPECT_EQ(o.ops->attention(cache, 0, q, &params, nullptr, att, &err), SL_OK) << err.message;
        if (pass >= 1) {
          EXPECT_EQ(o.ops->matmul(att, n, &pack.weights[0], nullptr, out, &err), SL_OK) << err.message;
        }
        if (pass == 2) {
          EXPECT_EQ(o.ops->copy(att, 0, att_copy, 0, uint64_t(n) * kCols, &err), SL_OK) << err.message;
          EXPECT_EQ(o.ops->matmul(att_copy, n, &pack.weights[0], nullptr, out_copied, &err), SL_OK) << err.message;
        }
        EXPECT_EQ(o.ops->run_recorded(&err), SL_OK) << err.message;
        if (pass == 1) {
          r.att.resize(kCols);
          r.o.resize(512);
          EXPECT_EQ(o.api->download(o.be, att, 0, r.att.data(), kCols * 4, &err), SL_OK) << err.message;
          EXPECT_EQ(o.api->download(o.be, out, 0, r.o.data(), 512 * 4, &err), SL_OK) << err.message;
        }
        if (pass == 2) {
          r.o2.resize(2 * 512);
          r.o2_copied.resize(2 * 512);
          EXPECT_EQ(o.api->download(o.be, out, 0, r.o2.data(), 2 * 512 * 4, &err), SL_OK) << err.message;
          EXPECT_EQ(o.api->download(o.be, out_copied, 0, r.o2_copied.data(), 2 * 512 * 4, &err), SL_OK) << err.message;
        }
        for (sl_buffer* b : {q, k, v, att, att_copy, out, out_copied}) o.api->free(o.be, b);
      }
      results.push_back(std::move(r));
      o.api->kv_destroy(o.be, cache);
    }
    for (sl_buffer* b : owned) o.api->free(o.be, b);
    return results;
  };

  const auto results = run(probe);
  ASSERT_EQ(results.size(), depths.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE("history " + std::to_string(depths[i].history));
    expect_product(wo, results[i].att, {}, results[i].o, dp4a, "the output projection");
    EXPECT_EQ(results[i].o2, results[i].o2_copied) << "the two-token batch's projection";
    EXPECT_NE(std::count(results[i].o2.begin(), results[i].o2.end(), 0.0f), 2 * 512);
  }
  if (!dp4a) return;
  const std::string profile = profile_of(api, "", run);
  EXPECT_EQ(profile_launches(profile, "matvec_q4_dp4a"), 2) << profile;
  EXPECT_EQ(profile_launches(profile, "matvec_x_int15"), 0) << profile;
  EXPECT_EQ(profile_launches(profile, "matvec_q4_batch_dp4a"), 4) << profile;
  EXPECT_EQ(profile_launches(profile, "matvec_x_int15_rows"), 2) << profile;  // the copies' products only
  EXPECT_EQ(profile_launches(profile, "matvec_q4_rows"), 0) << profile;
  EXPECT_EQ(profile_launches(profile, "attention_merge"), 2) << profile;  // the longer history's splits met (one token, two)
}
}  // namespace
}  // namespace sluice
