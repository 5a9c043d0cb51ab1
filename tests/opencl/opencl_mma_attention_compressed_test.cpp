// Prefill attention on tensor cores over compressed caches with a recent window (cl_attention.cpp:
// the codec rows gathered as f16 — turbo's by whole rows, kv_gather_f16_rows — attention_mma over the
// keys below each query's exact ones, attention_recent_partial over the exact copies, merged) against
// the portable kernels (tune.mma_att=0) on the same device rows. Skips with a message where the device
// has no tensor-core path (PoCL here).
//
// The bound between the two: the tensor-core path rounds q, the gathered keys and values and the
// weights to f16, the portable kernel sums in f32. Per output value, with k̂/v̂ the rows the query
// reads (codec keys below its first exact key, f16 copies from it) and w their softmax weights:
// |Δo| ≤ Σ w_j|v̂_j| · (e^(2δ) − 1 + 2⁻¹⁰ + 2⁻²⁰ + n·2⁻²³ + (n + D)·2⁻²⁰), δ = scale·(2⁻¹⁰ + D·2⁻²³)·max_j Σ|q·k̂_j|
// (opencl_mma_attention_test's rule with the keys' and values' own f16 rounding added, plus the
// portable kernel's f32 sums). The magnitudes come from the host codec's rows of the same inputs: the
// device encoder may round a boundary case apart from the host's (kvcodec_opencl_source_test), which
// moves a magnitude by one codebook step of one coordinate — nothing the bound notices — but the
// comparison itself is between the device's two paths over the device's rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codec_plugin.h"
#include "plugin/backend_handle.h"
#include "plugin/op_calls.h"
#include "plugin/plugin_registry.h"
#include "reference.h"
#include "test_backend_options.h"
#include "util/recent_window.h"
#include "util/vec.h"

