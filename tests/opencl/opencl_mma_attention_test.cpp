// Prefill attention on tensor cores (kernels_cl/attention_mma.cl, runs of >= 16 consecutive positions
// on sm_80+ NVIDIA devices) against a float64 reference over the same f16 cache rows, and the
// portable kernel (backend option "portable") against the same reference: head_dim 64 and 128, GQA
// groups 1 and 4, runs with and without a history before them, ragged lengths, a sliding window
// with softcap. Skips with a message where the device has no tensor-core path (PoCL here).
#include <algorithm>
#include <cmath>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "plugin/builtin_codecs.h"
#include "plugin/op_calls.h"
#include "plugin/plugin_registry.h"
#include "reference.h"
#include "test_backend_options.h"
#include "util/vec.h"

namespace sluice {
namespace {

constexpr uint32_t kPageTokens = 16;

struct Case {
  uint32_t head_dim, n_heads, n_kv_heads;
  uint32_t history;  // positions written (and attended) before the checked run
  uint32_t length;   // the checked run
  uint32_t window = 0;
  float softcap = 0.0f;
};

// One backend with an f16 KV cache over a scattered page table; writes and attends whole runs.
class Device {
 public:
  Device(const sl_backend_api* api, const char* options, const Case& c, uint32_t n_positions) : api_(api) {
    const std::string all = test::with_test_options(options);  // e.g. tune.mma_att_splits=3 (perf/)
    sl_backend_config cfg{};
    cfg.struct_size = sizeof(cfg);
    cfg.device = "";
    cfg.options = all.c_str();
    sl_error err{};
    if (api->create(&cfg, &be_, &err) != SL_OK) {
      why_ = err.message;
      return;
    }
    uint32_t n_pages = n_positions / kPageTokens + 3;
    if (n_pages % 7 == 0) ++n_pages;  // a stride of 7 then visits every page: positions' pages scattered
    for (uint32_t i = 0; i < n_pages; ++i) pages_.push_back(static_cast<int32_t>((i * 7 + 2) % n_pages));
    sl_kv_layout layout{};
    layout.struct_size = sizeof(layout);
    layout.n_layers = 1;
    layout.n_kv_heads = c.n_kv_heads;
    layout.head_dim = c.head_dim;
    layout.page_tokens = kPageTokens;
    layout.n_pages = n_pages;
    layout.k_api = layout.v_api = builtin_f16_codec();
    sl_error cerr{};
    if (layout.k_api->create(c.head_dim, SL_KV_KEYS, "", &k_codec_, &cerr) != SL_OK ||
        layout.v_api->create(c.head_dim, SL_KV_VALUES, "", &v_codec_, &cerr) != SL_OK) {
      why_ = cerr.message;
      return;
    }
    layout.k_codec = k_codec_;
    layout.v_codec = v_codec_;
    if (api->kv_create(be_, &layout, &cache_, &err) != SL_OK) why_ = err.message;
    ops_ = std::make_unique<OpCalls>(api, be_);
    ops_->set_kv_layout(layout);
  }
  ~Device() {
    ops_.reset();
    if (cache_) api_->kv_destroy(be_, cache_);
    if (k_codec_) builtin_f16_codec()->destroy(k_codec_);
    if (v_codec_) builtin_f16_codec()->destroy(v_codec_);
    if (be_) api_->destroy(be_);
  }
  bool ok() const { return cache_ != nullptr; }
  const std::string& why() const { return why_; }
  sl_backend* raw() const { return be_; }

