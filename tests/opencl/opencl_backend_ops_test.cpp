// The backend op suite (tests/backend) run against the OpenCL plugin from the build tree, on the
// plugin's best device (PoCL on a machine without a GPU). Skips with the probe's reason when no
// OpenCL device is present. Below it, the OpenCL backend's own joins of ops it is asked for in order.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend_fixture.h"
#include "f16_kv_layout.h"
#include "plugin/op_calls.h"
#include "reference.h"
#include "test_backend_options.h"

namespace sluice::test {

std::vector<BackendUnderTest> backends_under_test() {
  return {BackendUnderTest{"opencl", binary_path("lib"), "", test_backend_options()}};
}

namespace {

// An OpenCL backend of its own, opened with `options` (and the test's: test_backend_options.h) and,
// when profiled, SLUICE_OPENCL_PROFILE=1; close() destroys it (buffers and cache first) and returns
// what it printed then — the profile.
class Device {
 public:
  bool open(const char* options, bool profiled, std::string& why) {
    const std::string all = with_test_options(options);
    registry_.scan(binary_path("lib"));
    const PluginRecord* rec = registry_.find(SL_PLUGIN_BACKEND, "opencl");
    if (!rec) {
      why = "no OpenCL backend plugin (or no OpenCL device) in " + binary_path("lib").string();
      return false;
    }
    api_ = static_cast<const sl_backend_api*>(rec->descriptor->api);
    sl_backend_config cfg{};
    cfg.struct_size = sizeof(cfg);
    cfg.device = "";
    cfg.options = all.c_str();
    sl_error err{};
    if (profiled) setenv("SLUICE_OPENCL_PROFILE", "1", 1);
    const sl_status s = api_->create(&cfg, &be_, &err);
    if (profiled) unsetenv("SLUICE_OPENCL_PROFILE");
    if (s != SL_OK) why = err.message;
    if (s == SL_OK) ops_ = std::make_unique<OpCalls>(api_, be_);
    return s == SL_OK;
  }
  ~Device() { close(); }
  std::string close() {
    if (!be_) return "";
    testing::internal::CaptureStderr();
    ops_.reset();
    for (sl_buffer* b : buffers_) api_->free(be_, b);
    buffers_.clear();
    if (cache_) api_->kv_destroy(be_, cache_);
    cache_ = nullptr;
    api_->destroy(be_);
    be_ = nullptr;
    return testing::internal::GetCapturedStderr();
  }
  const sl_backend_api* api() const { return api_; }
  sl_backend* be() const { return be_; }
  sl_kv_cache*& cache() { return cache_; }
  // The ops (plugin/op_calls.h): those after begin() record into one graph, run at the next read.
  OpCalls& ops() { return *ops_; }
  void begin(const sl_batch& batch, const sl_kv_layout* kv = nullptr) {
    sl_error err{};
    EXPECT_EQ(ops_->run_recorded(&err), SL_OK) << err.message;
    EXPECT_EQ(ops_->begin_batch(&batch, &err), SL_OK) << err.message;
    if (kv) ops_->set_kv_layout(*kv);
    ops_->record();
  }
  void run() {
    sl_error err{};
    EXPECT_EQ(ops_->run_recorded(&err), SL_OK) << err.message;
  }

  sl_buffer* upload(const std::vector<float>& values) {
    sl_buffer* b = nullptr;
    sl_error err{};
    EXPECT_EQ(api_->alloc(be_, values.size() * 4, &b, &err), SL_OK) << err.message;
    if (!b) return nullptr;
    buffers_.push_back(b);
    EXPECT_EQ(api_->upload(be_, b, 0, values.data(), values.size() * 4, &err), SL_OK) << err.message;
    return b;
  }
  std::vector<float> download(sl_buffer* b, std::size_t n) {
    run();
    std::vector<float> out(n, NAN);
    sl_error err{};
    EXPECT_EQ(api_->download(be_, b, 0, out.data(), n * 4, &err), SL_OK) << err.message;
    return out;
  }

 private:
  PluginRegistry registry_;  // declared first: the plugin stays mapped until the backend is gone
  const sl_backend_api* api_ = nullptr;
  sl_backend* be_ = nullptr;
  sl_kv_cache* cache_ = nullptr;
  std::vector<sl_buffer*> buffers_;
  std::unique_ptr<OpCalls> ops_;
};

// How many times the profile printed at destroy (cl_backend.cpp, print_profile) says `name` ran.
long launches(const std::string& profile, const std::string& name) {
  std::istringstream lines(profile);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string first;
    long count = 0;
    std::string unit;
    if (words >> first >> count >> unit && first == name && unit == "launches") return count;
  }
  return 0;
}

// Plain causal attention of n_heads query heads over n_kv_heads of head_dim, scaled by 1/√head_dim.
sl_attention_params causal_attention(uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim) {
  sl_attention_params p{};
  p.struct_size = sizeof(p);
  p.n_heads = n_heads;
  p.n_kv_heads = n_kv_heads;
  p.head_dim = head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  return p;
}

// Where two float vectors first differ in their bits, or -1.
long first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return static_cast<long>(i);
  return -1;
}

