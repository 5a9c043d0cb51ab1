// Per-layer KV caches (ABI 2.0's sl_kv_layout.layers) on a backend: kv_create refuses layouts it
// could not lay out, with a message naming the layer (never an abort); attention over a layer whose
// K and V differ in width, and over a sliding-window layer whose early pages were released and
// reused, against naive softmax attention computed here; recurrent state slots cleared, written and
// read by COPY nodes, copied slot to slot, and every bad slot refused; and all of it in one cache —
// layers of their own widths and window layers beside uniform ones, with a recent window. A backend
// without the capability a case needs (SL_CAP_KV_LAYERS, SL_CAP_KV_WINDOW_PAGES, or nodes it
// declines) skips it.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend_fixture.h"
#include "conformance/attention_bounds.h"
#include "plugin/builtin_codecs.h"

namespace sluice::test {
namespace {

constexpr uint32_t kPageTokens = 16;

// A codec instance for one width and role, destroyed with the test.
struct Codec {
  Codec(const sl_kvcodec_api* a, uint32_t dim, sl_kv_role role) : api(a) {
    sl_error err{};
    api->create(dim, role, "", &codec, &err);
  }
  ~Codec() {
    if (codec) api->destroy(codec);
  }
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;
  // The values as the cache will hold them (encoded and decoded).
  std::vector<float> stored(const std::vector<float>& x, uint32_t dim) const {
    sl_kv_format f{};
    f.struct_size = sizeof(f);
    api->get_format(codec, &f);
    const uint32_t n = static_cast<uint32_t>(x.size() / dim);
    std::vector<std::byte> rows(std::size_t(n) * f.row_bytes);
    std::vector<float> out(x.size());
    sl_error err{};
    api->encode(codec, x.data(), n, rows.data(), &err);
    api->decode(codec, rows.data(), n, out.data(), &err);
    return out;
  }
  const sl_kvcodec_api* api;
  sl_kvcodec* codec = nullptr;
};

// A layout of the given layers whose own geometry is 2 heads of 16 (layer 0's, by convention here).
struct Layout {
  explicit Layout(const sl_kvcodec_api* api) : k16(api, 16, SL_KV_KEYS), v16(api, 16, SL_KV_VALUES), api_(api) {
    layout.struct_size = sizeof(layout);
    layout.n_kv_heads = 2;
    layout.head_dim = 16;
    layout.page_tokens = kPageTokens;
    layout.n_pages = 8;
    layout.k_api = layout.v_api = api;
    layout.k_codec = k16.codec;
    layout.v_codec = v16.codec;
    layers.reserve(8);  // the references attention_layer and state_layer return stay valid
  }
  sl_kv_layer& attention_layer(uint32_t kind, uint32_t heads, uint32_t k_dim, uint32_t v_dim, uint32_t window = 0) {
    const Codec* k = codecs.emplace_back(std::make_unique<Codec>(api_, k_dim, SL_KV_KEYS)).get();
    const Codec* v = codecs.emplace_back(std::make_unique<Codec>(api_, v_dim, SL_KV_VALUES)).get();
    sl_kv_layer l{};
    l.struct_size = sizeof(l);
    l.kind = kind;
    l.n_kv_heads = heads;
    l.k_head_dim = k_dim;
    l.v_head_dim = v_dim;
    l.window = window;
    l.k_api = l.v_api = api_;
    l.k_codec = k->codec;
    l.v_codec = v->codec;
    return push(l);
  }
  sl_kv_layer& state_layer(uint64_t bytes) {
    sl_kv_layer l{};
    l.struct_size = sizeof(l);
    l.kind = SL_KV_STATE;
    l.state_bytes = bytes;
    return push(l);
  }
  const sl_kv_layout& get() {
    layout.n_layers = static_cast<uint32_t>(layers.size());
    layout.layers = layers.data();
    return layout;
  }
  sl_kv_layout layout{};
  std::vector<sl_kv_layer> layers;
  std::vector<std::unique_ptr<Codec>> codecs;
  Codec k16, v16;

