// The OpenCL backend's fused attention (kernels_cl/attention_fused.cl: keys scored and values
// accumulated in the turbo codecs' rotated domain) against the CPU backend's fused hooks and against
// the OpenCL generic kernel (backend option tune.fused_attention=0), on the same stored rows: prefill
// and decode, GQA, head sizes with one and several rotation blocks, with and without a recent
// window, a fused K codec beside a non-fused V codec; and the compressing codecs on a layer of its
// own widths in a per-layer cache, against the CPU. Skipped where no OpenCL device exists.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "plugin/backend_handle.h"
#include "plugin/op_calls.h"
#include "codec_plugin.h"
#include "plugin/plugin_registry.h"
#include "reference.h"
#include "test_backend_options.h"

namespace sluice {
namespace {

constexpr uint32_t kPageTokens = 16;

struct Case {
  const char* k_codec;
  const char* v_codec;
  uint32_t head_dim;
  uint32_t n_heads, n_kv_heads;
  uint32_t recent_window;
  uint32_t length = 70;  // positions prefilled before the decoded one
  // Against the CPU too: the device's and the host's encoders may round a boundary case apart
  // (kvcodec_opencl_source_test), and over hundreds of rows one such row shows in the output; a long
  // history is checked between the fused and the generic kernel, which read the same device rows.
  bool vs_cpu = true;
};

using Codec = test::PluginCodec;

// One backend with one KV cache: writes a sequence's K/V, then runs attention for given positions.
class Runner {
 public:
  Runner(const PluginRegistry& reg, const char* backend, const std::string& options, const sl_kv_layout& layout) {
    const auto* rec = reg.find(SL_PLUGIN_BACKEND, backend);
    if (!rec) {
      why_ = std::string("no ") + backend + " backend";
      return;
    }
    auto be = BackendHandle::open(static_cast<const sl_backend_api*>(rec->descriptor->api), backend, "", 2, options);
    if (!be) {
      why_ = be.message();
      return;
    }
    be_ = std::move(*be);
    sl_error err{};
    if (be_->api()->kv_create(be_->raw(), &layout, &cache_, &err) != SL_OK) why_ = err.message;
    ops_ = std::make_unique<OpCalls>(*be_);
    ops_->set_kv_layout(layout);
  }
  ~Runner() {
    ops_.reset();
    if (cache_) be_->api()->kv_destroy(be_->raw(), cache_);
  }
  const std::string& why_not() const { return why_; }
  bool ok() const { return cache_ != nullptr; }

  void begin(const std::vector<int32_t>& positions, const std::vector<int32_t>& pages, const std::vector<int32_t>& recent) {
    const std::vector<int32_t> slots(positions.size(), 0);
    sl_batch b{};
    b.struct_size = sizeof(b);
    b.n_tokens = static_cast<uint32_t>(positions.size());
    b.positions = positions.data();
    b.seq_slots = slots.data();
    b.n_seqs = 1;
    b.max_pages = static_cast<uint32_t>(pages.size());
    b.page_table = pages.data();
    b.recent_table = recent.empty() ? nullptr : recent.data();
    sl_error err{};
    ASSERT_EQ(ops_->begin_batch(&b, &err), SL_OK) << err.message;
  }
  // The layer later writes and attends go to (0 unless set).
  void use_layer(uint32_t layer, uint32_t v_dim) {
    layer_ = layer;
    v_dim_ = v_dim;
  }
  void write(const std::vector<float>& k, const std::vector<float>& v) {
    auto dk = upload(k), dv = upload(v);
    sl_error err{};
    ASSERT_EQ(ops_->kv_write(cache_, layer_, dk.get(), dv.get(), &err), SL_OK) << err.message;
  }
  std::vector<float> attend(const Case& c, const std::vector<float>& q) {
    auto dq = upload(q);
    const std::size_t out_values = v_dim_ ? q.size() / c.head_dim * v_dim_ : q.size();
    auto out = be_->alloc(out_values * 4);
    EXPECT_TRUE(out) << out.message();
    if (!out) return {};
    sl_attention_params p{};
    p.struct_size = sizeof(p);
    p.n_heads = c.n_heads;
    p.n_kv_heads = c.n_kv_heads;
    p.head_dim = c.head_dim;
    p.v_head_dim = v_dim_;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    sl_error err{};
    EXPECT_EQ(ops_->attention(cache_, layer_, dq.get(), &p, nullptr, out->get(), &err), SL_OK) << err.message;
    std::vector<float> got(out_values);
    EXPECT_TRUE(be_->download(*out, 0, got.data(), got.size() * 4));
    return got;
  }