// Whether this process's attention programs have warp exchanges — NVIDIA's shuffles (PTX on), or their
// local-memory emulation (tune.att_shfl_local=1 in SLUICE_TEST_BACKEND_OPTIONS: ctest runs this
// binary's attention tests a second time so) — and attention_short with them; false where no backend opens.
bool warps_exchange() {
  Device probe;
  std::string why;
  if (!probe.open("", false, why)) return false;
  sl_device_info info{};
  info.struct_size = sizeof(info);
  sl_error err{};
  if (probe.api()->get_device_info(probe.be(), &info, &err) != SL_OK) return false;
  const char* portable = std::getenv("SLUICE_OPENCL_PORTABLE");
  const bool nvidia = std::string(info.vendor).find("NVIDIA") != std::string::npos && !(portable && *portable && *portable != '0');
  return nvidia || test_tuning("att_shfl_local") == "1";
}

// Whether a decode kv_write joins the attention launch after it (attention_short_join) in this
// process, for histories of up to `keys` keys: warps exchange and attention_short takes them
// (tune.att_short in the test's options).
bool attention_joins(long keys) {
  const std::string limit = test_tuning("att_short");
  return warps_exchange() && !(!limit.empty() && std::atol(limit.c_str()) < keys);
}

struct RopeJoinCase {
  const char* name;
  uint32_t n_heads, n_kv_heads, head_dim, rotary_dim, style;
  float factor;
  bool recent;          // the batches give recent pages (the window's exact rows)
  const char* options;  // "host-kv": the cache on the host, where kv_write joins nothing
};

void PrintTo(const RopeJoinCase& c, std::ostream* os) { *os << c.name; }

constexpr uint32_t kPageTokens = 4, kPages = 8, kMaxPages = 2;

// Two sequences through three passes: a prefill of both (5 and 3 tokens), a decode token of each, one
// token of the first — positions across pages, slots 0 and 1 with pages {0, 1} and {2, 3}.
struct Pass {
  std::vector<int32_t> positions, slots;
};
const Pass kPasses[] = {{{0, 1, 2, 3, 4, 0, 1, 2}, {0, 0, 0, 0, 0, 1, 1, 1}}, {{5, 3}, {0, 1}}, {{6}, {0}}};

struct PassInputs {
  std::vector<float> q, k, v;
};
struct PassResult {
  std::vector<float> q, k, out;
};

std::vector<float> inverse_frequencies(uint32_t rotary_dim) {
  std::vector<float> f(rotary_dim / 2);
  for (uint32_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / rotary_dim));
  return f;
}

// The rope on the host, in double from the same float32 angle, for x [n_tokens][n_heads][head_dim].
std::vector<float> host_rope(const RopeJoinCase& c, std::vector<float> x, uint32_t n_heads, const std::vector<int32_t>& positions) {
  const auto inv_freq = inverse_frequencies(c.rotary_dim);
  const uint32_t half = c.rotary_dim / 2;
  for (std::size_t t = 0; t < positions.size(); ++t)
    for (uint32_t h = 0; h < n_heads; ++h) {
      float* v = x.data() + (t * n_heads + h) * c.head_dim;
      for (uint32_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(positions[t]) * inv_freq[i];
        const double cs = std::cos(static_cast<double>(angle)) * c.factor, sn = std::sin(static_cast<double>(angle)) * c.factor;
        const uint32_t a = c.style == SL_ROPE_NEOX ? i : 2 * i, b = c.style == SL_ROPE_NEOX ? i + half : 2 * i + 1;
        const double va = v[a], vb = v[b];
        v[a] = static_cast<float>(va * cs - vb * sn);
        v[b] = static_cast<float>(vb * cs + va * sn);
      }
    }
  return x;
}

// A sequence of batches on layer 0 of a fresh f16 cache: for each pass, rope(q) and rope(k) (with
// `rope`), kv_write(k, v) and attention(q), returning q, k and the output as the backend left them.
// With `apart`, a synchronize between the second rope and kv_write runs the ropes first (as one `rope`
// launch), so kv_write cannot take them into its launch: the path before the join.
struct PassPlan {
  uint32_t n_heads, n_kv_heads, head_dim, rotary_dim, style;
  float factor;
  bool recent, rope, apart;
  uint32_t page_tokens, n_pages, recent_window, n_recent_pages, max_pages;
  std::vector<int32_t> table;  // max_pages entries a sequence slot, 2 slots; the recent table too
  const Pass* passes;
  std::size_t n_passes;
};