 private:
  sl_kv_layer& push(const sl_kv_layer& l) {
    layers.push_back(l);
    return layers.back();
  }
  const sl_kvcodec_api* api_;
};

class KvLayersTest : public BackendOpsTest {
 protected:
  // kv_create, the cache destroyed with the test.
  sl_kv_cache* create(const sl_kv_layout& layout) {
    sl_kv_cache* cache = nullptr;
    sl_error err{};
    const sl_status s = api()->kv_create(be(), &layout, &cache, &err);
    EXPECT_EQ(s, SL_OK) << err.message;
    if (s != SL_OK) return nullptr;
    caches_.emplace_back(cache, [this](sl_kv_cache* c) { api()->kv_destroy(be(), c); });
    ops().set_kv_layout(layout);
    return cache;
  }
  // Whether the backend runs the graph's first node (kv: the cache's layout).
  bool supports(StepGraph& g, const sl_kv_layout* kv) {
    const sl_graph& view = g.view();
    return backend().supports(view.nodes[0], std::span<const sl_tensor>(view.tensors, view.n_tensors), kv);
  }
  void TearDown() override {
    caches_.clear();
    BackendOpsTest::TearDown();
  }

 private:
  std::vector<std::unique_ptr<sl_kv_cache, std::function<void(sl_kv_cache*)>>> caches_;
};

// Naive attention of one query head over keys [lo, pos] of one sequence: k [pos][kvh][KD], v [pos][kvh][VD].
struct Naive {
  std::vector<double> out, mag;  // per value column: the output and Σ|w·v|
  double most = 0;               // the largest Σ|q·k| of a key
  int32_t keys = 0;
};

Naive naive(const float* q, const std::vector<float>& k, const std::vector<float>& v, uint32_t kvh, uint32_t kv_heads, uint32_t KD,
            uint32_t VD, int32_t lo, int32_t pos, double scale) {
  Naive n;
  std::vector<double> s;
  double m = -INFINITY;
  for (int32_t j = lo; j <= pos; ++j) {
    double dot = 0, dot_mag = 0;
    for (uint32_t d = 0; d < KD; ++d) {
      const double term = double(q[d]) * k[(std::size_t(j) * kv_heads + kvh) * KD + d];
      dot += term;
      dot_mag += std::abs(term);
    }
    n.most = std::max(n.most, dot_mag);
    s.push_back(dot * scale);
    m = std::max(m, s.back());
  }
  double sum = 0;
  for (auto& x : s) sum += (x = std::exp(x - m));
  n.out.assign(VD, 0.0);
  n.mag.assign(VD, 0.0);
  n.keys = pos - lo + 1;
  for (int32_t j = lo; j <= pos; ++j)
    for (uint32_t d = 0; d < VD; ++d) {
      const double term = s[j - lo] / sum * v[(std::size_t(j) * kv_heads + kvh) * VD + d];
      n.out[d] += term;
      n.mag[d] += std::abs(term);
    }
  return n;
}

// The bound of column d: float32 arithmetic's, or on a device with matrix units (which may attend
// prefill runs with f16 inputs: the OpenCL backend on NVIDIA) the f16 bound derived in
// conformance/attention_bounds.h where it is wider.
double tolerance(const BackendHandle& be, const Naive& n, uint32_t d, double scale, uint32_t KD) {
  const double f32 = 1e-4 * (n.mag[d] + 1.0);
  if (!be.has_cap(SL_CAP_MATRIX)) return f32;
  return std::max(f32, conformance::f16_attention_tolerance(scale, KD, n.most, n.keys, n.mag[d]));
}

sl_attention_params attention_params(uint32_t layer, uint32_t heads, uint32_t kv_heads, uint32_t KD, uint32_t VD, uint32_t window) {
  sl_attention_params p{};
  p.struct_size = sizeof(p);
  p.layer = layer;
  p.n_heads = heads;
  p.n_kv_heads = kv_heads;
  p.head_dim = KD;
  p.v_head_dim = VD;
  p.scale = static_cast<float>(1.0 / std::sqrt(double(KD)));
  p.window = window;
  return p;
}

TEST_P(KvLayersTest, KvCreateRefusesLayoutsItCannotLayOutNamingTheLayer) {
  if (!backend().has_cap(SL_CAP_KV_LAYERS)) GTEST_SKIP() << "no per-layer caches (SL_CAP_KV_LAYERS)";
  struct Bad {
    const char* what;
    std::function<void(Layout&)> make;
    const char* message;  // a part of the error
  };
  const sl_kvcodec_api* f16 = builtin_f16_codec();
  const Bad cases[] = {
      {"a K width of 0", [](Layout& l) { l.attention_layer(SL_KV_FULL, 2, 16, 16); l.attention_layer(SL_KV_FULL, 2, 0, 16); }, "layer 1"},
      {"no KV heads", [](Layout& l) { l.attention_layer(SL_KV_FULL, 0, 16, 16); }, "layer 0"},
      {"a codec made for another width",
       [](Layout& l) {
         l.attention_layer(SL_KV_FULL, 2, 16, 16);
         l.attention_layer(SL_KV_FULL, 2, 24, 16).k_codec = l.k16.codec;  // rows of 16 for a K of 24
       },
       "layer 1"},
      {"a window of 0", [](Layout& l) { l.layout.n_window_pages = 4; l.attention_layer(SL_KV_WINDOW, 2, 16, 16, 0); }, "window"},
      {"a window layer without window pages", [](Layout& l) { l.attention_layer(SL_KV_WINDOW, 2, 16, 16, 8); }, "window pages"},
      {"a state of 0 bytes", [](Layout& l) { l.layout.n_state_slots = 2; l.state_layer(0); }, "layer 0"},
      {"a state not a multiple of 4", [](Layout& l) { l.layout.n_state_slots = 2; l.state_layer(6); }, "multiple of 4"},
      {"a state layer without slots", [](Layout& l) { l.state_layer(64); }, "state slots"},
      {"an unknown kind", [](Layout& l) { l.attention_layer(SL_KV_FULL, 2, 16, 16).kind = 7; }, "kind"},
      {"a truncated layer struct", [](Layout& l) { l.attention_layer(SL_KV_FULL, 2, 16, 16).struct_size = 8; }, "layer 0"},
  };
  for (const Bad& bad : cases) {
    Layout l(f16);
    bad.make(l);
    sl_kv_cache* cache = nullptr;
    sl_error err{};
    const sl_status s = api()->kv_create(be(), &l.get(), &cache, &err);
    EXPECT_NE(s, SL_OK) << bad.what;
    if (s == SL_OK) {
      api()->kv_destroy(be(), cache);
      continue;
    }
    EXPECT_NE(std::string(err.message).find(bad.message), std::string::npos) << bad.what << ": " << err.message;
  }
  // A state layer on a backend that keeps it, or an attention layer of other widths, is fine.
  Layout good(f16);
  good.attention_layer(SL_KV_FULL, 2, 16, 16);
  good.attention_layer(SL_KV_FULL, 1, 24, 8);
  good.state_layer(64);
  good.layout.n_state_slots = 3;
  EXPECT_NE(create(good.get()), nullptr);
}

TEST_P(KvLayersTest, AttentionOverKAndVOfDifferentWidthsMatchesNaive) {
  const uint32_t H = 4, KVH = 2, KD = 24, VD = 16;
  for (auto codec : {builtin_f32_codec(), builtin_f16_codec()}) {
    Layout l(codec);
    l.attention_layer(SL_KV_FULL, 2, 16, 16);
    l.attention_layer(SL_KV_FULL, KVH, KD, VD);
    {
      StepGraph g;
      const auto p = attention_params(1, H, KVH, KD, VD, 0);
      g.attention(g.buffer(nullptr, 1, H * KD), StepGraph::kNone, p, g.buffer(nullptr, 1, H * VD), "attention");
      if (!backend().has_cap(SL_CAP_KV_LAYERS) || !supports(g, &l.get()))
        GTEST_SKIP() << "the backend runs no attention of V narrower than K";
    }
    sl_kv_cache* cache = create(l.get());
    ASSERT_NE(cache, nullptr);
    // Two sequences, 40 and 19 positions, on scattered pages, written in one batch.
    const std::vector<int32_t> table = {6, 1, 3, 0, 7, 2};  // 3 pages each
    const int32_t len[2] = {40, 19};
    std::vector<int32_t> positions, slots;
    std::vector<float> k_all, v_all;
    std::vector<float> kref[2], vref[2];
    for (int s = 0; s < 2; ++s) {
      const auto k = random(std::size_t(len[s]) * KVH * KD), v = random(std::size_t(len[s]) * KVH * VD);
      kref[s] = l.codecs[2]->stored(k, KD);
      vref[s] = l.codecs[3]->stored(v, VD);
      k_all.insert(k_all.end(), k.begin(), k.end());
      v_all.insert(v_all.end(), v.begin(), v.end());
      for (int32_t p = 0; p < len[s]; ++p) {
        positions.push_back(p);
        slots.push_back(s);
      }
    }
    begin_batch(positions, slots, 2, 3, table);
    auto dk = upload(k_all), dv = upload(v_all);
    sl_error err{};
    ASSERT_EQ(ops().kv_write(cache, 1, dk.get(), dv.get(), &err), SL_OK) << err.message;
    // Every position (runs of prefill), then single tokens (decode) with a window of 9.
    for (const uint32_t window : {0u, 9u}) {
      std::vector<int32_t> qpos = positions, qslot = slots;
      if (window) {
        qpos = {39, 20, 18, 0};
        qslot = {0, 0, 1, 1};
      }
      begin_batch(qpos, qslot, 2, 3, table);
      const auto q = random(qpos.size() * H * KD);
      auto dq = upload(q), out = zeros(qpos.size() * H * VD);
      const auto p = attention_params(1, H, KVH, KD, VD, window);
      ASSERT_EQ(ops().attention(cache, 1, dq.get(), &p, nullptr, out.get(), &err), SL_OK) << err.message;
      const auto got = download(out, qpos.size() * H * VD);
      for (std::size_t t = 0; t < qpos.size(); ++t)
        for (uint32_t h = 0; h < H; ++h) {
          const int32_t pos = qpos[t], lo = window ? std::max<int32_t>(0, pos - int32_t(window) + 1) : 0;
          const auto ref = naive(q.data() + (t * H + h) * KD, kref[qslot[t]], vref[qslot[t]], h / (H / KVH), KVH, KD, VD, lo, pos,
                                 p.scale);
          for (uint32_t d = 0; d < VD; ++d)
            ASSERT_NEAR(got[(t * H + h) * VD + d], ref.out[d], tolerance(backend(), ref, d, p.scale, KD)) << "token " << t << " head " << h << " window " << window;
        }
    }
    // K and V of the wrong width for the layer: refused.
    begin_batch({0}, {0}, 1, 1, {0});
    auto narrow = zeros(KVH * 16);
    EXPECT_NE(ops().kv_write(cache, 1, narrow.get(), narrow.get(), &err), SL_OK);
  }
}

TEST_P(KvLayersTest, LayersOfTheCachesOwnGeometryRunBesideLayersOfOthers) {
  if (!backend().has_cap(SL_CAP_KV_LAYERS)) GTEST_SKIP() << "no per-layer caches (SL_CAP_KV_LAYERS)";
  // Layers 0 and 3 of the layout's own shape (2 heads of 16, what every backend's kernels run),
  // between a layer of other widths and a recurrent one: their pages where they always were.
  const uint32_t H = 4, KVH = 2, D = 16;
  Layout l(builtin_f16_codec());
  l.attention_layer(SL_KV_FULL, KVH, D, D);
  l.attention_layer(SL_KV_FULL, 1, 24, 8);
  l.state_layer(64);
  l.attention_layer(SL_KV_FULL, KVH, D, D);
  l.layout.n_state_slots = 2;
  sl_kv_cache* cache = create(l.get());
  ASSERT_NE(cache, nullptr);
  const int32_t n = 21;
  std::vector<int32_t> positions(n), slots(n, 0);
  for (int32_t i = 0; i < n; ++i) positions[i] = i;
  const std::vector<int32_t> pages = {5, 2};
  std::vector<float> kref[4], vref[4];
  for (uint32_t layer : {0u, 3u}) {
    begin_batch(positions, slots, 1, 2, pages);
    const auto k = random(std::size_t(n) * KVH * D), v = random(std::size_t(n) * KVH * D);
    kref[layer] = l.k16.stored(k, D);
    vref[layer] = l.v16.stored(v, D);
    auto dk = upload(k), dv = upload(v);
    sl_error err{};
    ASSERT_EQ(ops().kv_write(cache, layer, dk.get(), dv.get(), &err), SL_OK) << err.message;
  }
  // The queries in runs of fewer than 16 positions: a longer run of one sequence may go to a prefill
  // kernel that rounds the queries to f16 (kernels_cl/attention_mma.cl, checked against its own bound
  // by opencl_mma_attention_test); this test is about where each layer's pages lie, held to float.
  for (uint32_t layer : {0u, 3u})
    for (const auto& [first, count] : {std::pair<int32_t, int32_t>{0, 11}, std::pair<int32_t, int32_t>{11, n - 11}}) {
      const std::vector<int32_t> run_positions(positions.begin() + first, positions.begin() + first + count), run_slots(count, 0);
      begin_batch(run_positions, run_slots, 1, 2, pages);
      const auto q = random(std::size_t(count) * H * D);
      auto dq = upload(q), out = zeros(std::size_t(count) * H * D);
      const auto p = attention_params(layer, H, KVH, D, D, 0);
      sl_error err{};
      ASSERT_EQ(ops().attention(cache, layer, dq.get(), &p, nullptr, out.get(), &err), SL_OK) << err.message;
      const auto got = download(out, std::size_t(count) * H * D);
      for (int32_t t = 0; t < count; ++t)
        for (uint32_t h = 0; h < H; ++h) {
          const auto ref =
              naive(q.data() + (std::size_t(t) * H + h) * D, kref[layer], vref[layer], h / (H / KVH), KVH, D, D, 0, first + t, p.scale);
          for (uint32_t d = 0; d < D; ++d)
            ASSERT_NEAR(got[(std::size_t(t) * H + h) * D + d], ref.out[d], tolerance(backend(), ref, d, p.scale, D))
                << "layer " << layer << " position " << first + t;
        }
    }
  // The recurrent layer has no K/V to write or attend.
  begin_batch(positions, slots, 1, 2, pages);
  auto zero = zeros(std::size_t(n) * KVH * D);
  sl_error err{};
  EXPECT_NE(ops().kv_write(cache, 2, zero.get(), zero.get(), &err), SL_OK);
}

TEST_P(KvLayersTest, SlidingWindowLayerReadsOnlyTheWindowsPages) {
  if (!backend().has_cap(SL_CAP_KV_LAYERS) || !backend().has_cap(SL_CAP_KV_WINDOW_PAGES))
    GTEST_SKIP() << "no window pages (SL_CAP_KV_WINDOW_PAGES)";
  const uint32_t H = 4, KVH = 2, D = 16, W = 10;
  Layout l(builtin_f32_codec());
  l.attention_layer(SL_KV_FULL, KVH, D, D);
  l.attention_layer(SL_KV_WINDOW, KVH, D, D, W);
  l.layout.n_window_pages = 5;
  sl_kv_cache* cache = create(l.get());
  ASSERT_NE(cache, nullptr);
  // 60 positions of one sequence; the window layer's blocks on window pages 3, 0, 4, 1.
  const int32_t n = 60;
  const auto k = random(std::size_t(n) * KVH * D), v = random(std::size_t(n) * KVH * D);
  std::vector<int32_t> positions(n), slots(n, 0);
  for (int32_t i = 0; i < n; ++i) positions[i] = i;
  const std::vector<int32_t> pages = {0, 1, 2, 3}, window = {3, 0, 4, 1};
  begin_batch(positions, slots, 1, 4, pages, &window);
  auto dk = upload(k), dv = upload(v);
  sl_error err{};
  ASSERT_EQ(ops().kv_write(cache, 1, dk.get(), dv.get(), &err), SL_OK) << err.message;
  // Blocks 0 and 1 leave the window of every query from 41 on: released, and page 3 (block 0's)
  // rewritten by another sequence.
  const std::vector<int32_t> reused = {3};
  begin_batch(std::vector<int32_t>{0, 1, 2}, std::vector<int32_t>(3, 0), 1, 1, {5}, &reused);
  auto junk = upload(std::vector<float>(3 * KVH * D, 500.0f));
  ASSERT_EQ(ops().kv_write(cache, 1, junk.get(), junk.get(), &err), SL_OK) << err.message;
  const std::vector<int32_t> released = {-1, -1, 4, 1};
  std::vector<int32_t> qpos;
  for (int32_t p = 42; p < 60; ++p) qpos.push_back(p);  // a run of 18: the prefill path
  for (const auto& run : {qpos, std::vector<int32_t>{59}, std::vector<int32_t>{47}}) {
    begin_batch(run, std::vector<int32_t>(run.size(), 0), 1, 4, pages, &released);
    const auto q = random(run.size() * H * D);
    auto dq = upload(q), out = zeros(run.size() * H * D);
    const auto p = attention_params(1, H, KVH, D, D, W);
    ASSERT_EQ(ops().attention(cache, 1, dq.get(), &p, nullptr, out.get(), &err), SL_OK) << err.message;
    const auto got = download(out, run.size() * H * D);
    for (std::size_t t = 0; t < run.size(); ++t)
      for (uint32_t h = 0; h < H; ++h) {
        const auto ref = naive(q.data() + (t * H + h) * D, k, v, h / (H / KVH), KVH, D, D, run[t] - int32_t(W) + 1, run[t], p.scale);
        for (uint32_t d = 0; d < D; ++d) ASSERT_NEAR(got[(t * H + h) * D + d], ref.out[d], tolerance(backend(), ref, d, p.scale, D)) << "position " << run[t];
      }
  }
  // A query whose window reaches a released block, or a node reading further back than the layer
  // keeps, is refused — not answered from whatever the page holds now.
  begin_batch({40}, {0}, 1, 4, pages, &released);  // its window starts at 31, in block 1
  auto q = upload(random(H * D)), out = zeros(H * D);
  auto p = attention_params(1, H, KVH, D, D, W);
  EXPECT_NE(ops().attention(cache, 1, q.get(), &p, nullptr, out.get(), &err), SL_OK);
  begin_batch({59}, {0}, 1, 4, pages, &released);
  p.window = 0;
  EXPECT_NE(ops().attention(cache, 1, q.get(), &p, nullptr, out.get(), &err), SL_OK);
  EXPECT_NE(std::string(err.message).find("window"), std::string::npos) << err.message;
  p.window = W + 1;
  EXPECT_NE(ops().attention(cache, 1, q.get(), &p, nullptr, out.get(), &err), SL_OK);
  // Without a window table the layer has no pages to read.
  begin_batch({59}, {0}, 1, 4, pages);
  p.window = W;
  EXPECT_NE(ops().attention(cache, 1, q.get(), &p, nullptr, out.get(), &err), SL_OK);
}

TEST_P(KvLayersTest, LayersOfTheirOwnWidthsAndWindowsBesideUniformOnesWithARecentWindow) {
  if (!backend().has_cap(SL_CAP_KV_LAYERS) || !backend().has_cap(SL_CAP_KV_WINDOW_PAGES) ||
      !backend().has_cap(SL_CAP_KV_RECENT_WINDOW))
    GTEST_SKIP() << "no window pages or recent window (SL_CAP_KV_WINDOW_PAGES, SL_CAP_KV_RECENT_WINDOW)";
  // A model of every kind at once: layers of the layout's widths (0, FULL; 3, WINDOW), a window layer
  // whose K is wider than its V (1), and a layer of one wide head (2), with the recent window's exact
  // rows kept per layer in its widths. f16 rows: the recent copies equal the stored rows, so a
  // recent row read from the wrong place shows as surely as a page read from the wrong table.
  const uint32_t H = 4, W = 10, n = 60;
  struct Shape {
    uint32_t kind, heads, k_dim, v_dim;
  };
  const Shape shapes[] = {{SL_KV_FULL, 2, 16, 16}, {SL_KV_WINDOW, 2, 24, 16}, {SL_KV_FULL, 1, 64, 64}, {SL_KV_WINDOW, 2, 16, 16}};
  Layout l(builtin_f16_codec());
  for (const Shape& s : shapes) l.attention_layer(s.kind, s.heads, s.k_dim, s.v_dim, s.kind == SL_KV_WINDOW ? W : 0);
  l.layout.n_window_pages = 5;
  l.layout.recent_window = 20;
  l.layout.n_recent_pages = 6;
  sl_kv_cache* cache = create(l.get());
  ASSERT_NE(cache, nullptr);
  std::vector<int32_t> positions(n), slots(n, 0);
  for (uint32_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(i);
  const std::vector<int32_t> pages = {0, 1, 2, 3}, window = {3, 0, 4, 1}, recent = {-1, -1, 5, 2};
  std::vector<float> kref[4], vref[4];
  begin_batch(positions, slots, 1, 4, pages, &window, nullptr, &recent);
  sl_error err{};
  for (uint32_t layer = 0; layer < 4; ++layer) {
    const Shape& s = shapes[layer];
    const auto k = random(std::size_t(n) * s.heads * s.k_dim), v = random(std::size_t(n) * s.heads * s.v_dim);
    kref[layer] = l.codecs[2 * layer]->stored(k, s.k_dim);
    vref[layer] = l.codecs[2 * layer + 1]->stored(v, s.v_dim);
    auto dk = upload(k), dv = upload(v);
    ASSERT_EQ(ops().kv_write(cache, layer, dk.get(), dv.get(), &err), SL_OK) << "layer " << layer << ": " << err.message;
  }
  // The window layers' blocks 0 and 1 leave every query's window from 41 on: released, and window
  // page 3 (block 0's) and recent page 5 rewritten by another sequence.
  const std::vector<int32_t> reused = {3}, reused_recent = {5};
  begin_batch(std::vector<int32_t>{0, 1, 2}, std::vector<int32_t>(3, 0), 1, 1, {6}, &reused, nullptr, &reused_recent);
  for (uint32_t layer : {1u, 3u}) {
    auto junk_k = upload(std::vector<float>(3 * shapes[layer].heads * shapes[layer].k_dim, 500.0f));
    auto junk_v = upload(std::vector<float>(3 * shapes[layer].heads * shapes[layer].v_dim, 500.0f));
    ASSERT_EQ(ops().kv_write(cache, layer, junk_k.get(), junk_v.get(), &err), SL_OK) << err.message;
  }
  const std::vector<int32_t> released = {-1, -1, 4, 1}, recent_now = {-1, -1, -1, 2};  // block 2's recent page went too
  std::vector<int32_t> run;
  for (int32_t p = 45; p < 60; ++p) run.push_back(p);  // 15 queries: the portable kernels, held to float
  for (const auto& queries : {run, std::vector<int32_t>{59}, std::vector<int32_t>{50}}) {
    begin_batch(queries, std::vector<int32_t>(queries.size(), 0), 1, 4, pages, &released, nullptr, &recent_now);
    for (uint32_t layer = 0; layer < 4; ++layer) {
      const Shape& s = shapes[layer];
      const uint32_t window_of = s.kind == SL_KV_WINDOW ? W : 0;
      const auto q = random(queries.size() * H * s.k_dim);
      auto dq = upload(q), out = zeros(queries.size() * H * s.v_dim);
      const auto p = attention_params(layer, H, s.heads, s.k_dim, s.v_dim, window_of);
      ASSERT_EQ(ops().attention(cache, layer, dq.get(), &p, nullptr, out.get(), &err), SL_OK) << "layer " << layer << ": " << err.message;
      const auto got = download(out, queries.size() * H * s.v_dim);
      for (std::size_t t = 0; t < queries.size(); ++t)
        for (uint32_t h = 0; h < H; ++h) {
          const int32_t pos = queries[t], lo = window_of ? pos - int32_t(W) + 1 : 0;
          const auto ref = naive(q.data() + (t * H + h) * s.k_dim, kref[layer], vref[layer], h / (H / s.heads), s.heads, s.k_dim, s.v_dim,
                                 lo, pos, p.scale);
          for (uint32_t d = 0; d < s.v_dim; ++d)
            ASSERT_NEAR(got[(t * H + h) * s.v_dim + d], ref.out[d], tolerance(backend(), ref, d, p.scale, s.k_dim)) << "layer " << layer << " position " << pos;
        }
    }
  }
}

TEST_P(KvLayersTest, StateSlotsAreClearedWrittenReadAndCopied) {
  if (!backend().keeps_state()) GTEST_SKIP() << "no recurrent state (SL_CAP_KV_LAYERS, kv_copy_state)";
  {
    StepGraph g;
    g.copy(g.state(1, 2, 8), g.buffer(nullptr, 2, 8), "state read");
    if (!supports(g, nullptr)) GTEST_SKIP() << "the backend declines COPY of a state";
  }
  Layout l(builtin_f32_codec());
  l.attention_layer(SL_KV_FULL, 2, 16, 16);
  l.state_layer(48);  // 12 floats
  l.state_layer(16);  // 4 floats
  l.layout.n_state_slots = 5;
  sl_kv_cache* cache = create(l.get());
  ASSERT_NE(cache, nullptr);
  sl_error err{};
  for (uint32_t slot = 0; slot < 5; ++slot) ASSERT_EQ(api()->kv_clear_state(be(), cache, slot, &err), SL_OK) << err.message;
  const std::vector<int32_t> states = {4, 1};
  begin_batch({3, 7}, {0, 1}, 2, 1, {0, 1}, nullptr, &states);
  auto read = [&](uint32_t layer, uint64_t offset, uint32_t n) {
    auto out = upload(std::vector<float>(2 * n, -1.0f));
    EXPECT_EQ(ops().state_read(cache, layer, offset, n, out.get(), &err), SL_OK) << err.message;
    return download(out, 2 * n);
  };
  EXPECT_EQ(read(1, 0, 12), std::vector<float>(24, 0.0f));
  const auto x = random(24), y = random(8);
  auto dx = upload(x), dy = upload(y);
  ASSERT_EQ(ops().state_write(cache, 1, 0, 12, dx.get(), &err), SL_OK) << err.message;
  ASSERT_EQ(ops().state_write(cache, 2, 0, 4, dy.get(), &err), SL_OK) << err.message;
  EXPECT_EQ(read(1, 0, 12), x);
  EXPECT_EQ(read(2, 0, 4), y);
  EXPECT_EQ(read(1, 5, 2), (std::vector<float>{x[5], x[6], x[17], x[18]}));
  // A snapshot of sequence 0's state (slot 4) in slot 2; sequence 0 goes on, then returns to it.
  ASSERT_EQ(api()->kv_copy_state(be(), cache, 4, 2, &err), SL_OK) << err.message;
  const auto changed = random(24);
  auto dchanged = upload(changed);
  ASSERT_EQ(ops().state_write(cache, 1, 0, 12, dchanged.get(), &err), SL_OK) << err.message;
  ASSERT_EQ(api()->kv_copy_state(be(), cache, 2, 4, &err), SL_OK) << err.message;
  auto restored = read(1, 0, 12);  // sequence 0 back at the snapshot, sequence 1 (slot 1) as written
  EXPECT_EQ(std::vector<float>(restored.begin(), restored.begin() + 12), std::vector<float>(x.begin(), x.begin() + 12));
  EXPECT_EQ(std::vector<float>(restored.begin() + 12, restored.end()), std::vector<float>(changed.begin() + 12, changed.end()));
  EXPECT_EQ(read(2, 0, 4), y);  // every state layer went with it
  ASSERT_EQ(api()->kv_clear_state(be(), cache, 1, &err), SL_OK) << err.message;
  const auto after = read(1, 0, 12);
  EXPECT_EQ(std::vector<float>(after.begin(), after.begin() + 12), std::vector<float>(x.begin(), x.begin() + 12));
  EXPECT_EQ(std::vector<float>(after.begin() + 12, after.end()), std::vector<float>(12, 0.0f));
  // Bad slots, layers and ranges: refused, never read or written.
  EXPECT_NE(api()->kv_copy_state(be(), cache, 5, 0, &err), SL_OK);
  EXPECT_NE(api()->kv_clear_state(be(), cache, 9, &err), SL_OK);
  auto out = zeros(2 * 12);
  EXPECT_NE(ops().state_read(cache, 0, 0, 4, out.get(), &err), SL_OK);   // an attention layer keeps no state
  EXPECT_NE(ops().state_read(cache, 2, 2, 4, out.get(), &err), SL_OK);   // past the layer's 4 floats
  const std::vector<int32_t> bad_slots = {4, 5};
  begin_batch({3, 7}, {0, 1}, 2, 1, {0, 1}, nullptr, &bad_slots);
  EXPECT_NE(ops().state_read(cache, 1, 0, 12, out.get(), &err), SL_OK);
  begin_batch({3, 7}, {0, 1}, 2, 1, {0, 1});
  EXPECT_NE(ops().state_read(cache, 1, 0, 12, out.get(), &err), SL_OK);  // no state slots in the batch
}

INSTANTIATE_TEST_SUITE_P(Backends, KvLayersTest, ::testing::ValuesIn(backends_under_test()), backend_test_name);

}  // namespace
}  // namespace sluice::test