 private:
  Buffer upload(const std::vector<float>& v) {
    auto b = be_->alloc(v.size() * 4);
    EXPECT_TRUE(b) << b.message();
    EXPECT_TRUE(be_->upload(*b, 0, v.data(), v.size() * 4));
    return std::move(*b);
  }
  std::unique_ptr<BackendHandle> be_;
  std::unique_ptr<OpCalls> ops_;
  sl_kv_cache* cache_ = nullptr;
  std::string why_;
  uint32_t layer_ = 0, v_dim_ = 0;  // v_dim_ 0: as wide as K
};

// Runs prefill of `length` positions and decode of one more through a backend; returns both outputs.
std::vector<float> run_case(const PluginRegistry& reg, const char* backend, const std::string& options, const Case& c,
                            const Codec& k, const Codec& v, bool* skipped, std::string* why) {
  const uint32_t length = c.length;
  std::vector<int32_t> pages = {4, 1, 6, 0, 3}, recent;
  uint32_t n_pages = 8;
  if (length >= pages.size() * kPageTokens) {  // a long history (no recent window): pages scattered by a stride
    n_pages = (length + 1 + kPageTokens - 1) / kPageTokens + 2;
    if (n_pages % 7 == 0) ++n_pages;
    pages.resize(n_pages);
    for (uint32_t i = 0; i < n_pages; ++i) pages[i] = static_cast<int32_t>((i * 7) % n_pages);
  }
  sl_kv_layout layout{};
  layout.struct_size = sizeof(layout);
  layout.n_layers = 1;
  layout.n_kv_heads = c.n_kv_heads;
  layout.head_dim = c.head_dim;
  layout.page_tokens = kPageTokens;
  layout.n_pages = n_pages;
  layout.k_api = k.api();
  layout.k_codec = k.get();
  layout.v_api = v.api();
  layout.v_codec = v.get();
  if (c.recent_window) {
    layout.recent_window = c.recent_window;
    layout.n_recent_pages = 6;
    recent = {-1, -1, 2, 5, 0};  // the window's pages (and one before it); the oldest compressed only
  }
  Runner r(reg, backend, options, layout);
  if (!r.ok()) {
    *skipped = true;
    *why = r.why_not();
    return {};
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> n01;
  auto random = [&](std::size_t n) {
    std::vector<float> x(n);
    for (auto& e : x) e = n01(rng);
    return x;
  };
  const std::size_t kv_row = std::size_t(c.n_kv_heads) * c.head_dim, q_row = std::size_t(c.n_heads) * c.head_dim;
  std::vector<int32_t> prefill(length);
  for (uint32_t i = 0; i < length; ++i) prefill[i] = static_cast<int32_t>(i);
  const auto k_all = random((length + 1) * kv_row), v_all = random((length + 1) * kv_row);
  std::vector<float> out;
  r.begin(prefill, pages, recent);
  r.write({k_all.begin(), k_all.begin() + length * kv_row}, {v_all.begin(), v_all.begin() + length * kv_row});
  out = r.attend(c, random(length * q_row));
  r.begin({static_cast<int32_t>(length)}, pages, recent);
  r.write({k_all.begin() + length * kv_row, k_all.end()}, {v_all.begin() + length * kv_row, v_all.end()});
  const auto decode = r.attend(c, random(q_row));
  out.insert(out.end(), decode.begin(), decode.end());
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i]));
    if (e > worst) {
      worst = e;
      at = i;
    }
  }
  // Float32 sums in different orders over up to 601 keys: a few ulps of the largest terms.
  EXPECT_LT(worst, 2e-5) << what << ": worst at value " << at << " (" << got[at] << " vs " << want[at] << ")";
}