std::vector<PassResult> run_plan(Device& d, const PassPlan& plan, const std::vector<PassInputs>& inputs) {
  std::vector<PassResult> results;
  const sl_backend_api* api = d.api();
  sl_error err{};
  test::F16KvLayout kv(plan.n_kv_heads, plan.head_dim, plan.page_tokens, plan.n_pages);
  kv.layout.recent_window = plan.recent ? plan.recent_window : 0;
  kv.layout.n_recent_pages = plan.recent ? plan.n_recent_pages : 0;
  EXPECT_EQ(api->kv_create(d.be(), &kv.layout, &d.cache(), &err), SL_OK) << err.message;
  const auto inv_freq = inverse_frequencies(plan.rotary_dim);
  for (std::size_t p = 0; p < plan.n_passes && d.cache(); ++p) {
    const Pass& pass = plan.passes[p];
    sl_batch batch{};
    batch.struct_size = sizeof(batch);
    batch.n_tokens = static_cast<uint32_t>(pass.positions.size());
    batch.positions = pass.positions.data();
    batch.seq_slots = pass.slots.data();
    batch.n_seqs = 2;
    batch.max_pages = plan.max_pages;
    batch.page_table = plan.table.data();
    batch.recent_table = plan.recent ? plan.table.data() : nullptr;  // recent pages as the pages
    d.begin(batch, &kv.layout);
    sl_buffer* q = d.upload(inputs[p].q);
    sl_buffer* k = d.upload(inputs[p].k);
    sl_buffer* v = d.upload(inputs[p].v);
    sl_buffer* out = d.upload(std::vector<float>(inputs[p].q.size(), 0.0f));
    if (plan.rope) {
      EXPECT_EQ(d.ops().rope(q, plan.n_heads, plan.head_dim, plan.rotary_dim, inv_freq.data(), plan.factor, plan.style, &err),
                SL_OK)
          << err.message;
      EXPECT_EQ(d.ops().rope(k, plan.n_kv_heads, plan.head_dim, plan.rotary_dim, inv_freq.data(), plan.factor, plan.style,
                          &err),
                SL_OK)
          << err.message;
    }
    if (plan.apart) {  // the ropes run (and finish) in a graph of their own
      d.run();
      EXPECT_EQ(api->synchronize(d.be(), &err), SL_OK) << err.message;
      d.ops().record();
    }
    EXPECT_EQ(d.ops().kv_write(d.cache(), 0, k, v, &err), SL_OK) << err.message;
    sl_attention_params params = causal_attention(plan.n_heads, plan.n_kv_heads, plan.head_dim);
    EXPECT_EQ(d.ops().attention(d.cache(), 0, q, &params, nullptr, out, &err), SL_OK) << err.message;
    results.push_back({d.download(q, inputs[p].q.size()), d.download(k, inputs[p].k.size()), d.download(out, inputs[p].q.size())});
  }
  api->kv_destroy(d.be(), d.cache());
  d.cache() = nullptr;
  return results;
}

// The rope-join passes (kPasses; pages 0..3, recent pages as the pages).
std::vector<PassResult> run_passes(Device& d, const RopeJoinCase& c, const std::vector<PassInputs>& inputs, bool apart) {
  return run_plan(d,
                  PassPlan{c.n_heads, c.n_kv_heads, c.head_dim, c.rotary_dim, c.style, c.factor, c.recent, true, apart, kPageTokens,
                           kPages, 6, 4, kMaxPages, {0, 1, 2, 3}, kPasses, std::size(kPasses)},
                  inputs);
}

class OpenclRopeJoin : public ::testing::TestWithParam<RopeJoinCase> {};