namespace sluice {
namespace {

constexpr uint32_t kPageTokens = 16;

struct Case {
  const char* k_codec;
  const char* v_codec;
  uint32_t head_dim, n_heads, n_kv_heads;
  uint32_t history, length;   // positions written before the checked run, and the run
  uint32_t recent_window;
  uint32_t pages_without_copies;  // the first pages keep no exact copies (a reused prefix)
};

using Codec = test::PluginCodec;

struct Inputs {
  std::vector<float> k, v, q;  // [position][head][dim]
  std::vector<int32_t> pages, recent;
};

// Writes the history, then writes and attends the run through one backend; the run's outputs.
std::vector<float> run_case(const PluginRegistry& reg, const std::string& options, const Case& c, const Codec& kc,
                            const Codec& vc, const Inputs& in, std::string* why) {
  const auto* rec = reg.find(SL_PLUGIN_BACKEND, "opencl");
  if (!rec) {
    *why = "no OpenCL backend";
    return {};
  }
  auto be = BackendHandle::open(static_cast<const sl_backend_api*>(rec->descriptor->api), "opencl", "", 2, options);
  if (!be) {
    *why = be.message();
    return {};
  }
  sl_kv_layout layout{};
  layout.struct_size = sizeof(layout);
  layout.n_layers = 1;
  layout.n_kv_heads = c.n_kv_heads;
  layout.head_dim = c.head_dim;
  layout.page_tokens = kPageTokens;
  layout.n_pages = static_cast<uint32_t>(in.pages.size());
  layout.k_api = kc.api();
  layout.k_codec = kc.get();
  layout.v_api = vc.api();
  layout.v_codec = vc.get();
  layout.recent_window = c.recent_window;
  layout.n_recent_pages = static_cast<uint32_t>(in.pages.size());
  sl_kv_cache* cache = nullptr;
  sl_error err{};
  if ((*be)->api()->kv_create((*be)->raw(), &layout, &cache, &err) != SL_OK) {
    *why = err.message;
    return {};
  }
  auto ops_owner = std::make_unique<OpCalls>(**be);
  OpCalls& ops = *ops_owner;
  ops.set_kv_layout(layout);
  const std::size_t kv_row = std::size_t(c.n_kv_heads) * c.head_dim, q_row = std::size_t(c.n_heads) * c.head_dim;
  auto upload = [&](const float* data, std::size_t n) {
    auto b = (*be)->alloc(n * 4);
    EXPECT_TRUE(b) << b.message();
    EXPECT_TRUE((*be)->upload(*b, 0, data, n * 4));
    return std::move(*b);
  };
  std::vector<float> out;
  for (const auto& [first, n] : {std::pair<uint32_t, uint32_t>{0, c.history}, {c.history, c.length}}) {
    std::vector<int32_t> positions(n), slots(n, 0);
    for (uint32_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(first + i);
    sl_batch b{};
    b.struct_size = sizeof(b);
    b.n_tokens = n;
    b.positions = positions.data();
    b.seq_slots = slots.data();
    b.n_seqs = 1;
    b.max_pages = static_cast<uint32_t>(in.pages.size());
    b.page_table = in.pages.data();
    b.recent_table = in.recent.data();
    EXPECT_EQ(ops.begin_batch(&b, &err), SL_OK) << err.message;
    auto dk = upload(in.k.data() + first * kv_row, n * kv_row), dv = upload(in.v.data() + first * kv_row, n * kv_row);
    auto dq = upload(in.q.data() + first * q_row, n * q_row), dout = upload(in.q.data() + first * q_row, n * q_row);
    EXPECT_EQ(ops.kv_write(cache, 0, dk.get(), dv.get(), &err), SL_OK) << err.message;
    sl_attention_params p{};
    p.struct_size = sizeof(p);
    p.n_heads = c.n_heads;
    p.n_kv_heads = c.n_kv_heads;
    p.head_dim = c.head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    EXPECT_EQ(ops.attention(cache, 0, dq.get(), &p, nullptr, dout.get(), &err), SL_OK) << err.message;
    out.resize(n * q_row);
    EXPECT_TRUE((*be)->download(dout, 0, out.data(), out.size() * 4));
  }
  ops_owner.reset();
  (*be)->api()->kv_destroy((*be)->raw(), cache);
  return out;
}

TEST(OpenclMmaAttention, CompressedCachesWithARecentWindowMatchThePortableKernels) {
  PluginRegistry reg;
  reg.scan(test::binary_path("lib"));
  const auto* rec = reg.find(SL_PLUGIN_BACKEND, "opencl");
  if (!rec) GTEST_SKIP() << "OpenCL backend unavailable";
  {
    auto probe = BackendHandle::open(static_cast<const sl_backend_api*>(rec->descriptor->api), "opencl", "", 2,
                                     test::with_test_options(""));
    if (!probe) GTEST_SKIP() << probe.message();
    sl_device_info info{};
    info.struct_size = sizeof(info);
    sl_error err{};
    ASSERT_EQ((*probe)->api()->get_device_info((*probe)->raw(), &info, &err), SL_OK);
    if (!(info.caps & SL_CAP_MATRIX))
      GTEST_SKIP() << "no tensor-core attention on " << info.name << " (" << info.vendor
                   << "): it needs inline PTX mma.sync on an sm_80+ NVIDIA device";
  }
  if (test::test_tuning("mma_att") == "0") GTEST_SKIP() << "tune.mma_att=0: the tensor-core attention is off";

  const Case cases[] = {
      {"turbo3", "turbo3", 128, 8, 2, 200, 130, 16, 0},  // the --turbo-kv default shape: window 16, GQA 4
      {"turbo4", "turbo3", 128, 4, 4, 64, 70, 16, 0},    // the --turbo-kv pair, group 1
      {"turbo3", "turbo3:rot=16", 64, 8, 2, 90, 40, 24, 0},  // several rotations; a window over two pages
      {"turbo3", "turbo3", 128, 8, 2, 48, 64, 16, 3},    // a reused prefix: no copies below position 48
      {"q8", "q8", 128, 8, 2, 100, 100, 100, 0},         // a window past the run's first queries' keys
      {"turbo4", "q8", 96, 6, 3, 30, 50, 16, 0},         // turbo keys in two blocks, generic values
  };
  std::mt19937 rng(13);
  std::normal_distribution<float> n01;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.k_codec) + "/" + c.v_codec + " head_dim " + std::to_string(c.head_dim) + " heads " +
                 std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) + " history " + std::to_string(c.history) +
                 " length " + std::to_string(c.length) + " recent " + std::to_string(c.recent_window));
    Codec kc(reg, c.k_codec, c.head_dim, SL_KV_KEYS), vc(reg, c.v_codec, c.head_dim, SL_KV_VALUES);
    ASSERT_TRUE(kc.get() && vc.get()) << "codec plugins missing from " << test::binary_path("lib");
    const uint32_t D = c.head_dim, total = c.history + c.length, group = c.n_heads / c.n_kv_heads;
    const std::size_t kv_row = std::size_t(c.n_kv_heads) * D, q_row = std::size_t(c.n_heads) * D;
    Inputs in;
    in.k.resize(total * kv_row);
    in.v.resize(total * kv_row);
    in.q.resize(total * q_row);
    for (auto* x : {&in.k, &in.v, &in.q})
      for (auto& e : *x) e = n01(rng);
    uint32_t n_pages = total / kPageTokens + 2;
    if (n_pages % 7 == 0) ++n_pages;
    for (uint32_t i = 0; i < n_pages; ++i) in.pages.push_back(static_cast<int32_t>((i * 7 + 3) % n_pages));
    for (uint32_t i = 0; i < n_pages; ++i) in.recent.push_back(i < c.pages_without_copies ? -1 : static_cast<int32_t>(n_pages - 1 - i));