TEST(OpenclFusedAttention, MatchesTheCpuFusedHooksAndTheGenericKernel) {
  // The prefill runs stay on the kernels under test: on NVIDIA they would otherwise go to the
  // tensor-core attention (f16 inputs, opencl_mma_attention_test), beyond this test's f32 bound.
  const std::string opencl = test::with_test_options("tune.mma_att=0");
  PluginRegistry reg;
  reg.scan(test::binary_path("lib"));
  const Case cases[] = {
      {"turbo3", "turbo3", 64, 8, 2, 0},    // one rotation block, GQA group 4; values at one rotation
      {"turbo4", "turbo3", 128, 4, 1, 16},  // the --turbo-kv pair with the recent window
      {"turbo4", "turbo3:rot=16", 128, 8, 2, 0},  // values in 16 rotation slots (local accumulators)
      {"turbo3", "turbo4:rot=4", 96, 6, 3, 20},   // several blocks (64 + 32), window across pages
      {"turbo2", "turbo2:rot=2", 80, 2, 2, 0},    // 64 + 16
      {"turbo4", "turbo2", 80, 4, 2, 0},          // values by octets in lanes of 10 (60 of 64 work-items)
      {"turbo4", "q8", 64, 4, 2, 16},       // fused keys, values through the generic loads
      {"q8", "turbo3", 64, 4, 2, 0},        // generic keys, fused values
      {"turbo3", "turbo3", 128, 4, 1, 0, 600, false},  // decode split across work-groups and merged
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.k_codec) + "/" + c.v_codec + " head_dim " + std::to_string(c.head_dim) + " window " +
                 std::to_string(c.recent_window));
    Codec k(reg, c.k_codec, c.head_dim, SL_KV_KEYS), v(reg, c.v_codec, c.head_dim, SL_KV_VALUES);
    ASSERT_TRUE(k.get() && v.get()) << "codec plugins missing from " << test::binary_path("lib");
    bool skipped = false;
    std::string why;
    std::vector<float> cpu;
    if (c.vs_cpu) {
      cpu = run_case(reg, "cpu", "", c, k, v, &skipped, &why);
      ASSERT_FALSE(skipped) << why;
    }

    ::testing::internal::CaptureStderr();
    setenv("SLUICE_OPENCL_PROFILE", "1", 1);
    const auto fused = run_case(reg, "opencl", opencl, c, k, v, &skipped, &why);
    unsetenv("SLUICE_OPENCL_PROFILE");
    const std::string profile = ::testing::internal::GetCapturedStderr();
    if (skipped) GTEST_SKIP() << "OpenCL unavailable: " << why;
    EXPECT_NE(profile.find("attention_fused "), std::string::npos) << "the fused kernel did not run:\n" << profile;
    const bool fused_keys = std::string(c.k_codec).rfind("turbo", 0) == 0;
    EXPECT_EQ(profile.find("attention_fused_queries") != std::string::npos, fused_keys)
        << "the query areas are built once per token exactly when the keys are fused:\n" << profile;
    if (c.vs_cpu) expect_close(fused, cpu, "OpenCL fused vs CPU");

    const auto generic = run_case(reg, "opencl", opencl + " tune.fused_attention=0", c, k, v, &skipped, &why);
    expect_close(generic, fused, "OpenCL generic vs fused");
    // The query areas split over 3 work-groups each (a share of the rotations each; on this device
    // the default may be one): the very same areas, so the very same outputs.
    if (fused_keys) {
      const auto parts = run_case(reg, "opencl", opencl + " tune.att_query_parts=3", c, k, v, &skipped, &why);
      EXPECT_EQ(parts, fused) << "query areas prepared in 3 parts";
    }
  }
}