// The rope of q and of k run inside kv_write's launch (kv_write_rope: the fusion pass's kRopeKvWrite): q and k hold the
// rotated values afterwards and the cache and attention output are the bits of the path where the
// ropes ran apart (one `rope` launch, then kv_write) — prefill and decode tokens, GQA, both styles,
// a partial rotary_dim, a recent window. The profile shows the join: no `rope` launch where the
// cache is on the device; on the host path kv_write runs the pair as one `rope` launch first. Where
// attention_short runs, the decode passes' kv_write joins the attention launch instead
// (OpenclAttentionJoin below): kv_write_rope then serves the prefill alone.
TEST_P(OpenclRopeJoin, KvWriteRunsTheRopeOfQAndKInItsLaunch) {
  const RopeJoinCase& c = GetParam();
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<PassInputs> inputs;
  for (const Pass& pass : kPasses) {
    const std::size_t n = pass.positions.size();
    PassInputs in{std::vector<float>(n * c.n_heads * c.head_dim), std::vector<float>(n * c.n_kv_heads * c.head_dim),
                  std::vector<float>(n * c.n_kv_heads * c.head_dim)};
    for (auto* vec : {&in.q, &in.k, &in.v})
      for (auto& x : *vec) x = normal(rng);
    inputs.push_back(std::move(in));
  }

  Device joined, apart;
  std::string why;
  if (!joined.open(c.options, true, why) || !apart.open(c.options, true, why)) GTEST_SKIP() << "OpenCL backend unavailable: " << why;
  const auto got = run_passes(joined, c, inputs, false);
  const auto want = run_passes(apart, c, inputs, true);
  const std::string joined_profile = joined.close(), apart_profile = apart.close();
  ASSERT_EQ(got.size(), std::size(kPasses));
  ASSERT_EQ(want.size(), std::size(kPasses));

  for (std::size_t p = 0; p < got.size(); ++p) {
    SCOPED_TRACE("pass " + std::to_string(p));
    EXPECT_EQ(first_difference(got[p].q, want[p].q), -1) << "q";
    EXPECT_EQ(first_difference(got[p].k, want[p].k), -1) << "k";
    EXPECT_EQ(first_difference(got[p].out, want[p].out), -1) << "attention output";
    // Rotated at all, and rightly: against the rope in double.
    const auto q_ref = host_rope(c, inputs[p].q, c.n_heads, kPasses[p].positions);
    const auto k_ref = host_rope(c, inputs[p].k, c.n_kv_heads, kPasses[p].positions);
    for (std::size_t i = 0; i < q_ref.size(); ++i) ASSERT_NEAR(got[p].q[i], q_ref[i], 1e-5f + 1e-5f * std::fabs(q_ref[i])) << "q " << i;
    for (std::size_t i = 0; i < k_ref.size(); ++i) ASSERT_NEAR(got[p].k[i], k_ref[i], 1e-5f + 1e-5f * std::fabs(k_ref[i])) << "k " << i;
  }

  const long passes = static_cast<long>(std::size(kPasses));
  const bool on_device = std::strstr(c.options, "host-kv") == nullptr;
  EXPECT_EQ(launches(apart_profile, "rope"), passes) << apart_profile;
  EXPECT_EQ(launches(apart_profile, "kv_write_rope"), 0) << apart_profile;
  if (on_device) {
    const long decodes = attention_joins(8) ? passes - 1 : 0;  // every pass but the prefill
    EXPECT_EQ(launches(joined_profile, "rope"), 0) << joined_profile;
    EXPECT_EQ(launches(joined_profile, "kv_write"), 0) << joined_profile;
    EXPECT_EQ(launches(joined_profile, "kv_write_rope"), passes - decodes) << joined_profile;
    EXPECT_EQ(launches(joined_profile, "attention_short_join"), decodes) << joined_profile;
  } else {
    EXPECT_EQ(launches(joined_profile, "rope"), passes) << joined_profile;
    EXPECT_EQ(launches(joined_profile, "kv_write_rope"), 0) << joined_profile;
  }
}