    std::vector<std::vector<float>> outs;
    for (const char* tuning : {"", "tune.mma_att=0"}) {
      ::testing::internal::CaptureStderr();
      setenv("SLUICE_OPENCL_PROFILE", "1", 1);
      std::string why;
      auto out = run_case(reg, test::with_test_options(tuning), c, kc, vc, in, &why);
      unsetenv("SLUICE_OPENCL_PROFILE");
      const std::string profile = ::testing::internal::GetCapturedStderr();
      ASSERT_FALSE(out.empty()) << why;
      const bool mma = std::string(tuning).empty();
      EXPECT_EQ(profile.find("attention_mma ") != std::string::npos, mma) << "tensor cores exactly without tune.mma_att=0:\n" << profile;
      EXPECT_EQ(profile.find("attention_recent_partial") != std::string::npos, mma) << profile;
      if (mma) {
        EXPECT_EQ(profile.find("kv_gather_f16_rows") != std::string::npos, std::string(c.k_codec).rfind("turbo", 0) == 0)
            << "turbo rows are gathered a work-group of rows at a time:\n" << profile;
      }
      outs.push_back(std::move(out));
    }

    // The rows each query reads, as the host codec reconstructs them, for the bound's magnitudes.
    const auto k_hat = kc.round_trip(in.k, D), v_hat = vc.round_trip(in.v, D);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    double worst = 0;
    for (uint32_t t = 0; t < c.length; ++t) {
      const int32_t pos = static_cast<int32_t>(c.history + t);
      const int32_t exact = recent_exact_from(in.recent.data(), c.recent_window, kPageTokens, pos, 0);
      const std::size_t n = static_cast<std::size_t>(pos + 1);
      auto key = [&](std::size_t j, uint32_t kvh, uint32_t d) {
        const std::size_t at = j * kv_row + kvh * D + d;
        return static_cast<int32_t>(j) >= exact ? cpu::f16_to_f32(cpu::f32_to_f16(in.k[at])) : k_hat[at];
      };
      auto value = [&](std::size_t j, uint32_t kvh, uint32_t d) {
        const std::size_t at = j * kv_row + kvh * D + d;
        return static_cast<int32_t>(j) >= exact ? cpu::f16_to_f32(cpu::f32_to_f16(in.v[at])) : v_hat[at];
      };
      for (uint32_t h = 0; h < c.n_heads; ++h) {
        const float* qv = in.q.data() + pos * q_row + h * D;
        const uint32_t kvh = h / group;
        std::vector<double> s(n);
        double m = -INFINITY, most = 0;
        for (std::size_t j = 0; j < n; ++j) {
          double dot = 0, mag = 0;
          for (uint32_t d = 0; d < D; ++d) {
            dot += double(qv[d]) * key(j, kvh, d);
            mag += std::abs(double(qv[d]) * key(j, kvh, d));
          }
          s[j] = dot * scale;
          m = std::max(m, s[j]);
          most = std::max(most, mag);
        }
        double l = 0;
        for (auto& e : s) l += (e = std::exp(e - m));
        const double delta = scale * (std::ldexp(1.0, -10) + D * std::ldexp(1.0, -23)) * most;
        const double rel = std::expm1(2 * delta) + std::ldexp(1.0, -10) + std::ldexp(1.0, -20) + n * std::ldexp(1.0, -23) +
                           (n + D) * std::ldexp(1.0, -20);
        for (uint32_t d = 0; d < D; ++d) {
          double wv = 0;
          for (std::size_t j = 0; j < n; ++j) wv += s[j] / l * std::abs(value(j, kvh, d));
          const std::size_t at = (std::size_t(t) * c.n_heads + h) * D + d;
          ASSERT_NEAR(outs[0][at], outs[1][at], wv * rel) << "token " << t << " head " << h << " dim " << d;
          worst = std::max(worst, double(std::abs(outs[0][at] - outs[1][at])));
        }
      }
    }
    std::printf("%s/%s head_dim %u recent %u: worst |tensor cores - portable| %.3g\n", c.k_codec, c.v_codec, D,
                c.recent_window, worst);
  }
}

}  // namespace
}  // namespace sluice