// The compressing codecs on a layer of their own widths beside the layout's (2 KV heads of 64, q8):
// each layer's codecs made for its widths, its program built with them, prefill and a decoded token
// against the CPU backend. A layer with K as wide as V and turbo codecs takes the fused kernel at its
// own width (cl_kv_geometry.h; Gemma 4's 512-wide full layers), checked against the generic kernel
// too; K wider than V takes the generic kernels and the codecs' loads.
TEST(OpenclPerLayerCodecs, CompressingCodecsOnLayersOfTheirOwnWidthsMatchTheCpu) {
  PluginRegistry reg;
  reg.scan(test::binary_path("lib"));
  struct LayerCase {
    const char* k_codec;
    const char* v_codec;
    uint32_t k_dim, v_dim, n_kv_heads;
  };
  const LayerCase cases[] = {
      {"q8", "q8", 128, 128, 1},          // a wider head
      {"turbo3", "turbo3", 128, 128, 1},  // a wider head, turbo's rotation blocks of its width
      {"turbo3", "turbo3", 512, 512, 1},  // Gemma 4's full layers: 16 rotations of 512 in the query area
      {"q8", "q8", 96, 64, 2},            // K wider than V
      {"turbo4", "turbo3", 96, 64, 2},
  };
  const std::string opencl = test::with_test_options("tune.mma_att=0");
  for (const auto& lc : cases) {
    SCOPED_TRACE(std::string(lc.k_codec) + "/" + lc.v_codec + " K " + std::to_string(lc.k_dim) + " V " + std::to_string(lc.v_dim));
    Codec k64(reg, "q8", 64, SL_KV_KEYS), v64(reg, "q8", 64, SL_KV_VALUES);
    Codec k(reg, lc.k_codec, lc.k_dim, SL_KV_KEYS), v(reg, lc.v_codec, lc.v_dim, SL_KV_VALUES);
    ASSERT_TRUE(k.get() && v.get() && k64.get() && v64.get()) << "codec plugins missing from " << test::binary_path("lib");
    sl_kv_layer layers[2]{};
    for (auto& l : layers) {
      l.struct_size = sizeof(l);
      l.kind = SL_KV_FULL;
    }
    layers[0].n_kv_heads = 2;
    layers[0].k_head_dim = layers[0].v_head_dim = 64;
    layers[0].k_api = k64.api();
    layers[0].k_codec = k64.get();
    layers[0].v_api = v64.api();
    layers[0].v_codec = v64.get();
    layers[1].n_kv_heads = lc.n_kv_heads;
    layers[1].k_head_dim = lc.k_dim;
    layers[1].v_head_dim = lc.v_dim;
    layers[1].k_api = k.api();
    layers[1].k_codec = k.get();
    layers[1].v_api = v.api();
    layers[1].v_codec = v.get();
    sl_kv_layout layout{};
    layout.struct_size = sizeof(layout);
    layout.n_layers = 2;
    layout.n_kv_heads = 2;
    layout.head_dim = 64;
    layout.page_tokens = kPageTokens;
    layout.n_pages = 8;
    layout.k_api = layers[0].k_api;
    layout.k_codec = layers[0].k_codec;
    layout.v_api = layers[0].v_api;
    layout.v_codec = layers[0].v_codec;
    layout.layers = layers;
    const Case c{lc.k_codec, lc.v_codec, lc.k_dim, 4, lc.n_kv_heads, 0, 45};
    auto run = [&](const char* backend, const std::string& options, std::string* why) -> std::vector<float> {
      Runner r(reg, backend, options, layout);
      if (!r.ok()) {
        *why = r.why_not();
        return {};
      }
      r.use_layer(1, lc.v_dim);
      std::mt19937 rng(11);
      std::normal_distribution<float> n01;
      auto random = [&](std::size_t n) {
        std::vector<float> x(n);
        for (auto& e : x) e = n01(rng);
        return x;
      };
      const std::vector<int32_t> pages = {4, 1, 6, 0};
      std::vector<int32_t> prefill(c.length);
      for (uint32_t i = 0; i < c.length; ++i) prefill[i] = static_cast<int32_t>(i);
      r.begin(prefill, pages, {});
      r.write(random(std::size_t(c.length) * lc.n_kv_heads * lc.k_dim), random(std::size_t(c.length) * lc.n_kv_heads * lc.v_dim));
      auto out = r.attend(c, random(std::size_t(c.length) * c.n_heads * lc.k_dim));
      r.begin({static_cast<int32_t>(c.length)}, pages, {});
      r.write(random(std::size_t(lc.n_kv_heads) * lc.k_dim), random(std::size_t(lc.n_kv_heads) * lc.v_dim));
      const auto decode = r.attend(c, random(std::size_t(c.n_heads) * lc.k_dim));
      out.insert(out.end(), decode.begin(), decode.end());
      return out;
    };
    std::string why;
    const auto cpu = run("cpu", "", &why);
    ASSERT_FALSE(cpu.empty()) << why;
    ::testing::internal::CaptureStderr();
    setenv("SLUICE_OPENCL_PROFILE", "1", 1);
    const auto device = run("opencl", opencl, &why);
    unsetenv("SLUICE_OPENCL_PROFILE");
    const std::string printed = ::testing::internal::GetCapturedStderr();
    if (device.empty()) GTEST_SKIP() << "OpenCL unavailable: " << why;
    EXPECT_EQ(printed.find("stays on the host"), std::string::npos) << "the layer's codecs should run on the device:\n" << printed;
    expect_close(device, cpu, "OpenCL vs CPU");
    const bool fused = lc.k_dim == lc.v_dim && std::string(lc.k_codec).rfind("turbo", 0) == 0;
    EXPECT_EQ(printed.find("attention_fused ") != std::string::npos, fused) << "the fused kernel where K is as wide as V:\n" << printed;
    if (fused) expect_close(run("opencl", opencl + " tune.fused_attention=0", &why), device, "OpenCL generic vs fused");
  }
}

}  // namespace
}  // namespace sluice