  // Positions [first, first + n): writes their K/V rows, then returns their attention output.
  std::vector<float> run(const Case& c, uint32_t first, uint32_t n, const float* k, const float* v, const float* q) {
    std::vector<int32_t> positions(n), slots(n, 0);
    for (uint32_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(first + i);
    sl_batch b{};
    b.struct_size = sizeof(b);
    b.n_tokens = n;
    b.positions = positions.data();
    b.seq_slots = slots.data();
    b.n_seqs = 1;
    b.max_pages = static_cast<uint32_t>(pages_.size());
    b.page_table = pages_.data();
    sl_error err{};
    EXPECT_EQ(ops_->begin_batch(&b, &err), SL_OK) << err.message;
    ops_->record();  // the write and the attention as one graph, as in a prefill step
    const std::size_t kv_floats = std::size_t(n) * c.n_kv_heads * c.head_dim, q_floats = std::size_t(n) * c.n_heads * c.head_dim;
    sl_buffer* dk = upload(k, kv_floats);
    sl_buffer* dv = upload(v, kv_floats);
    sl_buffer* dq = upload(q, q_floats);
    sl_buffer* dout = upload(q, q_floats);  // overwritten
    EXPECT_EQ(ops_->kv_write(cache_, 0, dk, dv, &err), SL_OK) << err.message;
    sl_attention_params p{};
    p.struct_size = sizeof(p);
    p.n_heads = c.n_heads;
    p.n_kv_heads = c.n_kv_heads;
    p.head_dim = c.head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    p.window = c.window;
    p.softcap = c.softcap;
    EXPECT_EQ(ops_->attention(cache_, 0, dq, &p, nullptr, dout, &err), SL_OK) << err.message;
    EXPECT_EQ(ops_->run_recorded(&err), SL_OK) << err.message;
    std::vector<float> out(q_floats);
    EXPECT_EQ(api_->download(be_, dout, 0, out.data(), out.size() * 4, &err), SL_OK) << err.message;
    for (sl_buffer* x : {dk, dv, dq, dout}) api_->free(be_, x);
    return out;
  }

 private:
  sl_buffer* upload(const float* data, std::size_t n) {
    sl_buffer* b = nullptr;
    sl_error err{};
    EXPECT_EQ(api_->alloc(be_, n * 4, &b, &err), SL_OK) << err.message;
    EXPECT_EQ(api_->upload(be_, b, 0, data, n * 4, &err), SL_OK) << err.message;
    return b;
  }
  const sl_backend_api* api_;
  sl_backend* be_ = nullptr;
  sl_kv_cache* cache_ = nullptr;
  sl_kvcodec* k_codec_ = nullptr;
  sl_kvcodec* v_codec_ = nullptr;
  std::unique_ptr<OpCalls> ops_;
  std::vector<int32_t> pages_;
  std::string why_;
};

float f16_round(float x) { return cpu::f16_to_f32(cpu::f32_to_f16(x)); }

TEST(OpenclMmaAttention, PrefillRunsMatchAFloat64ReferenceWithinF16Rounding) {
  PluginRegistry registry;
  registry.scan(test::binary_path("lib"));
  const PluginRecord* rec = registry.find(SL_PLUGIN_BACKEND, "opencl");
  if (!rec) GTEST_SKIP() << "OpenCL backend unavailable";
  const auto* api = static_cast<const sl_backend_api*>(rec->descriptor->api);
  {
    Device probe(api, "", Case{64, 1, 1, 0, 1}, 16);
    if (!probe.raw()) GTEST_SKIP() << probe.why();
    sl_device_info info{};
    info.struct_size = sizeof(info);
    sl_error err{};
    ASSERT_EQ(api->get_device_info(probe.raw(), &info, &err), SL_OK);
    if (!(info.caps & SL_CAP_MATRIX))
      GTEST_SKIP() << "no tensor-core attention on " << info.name << " (" << info.vendor
                   << "): it needs inline PTX mma.sync on an sm_80+ NVIDIA device";
  }
  if (test::test_tuning("mma_att") == "0") GTEST_SKIP() << "tune.mma_att=0: the tensor-core attention is off";

  const Case cases[] = {
      {64, 4, 4, 0, 37},          // one partial query block, no history, group 1
      {64, 8, 2, 300, 130},       // group 4, history, three blocks (the last partial)
      {128, 8, 2, 0, 130},        // head_dim 128, group 4
      {128, 4, 4, 300, 37},       // head_dim 128, group 1, history
      {128, 8, 2, 300, 200, 100, 30.0f},  // sliding window (key blocks start mid-history) and softcap
      {64, 4, 1, 64, 64},         // exact 64-position blocks, group 4
  };
  std::mt19937 rng(5);
  std::normal_distribution<float> n01;
  for (const Case& c : cases) {
    SCOPED_TRACE("head_dim " + std::to_string(c.head_dim) + " heads " + std::to_string(c.n_heads) + "/" +
                 std::to_string(c.n_kv_heads) + " history " + std::to_string(c.history) + " length " +
                 std::to_string(c.length) + " window " + std::to_string(c.window));
    const uint32_t D = c.head_dim, total = c.history + c.length, group = c.n_heads / c.n_kv_heads;
    const std::size_t kv_row = std::size_t(c.n_kv_heads) * D, q_row = std::size_t(c.n_heads) * D;
    std::vector<float> k(total * kv_row), v(total * kv_row), q(total * q_row);
    for (auto* x : {&k, &v, &q})
      for (auto& e : *x) e = n01(rng);

    std::vector<std::vector<float>> outs;
    for (const char* options : {"", "portable"}) {
      ::testing::internal::CaptureStderr();
      setenv("SLUICE_OPENCL_PROFILE", "1", 1);
      std::vector<float> out;
      {
        Device dev(api, options, c, total);
        ASSERT_TRUE(dev.ok()) << dev.why();
        if (c.history) dev.run(c, 0, c.history, k.data(), v.data(), q.data());
        out = dev.run(c, c.history, c.length, k.data() + c.history * kv_row, v.data() + c.history * kv_row,
                      q.data() + c.history * q_row);
      }
      unsetenv("SLUICE_OPENCL_PROFILE");
      const std::string profile = ::testing::internal::GetCapturedStderr();
      EXPECT_EQ(profile.find("attention_mma ") != std::string::npos, std::string(options).empty())
          << "the tensor-core kernel runs exactly on the fast backend (options '" << options << "'):\n" << profile;
      outs.push_back(std::move(out));
    }

    // The reference over the cache's rows (f16) in float64. The tensor-core kernel's error, per output
    // value: q rounded to f16 moves each score by at most δ = scale·(2⁻¹¹ + D·2⁻²³)·Σ|q·k| (f32
    // sums included; softcap's tanh does not enlarge it), which moves each normalised weight by a
    // factor within e^(±2δ); p rounded to f16 (2⁻¹¹ a weight, l summing the f32 weights); exp2
    // approximated (2⁻²¹ in numerator and denominator) and f32 sums of n keys (n·2⁻²³): in all
    // |Δo| ≤ Σ w_j|v_j| · (e^(2δ) − 1 + 2⁻¹¹ + 2⁻²⁰ + n·2⁻²³), with δ at the row's largest Σ|q·k|.
    // The portable kernel (f32 throughout): Σ w_j|v_j| · (n + D)·2⁻²⁰.
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    double worst_mma = 0, worst_portable = 0;
    for (uint32_t t = 0; t < c.length; ++t) {
      const int32_t pos = static_cast<int32_t>(c.history + t);
      const int32_t lo = c.window ? std::max<int32_t>(0, pos - static_cast<int32_t>(c.window) + 1) : 0;
      const std::size_t n = static_cast<std::size_t>(pos - lo + 1);
      for (uint32_t h = 0; h < c.n_heads; ++h) {
        const float* qv = q.data() + (c.history + t) * q_row + h * D;
        const uint32_t kvh = h / group;
        std::vector<double> s(n);
        double m = -INFINITY, most = 0;
        for (std::size_t j = 0; j < n; ++j) {
          const float* kr = k.data() + (lo + j) * kv_row + kvh * D;
          double dot = 0, mag = 0;
          for (uint32_t d = 0; d < D; ++d) {
            dot += double(qv[d]) * f16_round(kr[d]);
            mag += std::abs(double(qv[d]) * f16_round(kr[d]));
          }
          s[j] = dot * scale;
          if (c.softcap > 0) s[j] = std::tanh(s[j] / c.softcap) * c.softcap;
          m = std::max(m, s[j]);
          most = std::max(most, mag);
        }
        double l = 0;
        for (auto& e : s) l += (e = std::exp(e - m));
        const double delta = scale * (std::ldexp(1.0, -11) + D * std::ldexp(1.0, -23)) * most;
        const double rel_mma = std::expm1(2 * delta) + std::ldexp(1.0, -11) + std::ldexp(1.0, -20) + n * std::ldexp(1.0, -23);
        const double rel_portable = (n + D) * std::ldexp(1.0, -20);
        for (uint32_t d = 0; d < D; ++d) {
          double o = 0, wv = 0;
          for (std::size_t j = 0; j < n; ++j) {
            const double vj = f16_round(v[(lo + j) * kv_row + kvh * D + d]);
            o += s[j] / l * vj;
            wv += s[j] / l * std::abs(vj);
          }
          const std::size_t at = (std::size_t(t) * c.n_heads + h) * D + d;
          ASSERT_NEAR(outs[0][at], o, wv * rel_mma) << "tensor cores: token " << t << " head " << h << " dim " << d;
          ASSERT_NEAR(outs[1][at], o, wv * rel_portable) << "portable: token " << t << " head " << h << " dim " << d;
          worst_mma = std::max(worst_mma, std::abs(outs[0][at] - o));
          worst_portable = std::max(worst_portable, std::abs(outs[1][at] - o));
        }
      }
    }
    std::printf("head_dim %u heads %u/%u history %u length %u: worst |error| tensor cores %.3g, portable %.3g\n", D,
                c.n_heads, c.n_kv_heads, c.history, c.length, worst_mma, worst_portable);
  }
}

}  // namespace
}  // namespace sluice