// A kv_write of another K than the rope pair's second tensor takes nothing: the pair runs first, as
// one `rope` launch, and kv_write as before — q and k rotated, the other K stored as given.
TEST(OpenclRopeJoinElsewhere, KvWriteOfAnotherKRunsThePairFirst) {
  const RopeJoinCase c{"other_k", 4, 2, 64, 64, SL_ROPE_NEOX, 1.0f, false, ""};
  Device d;
  std::string why;
  if (!d.open(c.options, true, why)) GTEST_SKIP() << "OpenCL backend unavailable: " << why;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::vector<int32_t> positions = {3, 4}, slots = {0, 0}, table = {0, 1, 2, 3};
  std::vector<float> q(2 * c.n_heads * c.head_dim), k(2 * c.n_kv_heads * c.head_dim), v(k.size());
  for (auto* vec : {&q, &k, &v})
    for (auto& x : *vec) x = normal(rng);
  const sl_backend_api* api = d.api();
  sl_error err{};
  test::F16KvLayout kv(c.n_kv_heads, c.head_dim, kPageTokens, kPages);
  ASSERT_EQ(api->kv_create(d.be(), &kv.layout, &d.cache(), &err), SL_OK) << err.message;
  sl_batch batch{};
  batch.struct_size = sizeof(batch);
  batch.n_tokens = 2;
  batch.positions = positions.data();
  batch.seq_slots = slots.data();
  batch.n_seqs = 1;
  batch.max_pages = kMaxPages;
  batch.page_table = table.data();
  d.begin(batch, &kv.layout);
  sl_buffer* dq = d.upload(q);
  sl_buffer* dk = d.upload(k);
  sl_buffer* dk_other = d.upload(k);
  sl_buffer* dv = d.upload(v);
  const auto inv_freq = inverse_frequencies(c.rotary_dim);
  ASSERT_EQ(d.ops().rope(dq, c.n_heads, c.head_dim, c.rotary_dim, inv_freq.data(), c.factor, c.style, &err), SL_OK) << err.message;
  ASSERT_EQ(d.ops().rope(dk, c.n_kv_heads, c.head_dim, c.rotary_dim, inv_freq.data(), c.factor, c.style, &err), SL_OK) << err.message;
  ASSERT_EQ(d.ops().kv_write(d.cache(), 0, dk_other, dv, &err), SL_OK) << err.message;
  const auto q_ref = host_rope(c, q, c.n_heads, positions), k_ref = host_rope(c, k, c.n_kv_heads, positions);
  const auto q_got = d.download(dq, q.size()), k_got = d.download(dk, k.size()), k_other = d.download(dk_other, k.size());
  for (std::size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(q_got[i], q_ref[i], 1e-5f + 1e-5f * std::fabs(q_ref[i])) << "q " << i;
  for (std::size_t i = 0; i < k.size(); ++i) ASSERT_NEAR(k_got[i], k_ref[i], 1e-5f + 1e-5f * std::fabs(k_ref[i])) << "k " << i;
  EXPECT_EQ(first_difference(k_other, k), -1) << "the other K is not rotated";
  api->kv_destroy(d.be(), d.cache());
  d.cache() = nullptr;
  const std::string profile = d.close();
  EXPECT_EQ(launches(profile, "rope"), 1) << profile;
  EXPECT_EQ(launches(profile, "kv_write"), 1) << profile;
  EXPECT_EQ(launches(profile, "kv_write_rope"), 0) << profile;
}

// attention_short (kernels_cl/attention_short.cl) takes attention over histories up to 512 keys
// (tune.att_short) wherever its program has warp exchanges — NVIDIA's shuffles, or their
// local-memory emulation (tune.att_shfl_local=1: ctest runs this binary's attention tests a
// second time so) — and a backend opened with "generic-attention" keeps the generic kernel. Three sequences (histories of 200, 70 and 1 keys: several passes of
// the short kernel, two, one) decoded together, then the longest alone (with few work-groups the keys
// split and merge); llama3's head shape (32 / 8 × 128), groups of 1 and 3, sinks, soft-capping, a
// window and a recent window. Both backends are held to a float64 reference over the f16 rows; the
// profile names the kernel that ran.
struct ShortAttentionCase {
  uint32_t n_heads, n_kv_heads, head_dim, window;
  float softcap;
  bool sinks, recent;
};

std::vector<std::vector<float>> run_decodes(Device& d, const ShortAttentionCase& c, const std::vector<std::vector<float>>& k,
                                            const std::vector<std::vector<float>>& v,
                                            const std::vector<std::vector<float>>& q, const std::vector<float>& sinks,
                                            const std::vector<std::vector<int32_t>>& batches, uint32_t page_tokens,
                                            uint32_t max_pages) {
  const sl_backend_api* api = d.api();
  sl_error err{};
  const uint32_t n_seqs = static_cast<uint32_t>(k.size());
  test::F16KvLayout kv(c.n_kv_heads, c.head_dim, page_tokens, n_seqs * max_pages);
  kv.layout.recent_window = c.recent ? 24 : 0;
  kv.layout.n_recent_pages = c.recent ? n_seqs * max_pages : 0;
  EXPECT_EQ(api->kv_create(d.be(), &kv.layout, &d.cache(), &err), SL_OK) << err.message;
  std::vector<int32_t> table(std::size_t(n_seqs) * max_pages);
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>((i * 7) % table.size());  // scattered pages
  auto begin = [&](const std::vector<int32_t>& positions, const std::vector<int32_t>& slots) {
    sl_batch batch{};
    batch.struct_size = sizeof(batch);
    batch.n_tokens = static_cast<uint32_t>(positions.size());
    batch.positions = positions.data();
    batch.seq_slots = slots.data();
    batch.n_seqs = n_seqs;
    batch.max_pages = max_pages;
    batch.page_table = table.data();
    batch.recent_table = c.recent ? table.data() : nullptr;
    d.begin(batch, &kv.layout);
  };
  // The histories: every sequence's rows, written as one batch.
  const std::size_t row = std::size_t(c.n_kv_heads) * c.head_dim;
  std::vector<int32_t> positions, slots;
  std::vector<float> all_k, all_v;
  for (uint32_t s = 0; s < n_seqs; ++s)
    for (std::size_t pos = 0; pos < k[s].size() / row; ++pos) {
      positions.push_back(static_cast<int32_t>(pos));
      slots.push_back(static_cast<int32_t>(s));
      all_k.insert(all_k.end(), k[s].begin() + pos * row, k[s].begin() + (pos + 1) * row);
      all_v.insert(all_v.end(), v[s].begin() + pos * row, v[s].begin() + (pos + 1) * row);
    }
  begin(positions, slots);
  EXPECT_EQ(d.ops().kv_write(d.cache(), 0, d.upload(all_k), d.upload(all_v), &err), SL_OK) << err.message;
  // Each batch decodes the last position of the sequences it names.
  sl_buffer* dsinks = d.upload(sinks);
  std::vector<std::vector<float>> outs;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    std::vector<int32_t> pos, sl;
    for (int32_t s : batches[b]) {
      pos.push_back(static_cast<int32_t>(k[s].size() / row) - 1);
      sl.push_back(s);
    }
    begin(pos, sl);
    sl_attention_params params = causal_attention(c.n_heads, c.n_kv_heads, c.head_dim);
    params.window = c.window;
    params.softcap = c.softcap;
    sl_buffer* out = d.upload(std::vector<float>(q[b].size(), 0.0f));
    EXPECT_EQ(d.ops().attention(d.cache(), 0, d.upload(q[b]), &params, c.sinks ? dsinks : nullptr, out, &err), SL_OK) << err.message;
    outs.push_back(d.download(out, q[b].size()));
  }
  api->kv_destroy(d.be(), d.cache());
  d.cache() = nullptr;
  return outs;
}

