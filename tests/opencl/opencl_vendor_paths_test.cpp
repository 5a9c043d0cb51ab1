// Vendor fast paths (inline PTX on NVIDIA: warp-shuffle reductions in the matvec kernels) against the
// portable kernels they replace, on the same inputs. Runs where the device has a fast path (the GPU
// machine); elsewhere it skips with a message — the portable kernels are checked by the other tests.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "plugin/plugin_registry.h"
#include "reference.h"

namespace sluice {
namespace {

struct Opened {
  const sl_backend_api* api = nullptr;
  sl_backend* be = nullptr;
  ~Opened() {
    if (be) api->destroy(be);
  }
};

bool open(const sl_backend_api* api, const char* options, Opened& out, std::string& why) {
  sl_backend_config cfg{};
  cfg.struct_size = sizeof(cfg);
  cfg.device = "";
  cfg.options = options;
  sl_error err{};
  out.api = api;
  if (api->create(&cfg, &out.be, &err) != SL_OK) {
    why = err.message;
    return false;
  }
  return true;
}

// Runs out = x · Wᵀ for a 4-bit weight and a bf16 weight on one backend.
std::vector<float> products(const Opened& o, const std::vector<uint32_t>& words, const std::vector<uint16_t>& scales,
                            const std::vector<uint16_t>& bf16, const std::vector<float>& x, uint32_t rows, uint32_t cols,
                            uint32_t n_rows) {
  auto buffer = [&](const void* data, std::size_t bytes) {
    sl_buffer* b = nullptr;
    sl_error err{};
    EXPECT_EQ(o.api->alloc(o.be, bytes, &b, &err), SL_OK) << err.message;
    EXPECT_EQ(o.api->upload(o.be, b, 0, data, bytes, &err), SL_OK) << err.message;
    return b;
  };
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
  EXPECT_EQ(o.api->matmul(o.be, dx, n_rows, &q, nullptr, dout, &err), SL_OK) << err.message;
  EXPECT_EQ(o.api->download(o.be, dout, 0, out.data(), zero.size() * 4, &err), SL_OK);
  EXPECT_EQ(o.api->matmul(o.be, dx, n_rows, &h, nullptr, dout, &err), SL_OK) << err.message;
  EXPECT_EQ(o.api->download(o.be, dout, 0, out.data() + zero.size(), zero.size() * 4, &err), SL_OK);
  for (sl_buffer* b : {dw, ds, dh, dx, dout}) o.api->free(o.be, b);
  return out;
}

TEST(OpenclVendorPaths, FastPathMatvecAgreesWithThePortableKernels) {
  PluginRegistry registry;
  registry.scan(test::binary_path("lib"));
  const PluginRecord* rec = registry.find(SL_PLUGIN_BACKEND, "opencl");
  if (!rec) GTEST_SKIP() << "OpenCL backend unavailable";
  const auto* api = static_cast<const sl_backend_api*>(rec->descriptor->api);
  Opened fast, portable;
  std::string why;
  if (!open(api, "", fast, why)) GTEST_SKIP() << why;
  sl_device_info info{};
  info.struct_size = sizeof(info);
  sl_error err{};
  ASSERT_EQ(api->get_device_info(fast.be, &info, &err), SL_OK);
  if (std::string(info.vendor).find("NVIDIA") == std::string::npos)
    GTEST_SKIP() << "no vendor fast path on " << info.name << " (" << info.vendor << "): portable kernels only";
  ASSERT_TRUE(open(api, "portable", portable, why)) << why;

  const uint32_t rows = 515, cols = 4096;
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
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4 * (std::abs(b[i]) + 1.0)) << "value " << i;
  }
}

}  // namespace
}  // namespace sluice