TEST(OpenclShortAttention, AgreesWithAFloat64ReferenceAndRunsWhereWarpsExchange) {
  const ShortAttentionCase cases[] = {
      {32, 8, 128, 0, 0.0f, false, false},  // llama3-8b's heads
      {4, 4, 64, 0, 30.0f, true, true},     // one query head per KV head; sinks, soft-capping, a recent window
      {12, 4, 32, 50, 0.0f, false, false},  // groups of 3 (padded to 4 in a pass), a sliding window
  };
  const std::vector<uint32_t> lengths = {200, 70, 1};
  const std::vector<std::vector<int32_t>> batches = {{0, 1, 2}, {0}};
  constexpr uint32_t kShortPageTokens = 16, kShortMaxPages = 13;
  Device probe;
  std::string why;
  if (!probe.open("", false, why)) GTEST_SKIP() << "OpenCL backend unavailable: " << why;
  probe.close();
  const std::string limit = test_tuning("att_short");
  const bool short_on = warps_exchange() && !(!limit.empty() && std::atol(limit.c_str()) < 200);

  std::mt19937 rng(2026);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto randoms = [&](std::size_t n) {
    std::vector<float> x(n);
    for (auto& e : x) e = normal(rng);
    return x;
  };
  for (const ShortAttentionCase& c : cases) {
    SCOPED_TRACE("heads " + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) + " dim " + std::to_string(c.head_dim));
    const std::size_t row = std::size_t(c.n_kv_heads) * c.head_dim, q_row = std::size_t(c.n_heads) * c.head_dim;
    std::vector<std::vector<float>> k, v, q;
    for (uint32_t len : lengths) {
      k.push_back(randoms(len * row));
      v.push_back(randoms(len * row));
    }
    for (const auto& b : batches) q.push_back(randoms(b.size() * q_row));
    const std::vector<float> sinks = randoms(c.n_heads);

    Device fast, generic;
    ASSERT_TRUE(fast.open("", true, why)) << why;
    ASSERT_TRUE(generic.open("generic-attention", true, why)) << why;
    const auto got = run_decodes(fast, c, k, v, q, sinks, batches, kShortPageTokens, kShortMaxPages);
    const auto base = run_decodes(generic, c, k, v, q, sinks, batches, kShortPageTokens, kShortMaxPages);
    const std::string fast_profile = fast.close(), generic_profile = generic.close();
    ASSERT_EQ(got.size(), batches.size());
    ASSERT_EQ(base.size(), batches.size());

    // The reference: softmax attention in double over the f16-rounded rows.
    auto f16 = [](float x) { return static_cast<double>(round_to_dtype(x, SL_DTYPE_F16)); };
    const uint32_t group = c.n_heads / c.n_kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    for (std::size_t b = 0; b < batches.size(); ++b)
      for (std::size_t t = 0; t < batches[b].size(); ++t) {
        const uint32_t s = static_cast<uint32_t>(batches[b][t]);
        const int32_t pos = static_cast<int32_t>(lengths[s]) - 1;
        const int32_t lo = c.window ? std::max<int32_t>(0, pos - static_cast<int32_t>(c.window) + 1) : 0;
        for (uint32_t h = 0; h < c.n_heads; ++h) {
          const float* qh = q[b].data() + t * q_row + h * c.head_dim;
          const std::size_t kvh = h / group;
          std::vector<double> score;
          double m = c.sinks ? sinks[h] : -INFINITY;
          for (int32_t j = lo; j <= pos; ++j) {
            double dot = 0;
            for (uint32_t d = 0; d < c.head_dim; ++d) dot += double(qh[d]) * f16(k[s][j * row + kvh * c.head_dim + d]);
            double sc = dot * scale;
            if (c.softcap > 0) sc = std::tanh(sc / c.softcap) * c.softcap;
            score.push_back(sc);
            m = std::max(m, sc);
          }
          double sum = c.sinks ? std::exp(sinks[h] - m) : 0.0;
          for (auto& x : score) sum += (x = std::exp(x - m));
          for (uint32_t d = 0; d < c.head_dim; ++d) {
            double want = 0;
            for (int32_t j = lo; j <= pos; ++j) want += score[j - lo] / sum * f16(v[s][j * row + kvh * c.head_dim + d]);
            const std::size_t at = t * q_row + h * c.head_dim + d;
            ASSERT_NEAR(got[b][at], want, 2e-5 * (1.0 + std::abs(want))) << "batch " << b << " token " << t << " head " << h << " dim " << d;
            ASSERT_NEAR(base[b][at], want, 2e-5 * (1.0 + std::abs(want))) << "generic: batch " << b << " token " << t << " head " << h;
          }
        }
      }
    const long calls = static_cast<long>(batches.size());
    EXPECT_EQ(launches(fast_profile, "attention_short"), short_on ? calls : 0) << fast_profile;
    EXPECT_EQ(launches(fast_profile, "attention"), short_on ? 0 : calls) << fast_profile;
    EXPECT_EQ(launches(generic_profile, "attention_short"), 0) << generic_profile;
    EXPECT_EQ(launches(generic_profile, "attention"), calls) << generic_profile;
  }
}

const RopeJoinCase kRopeJoinCases[] = {
    {"neox_full_recent", 8, 2, 64, 64, SL_ROPE_NEOX, 1.0f, true, ""},
    {"interleaved_partial", 8, 2, 64, 32, SL_ROPE_INTERLEAVED, 0.875f, false, ""},
    {"neox_partial_recent_host_kv", 8, 2, 64, 48, SL_ROPE_NEOX, 1.0f, true, "host-kv"},
};
INSTANTIATE_TEST_SUITE_P(Cases, OpenclRopeJoin, ::testing::ValuesIn(kRopeJoinCases),
                         [](const ::testing::TestParamInfo<RopeJoinCase>& info) { return std::string(info.param.name); });

// The decode kv_write, with the rope of q and k it took, inside the attention launch
// (attention_short_join, kernels_cl/attention_short.cl) against the same ops launched apart (a
// backend opened with "no-attention-join"): q, k and the attention outputs the same bits, pass after
// pass — the rows a joined pass stored are read by the next ones. Two sequences prefilled (150 and
// 20 tokens: no join, their tokens share sequences), decoded together, the first alone (one token,
// few work-groups: the keys split, and attention_merge writes the rotated q back), both again; GQA,
// one query head per KV head, both rope styles, a partial rotary_dim, a recent window, and a
// kv_write without a rope before it. The profile shows the join where attention_short runs (warps
// exchange) and kv_write_rope / kv_write where it does not — the prefill, the generic kernel, a
// device without exchanges.
struct AttentionJoinCase {
  const char* name;
  uint32_t n_heads, n_kv_heads, head_dim, rotary_dim, style;
  float factor;
  bool recent;  // the batches give recent pages (the window's exact rows)
  bool rope;    // rope(q), rope(k) before kv_write (else kv_write and attention alone)
};

void PrintTo(const AttentionJoinCase& c, std::ostream* os) { *os << c.name; }

class OpenclAttentionJoin : public ::testing::TestWithParam<AttentionJoinCase> {};

constexpr uint32_t kJoinPageTokens = 16, kJoinMaxPages = 12;
const Pass kJoinPasses[] = {{[] {
                               std::vector<int32_t> p;
                               for (int32_t i = 0; i < 150; ++i) p.push_back(i);
                               for (int32_t i = 0; i < 20; ++i) p.push_back(i);
                               return p;
                             }(),
                             [] {
                               std::vector<int32_t> s(150, 0);
                               s.resize(170, 1);
                               return s;
                             }()},
                            {{150, 20}, {0, 1}},
                            {{151}, {0}},
                            {{152, 21}, {0, 1}}};

// The joined-attention passes (kJoinPasses) over scattered pages of twice the table's length.
std::vector<PassResult> run_join_passes(Device& d, const AttentionJoinCase& c, const std::vector<PassInputs>& inputs) {
  std::vector<int32_t> table(2 * kJoinMaxPages);
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>((i * 5) % table.size());  // scattered pages
  return run_plan(d,
                  PassPlan{c.n_heads, c.n_kv_heads, c.head_dim, c.rotary_dim, c.style, c.factor, c.recent, c.rope, false,
                           kJoinPageTokens, 2 * kJoinMaxPages, 24, 2 * kJoinMaxPages, kJoinMaxPages, table, kJoinPasses,
                           std::size(kJoinPasses)},
                  inputs);
}

TEST_P(OpenclAttentionJoin, DecodeKvWriteAndRopeRunInTheAttentionLaunch) {
  const AttentionJoinCase& c = GetParam();
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<PassInputs> inputs;
  for (const Pass& pass : kJoinPasses) {
    const std::size_t n = pass.positions.size();
    PassInputs in{std::vector<float>(n * c.n_heads * c.head_dim), std::vector<float>(n * c.n_kv_heads * c.head_dim),
                  std::vector<float>(n * c.n_kv_heads * c.head_dim)};
    for (auto* vec : {&in.q, &in.k, &in.v})
      for (auto& x : *vec) x = normal(rng);
    inputs.push_back(std::move(in));
  }
  Device joined, apart, generic;
  std::string why;
  if (!joined.open("", true, why)) GTEST_SKIP() << "OpenCL backend unavailable: " << why;
  ASSERT_TRUE(apart.open("no-attention-join", true, why)) << why;
  ASSERT_TRUE(generic.open("generic-attention", true, why)) << why;
  const auto got = run_join_passes(joined, c, inputs);
  const auto want = run_join_passes(apart, c, inputs);
  const auto plain = run_join_passes(generic, c, inputs);
  const std::string joined_profile = joined.close(), apart_profile = apart.close(), generic_profile = generic.close();
  ASSERT_EQ(got.size(), std::size(kJoinPasses));
  ASSERT_EQ(want.size(), std::size(kJoinPasses));
  ASSERT_EQ(plain.size(), std::size(kJoinPasses));

  const RopeJoinCase rc{c.name, c.n_heads, c.n_kv_heads, c.head_dim, c.rotary_dim, c.style, c.factor, c.recent, ""};
  for (std::size_t p = 0; p < got.size(); ++p) {
    SCOPED_TRACE("pass " + std::to_string(p));
    EXPECT_EQ(first_difference(got[p].q, want[p].q), -1) << "q";
    EXPECT_EQ(first_difference(got[p].k, want[p].k), -1) << "k";
    EXPECT_EQ(first_difference(got[p].out, want[p].out), -1) << "attention output";
    EXPECT_EQ(first_difference(got[p].q, plain[p].q), -1) << "q against the generic kernel's path";
    EXPECT_EQ(first_difference(got[p].k, plain[p].k), -1) << "k against the generic kernel's path";
    for (std::size_t i = 0; i < got[p].out.size(); ++i)
      ASSERT_NEAR(got[p].out[i], plain[p].out[i], 2e-5f * (1.0f + std::fabs(plain[p].out[i]))) << "output " << i;
    const auto q_ref = c.rope ? host_rope(rc, inputs[p].q, c.n_heads, kJoinPasses[p].positions) : inputs[p].q;
    const auto k_ref = c.rope ? host_rope(rc, inputs[p].k, c.n_kv_heads, kJoinPasses[p].positions) : inputs[p].k;
    for (std::size_t i = 0; i < q_ref.size(); ++i) ASSERT_NEAR(got[p].q[i], q_ref[i], 1e-5f + 1e-5f * std::fabs(q_ref[i])) << "q " << i;
    for (std::size_t i = 0; i < k_ref.size(); ++i) ASSERT_NEAR(got[p].k[i], k_ref[i], 1e-5f + 1e-5f * std::fabs(k_ref[i])) << "k " << i;
  }

  const long passes = static_cast<long>(std::size(kJoinPasses));
  const long decodes = attention_joins(160) ? passes - 1 : 0;  // every pass but the prefill joins
  const char* write = c.rope ? "kv_write_rope" : "kv_write";
  EXPECT_EQ(launches(joined_profile, "attention_short_join"), decodes) << joined_profile;
  EXPECT_EQ(launches(joined_profile, write), passes - decodes) << joined_profile;
  EXPECT_EQ(launches(joined_profile, "rope"), 0) << joined_profile;
  if (decodes && c.n_kv_heads <= 2) {  // one token, two work-groups: fewer than 4 a compute unit, so the keys split
    EXPECT_GE(launches(joined_profile, "attention_merge"), 1) << "no pass split its keys\n" << joined_profile;
  }
  for (const std::string* profile : {&apart_profile, &generic_profile}) {
    EXPECT_EQ(launches(*profile, "attention_short_join"), 0) << *profile;
    EXPECT_EQ(launches(*profile, write), passes) << *profile;
  }
}

const AttentionJoinCase kAttentionJoinCases[] = {
    {"gqa_neox_recent", 8, 2, 64, 64, SL_ROPE_NEOX, 1.0f, true, true},
    {"llama3_interleaved_partial", 32, 8, 128, 64, SL_ROPE_INTERLEAVED, 0.875f, false, true},
    {"one_head_a_group_no_rope_recent", 4, 4, 32, 32, SL_ROPE_NEOX, 1.0f, true, false},
};
INSTANTIATE_TEST_SUITE_P(Cases, OpenclAttentionJoin, ::testing::ValuesIn(kAttentionJoinCases),
                         [](const ::testing::TestParamInfo<AttentionJoinCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace sluice::test
