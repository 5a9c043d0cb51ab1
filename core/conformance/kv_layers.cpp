// Per-layer caches (ABI 2.0's sl_kv_layout.layers), against the host's arithmetic:
// - layers of their own widths beside the layout's: K wider than V (MLA's latent K), V wider than K,
//   a wider head (Gemma 4's): KV_WRITE of each, ATTENTION with v_head_dim, over scattered pages,
//   prefill runs, single tokens in a window and over 600 keys;
// - a sliding-window layer's pages from the window table: blocks no query's window reaches left out
//   (-1) and their page overwritten by another sequence, as the host releases and reuses them;
// - recurrent state: kv_clear_state, COPY of an activation into a sequence's state and back (whole,
//   and a range of it), kv_copy_state from slot to slot — exactly;
// - the recurrent ops (2.2): CAUSAL_CONV and GATED_DELTA over two sequences whose tokens interleave
//   in a prefill step and then decode a token each, against the recurrences in double precision.
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "conformance/runner.h"
#include "plugin/builtin_codecs.h"

namespace sluice::conformance {
namespace {

constexpr double kExact = 1e-30;  // check()'s bound for values that must be equal

// The codecs of a layer, made for its widths, freed with the case.
struct LayerCodecs {
  const sl_kvcodec_api* api = nullptr;
  std::unique_ptr<sl_kvcodec, void (*)(sl_kvcodec*)> k{nullptr, nullptr}, v{nullptr, nullptr};
};

LayerCodecs make_codecs(Runner& r, const sl_kvcodec_api* api, uint32_t k_dim, uint32_t v_dim) {
  LayerCodecs c;
  c.api = api;
  sl_error err{};
  sl_kvcodec *k = nullptr, *v = nullptr;
  r.expect_ok(api->create(k_dim, SL_KV_KEYS, "", &k, &err), err, "codec create");
  c.k = {k, api->destroy};
  r.expect_ok(api->create(v_dim, SL_KV_VALUES, "", &v, &err), err, "codec create");
  c.v = {v, api->destroy};
  return c;
}

// Rows as the cache will hold them: encoded and decoded by the codec.
std::vector<float> codec_rounded(const sl_kvcodec_api* api, const sl_kvcodec* codec, const std::vector<float>& x, uint32_t dim) {
  sl_kv_format f{};
  f.struct_size = sizeof(f);
  api->get_format(codec, &f);
  const uint32_t rows = static_cast<uint32_t>(x.size() / dim);
  std::vector<std::byte> stored(std::size_t(rows) * f.row_bytes);
  std::vector<float> out(x.size());
  sl_error err{};
  api->encode(codec, x.data(), rows, stored.data(), &err);
  api->decode(codec, stored.data(), rows, out.data(), &err);
  return out;
}

// A cache of two layers — layer 0 of the layout's own geometry (heads 2, dim 16), layer 1 the one
// under test — created for the case and destroyed with it.
struct TwoLayerCache {
  sl_kv_layout layout{};
  sl_kv_layer layers[2]{};
  LayerCodecs base, tested;
  std::unique_ptr<sl_kv_cache, std::function<void(sl_kv_cache*)>> cache;
};

std::unique_ptr<TwoLayerCache> two_layer_cache(Runner& r, const sl_kvcodec_api* api, const sl_kv_layer& layer1, uint32_t n_pages,
                                               uint32_t n_window_pages, uint32_t n_state_slots) {
  auto c = std::make_unique<TwoLayerCache>();
  c->base = make_codecs(r, api, 16, 16);
  sl_kv_layer& l0 = c->layers[0];
  l0.struct_size = sizeof(sl_kv_layer);
  l0.kind = SL_KV_FULL;
  l0.n_kv_heads = 2;
  l0.k_head_dim = l0.v_head_dim = 16;
  l0.k_api = l0.v_api = api;
  l0.k_codec = c->base.k.get();
  l0.v_codec = c->base.v.get();
  c->layers[1] = layer1;
  c->layers[1].struct_size = sizeof(sl_kv_layer);
  if (layer1.kind != SL_KV_STATE) {
    c->tested = make_codecs(r, api, layer1.k_head_dim, layer1.v_head_dim);
    c->layers[1].k_api = c->layers[1].v_api = api;
    c->layers[1].k_codec = c->tested.k.get();
    c->layers[1].v_codec = c->tested.v.get();
  }
  sl_kv_layout& L = c->layout;
  L.struct_size = sizeof(L);
  L.n_layers = 2;
  L.n_kv_heads = 2;
  L.head_dim = 16;
  L.page_tokens = 16;
  L.n_pages = n_pages;
  L.k_api = L.v_api = api;
  L.k_codec = c->base.k.get();
  L.v_codec = c->base.v.get();
  L.layers = c->layers;
  L.n_window_pages = n_window_pages;
  L.n_state_slots = n_state_slots;
  sl_kv_cache* raw = nullptr;
  sl_error err{};
  r.expect_ok(r.api()->kv_create(r.raw(), &L, &raw, &err), err, "kv_create");
  const sl_backend_api* be_api = r.api();
  sl_backend* be = r.raw();
  c->cache = {raw, [be_api, be](sl_kv_cache* k) { be_api->kv_destroy(be, k); }};
  r.ops().set_kv_layout(c->layout);
  return c;
}


struct Queries {
  std::vector<int32_t> positions, slots;
};

// Attends layer 1 for the queries and checks each output against softmax attention over the
// codec-rounded keys and values kref/vref ([seq][position][head][dim]) within the window.
void attend_and_check(Runner& r, TwoLayerCache& c, const Queries& q, uint32_t n_heads, uint32_t window,
                      const std::vector<std::vector<float>>& kref, const std::vector<std::vector<float>>& vref) {
  const sl_kv_layer& l = c.layers[1];
  const uint32_t KD = l.k_head_dim, VD = l.v_head_dim, KVH = l.n_kv_heads, group = n_heads / KVH;
  const auto qv = r.random(q.positions.size() * n_heads * KD);
  auto dq = r.upload(qv), out = r.zeros(q.positions.size() * n_heads * VD);
  sl_attention_params p{};
  p.struct_size = sizeof(p);
  p.n_heads = n_heads;
  p.n_kv_heads = KVH;
  p.head_dim = KD;
  p.v_head_dim = VD;
  p.scale = static_cast<float>(1.0 / std::sqrt(double(KD)));
  p.window = window;
  sl_error err{};
  r.expect_ok(r.ops().attention(c.cache.get(), 1, dq.get(), &p, nullptr, out.get(), &err), err, "attention");
  const auto got = r.download(out, q.positions.size() * n_heads * VD);
  const bool matrix_units = r.matrix_units();
  for (std::size_t t = 0; t < q.positions.size(); ++t) {
    const uint32_t seq = static_cast<uint32_t>(q.slots[t]);
    const int32_t pos = q.positions[t], lo = window ? std::max<int32_t>(0, pos - int32_t(window) + 1) : 0;
    for (uint32_t h = 0; h < n_heads; ++h) {
      const uint32_t kvh = h / group;
      const float* qh = qv.data() + (t * n_heads + h) * KD;
      std::vector<double> sc;
      double m = -INFINITY, most = 0;  // most: the largest Σ|q·k| of a key
      for (int32_t j = lo; j <= pos; ++j) {
        double dot = 0, dot_mag = 0;
        for (uint32_t d = 0; d < KD; ++d) {
          const double term = double(qh[d]) * kref[seq][(std::size_t(j) * KVH + kvh) * KD + d];
          dot += term;
          dot_mag += std::abs(term);
        }
        most = std::max(most, dot_mag);
        sc.push_back(dot * p.scale);
        m = std::max(m, sc.back());
      }
      double sum = 0;
      for (auto& x : sc) sum += (x = std::exp(x - m));
      for (uint32_t d = 0; d < VD; ++d) {
        double ref = 0, mag = 0;
        for (int32_t j = lo; j <= pos; ++j) {
          const double term = sc[j - lo] / sum * vref[seq][(std::size_t(j) * KVH + kvh) * VD + d];
          ref += term;
          mag += std::abs(term);
        }
        // A device with matrix units may attend prefill runs with f16 inputs (the f16 bound, derived).
        const double f16_tol = matrix_units ? f16_attention_tolerance(p.scale, KD, most, pos - lo + 1, mag) : 0.0;
        r.check(got[(t * n_heads + h) * VD + d], ref, std::max(1e-4 * (mag + 1.0), f16_tol),
                "token " + std::to_string(t) + " head " + std::to_string(h));
      }
    }
  }
}

// Whether the backend keeps per-layer caches and runs `node` on one (an attention of the layer's
// widths, or a state copy), asked with the layout it describes.
Needs per_layer(std::function<bool(const BackendHandle&)> runs) {
  return [runs](const BackendHandle& be) -> std::string {
    if (!be.has_cap(SL_CAP_KV_LAYERS)) return "no per-layer caches (SL_CAP_KV_LAYERS)";
    return runs(be) ? std::string() : std::string("unsupported");
  };
}

// A layer of its own widths beside one of the layout's (2 heads of 16), attended by 4 query heads.
struct LayerWidths {
  const char* name;
  uint32_t n_kv_heads, k_dim, v_dim;
};

bool runs_layer_of(const BackendHandle& be, const LayerWidths& w) {
  sl_kv_layer layers[2]{};
  for (auto& l : layers) {
    l.struct_size = sizeof(l);
    l.n_kv_heads = 2;
    l.k_head_dim = l.v_head_dim = 16;
  }
  layers[1].n_kv_heads = w.n_kv_heads;
  layers[1].k_head_dim = w.k_dim;
  layers[1].v_head_dim = w.v_dim;
  sl_kv_layout L{};
  L.struct_size = sizeof(L);
  L.n_layers = 2;
  L.n_kv_heads = 2;
  L.head_dim = 16;
  L.layers = layers;
  StepGraph g;
  sl_attention_params p{};
  p.layer = 1;
  p.n_heads = 4;
  p.n_kv_heads = w.n_kv_heads;
  p.head_dim = w.k_dim;
  p.v_head_dim = w.v_dim;
  p.scale = 0.2f;
  g.attention(g.buffer(nullptr, 1, 4 * w.k_dim), StepGraph::kNone, p, g.buffer(nullptr, 1, 4 * w.v_dim), "attention");
  const sl_graph& view = g.view();
  return be.supports(view.nodes[0], std::span<const sl_tensor>(view.tensors, view.n_tensors), &L);
}

bool runs_state_copy(const BackendHandle& be) {
  if (!be.keeps_state()) return false;
  StepGraph g;
  g.copy(g.buffer(nullptr, 2, 10), g.state(1, 2, 10), "state write");
  g.copy(g.state(1, 2, 10), g.buffer(nullptr, 2, 10), "state read");
  const sl_graph& view = g.view();
  const std::span<const sl_tensor> tensors(view.tensors, view.n_tensors);
  return be.supports(view.nodes[0], tensors) && be.supports(view.nodes[1], tensors);
}

// Layers of other widths: MLA's K wider than V (also at DeepSeek-V3's latent widths), V wider than K,
// and Gemma 4's kind of wider head (one KV head of 64) — each written for three sequences on scattered pages, then attended by
// prefill runs, single tokens in a window, and single tokens over 600 keys (where a backend may
// split the keys and merge the splits' partial sums, V wide).
void run_layer_widths(Runner& r) {
  struct CodecCase {
    const char* name;
    const sl_kvcodec_api* api;
  };
  // DeepSeek-V3's latent cache: one KV head of K 512 + 64 and V 512 (blocks_mla.cpp).
  const LayerWidths widths[] = {{"K 24 / V 16 wide", 2, 24, 16}, {"V 32 / K 16 wide", 2, 16, 32}, {"head_dim 64 beside 16", 1, 64, 64},
                                {"MLA latent K 576 / V 512", 1, 576, 512}};
  for (const LayerWidths& w : widths)
    for (const CodecCase cc : {CodecCase{"f32", builtin_f32_codec()}, CodecCase{"f16", builtin_f16_codec()}}) {
      r.op(std::string("kv layers: ") + w.name + " " + cc.name, per_layer([w](const BackendHandle& be) { return runs_layer_of(be, w); }),
           [&] {
             sl_kv_layer layer{};
             layer.kind = SL_KV_FULL;
             layer.n_kv_heads = w.n_kv_heads;
             layer.k_head_dim = w.k_dim;
             layer.v_head_dim = w.v_dim;
             const uint32_t KVH = w.n_kv_heads, KD = w.k_dim, VD = w.v_dim;
             // Three sequences (37, 21 and 600 positions) on scattered pages, written in one batch.
             const std::vector<uint32_t> lengths = {37, 21, 600};
             const uint32_t max_pages = 38, n_pages = 3 + 2 + 38;
             auto c = two_layer_cache(r, cc.api, layer, n_pages, 0, 0);
             std::vector<int32_t> table(3 * max_pages, -1);
             uint32_t next = 0;
             for (uint32_t seq = 0; seq < 3; ++seq)
               for (uint32_t b = 0; b < (lengths[seq] + 15) / 16; ++b) table[seq * max_pages + b] = static_cast<int32_t>((next++ * 17) % n_pages);
             std::vector<std::vector<float>> kref(3), vref(3);
             std::vector<float> k_all, v_all;
             Queries all;
             for (uint32_t seq = 0; seq < 3; ++seq) {
               const auto k = r.random(std::size_t(lengths[seq]) * KVH * KD), v = r.random(std::size_t(lengths[seq]) * KVH * VD);
               kref[seq] = codec_rounded(cc.api, c->tested.k.get(), k, KD);
               vref[seq] = codec_rounded(cc.api, c->tested.v.get(), v, VD);
               k_all.insert(k_all.end(), k.begin(), k.end());
               v_all.insert(v_all.end(), v.begin(), v.end());
               for (uint32_t p = 0; p < lengths[seq]; ++p) {
                 all.positions.push_back(static_cast<int32_t>(p));
                 all.slots.push_back(static_cast<int32_t>(seq));
               }
             }
             r.begin_batch(all.positions, all.slots, 3, max_pages, table);
             auto dk = r.upload(k_all), dv = r.upload(v_all);
             sl_error err{};
             r.expect_ok(r.ops().kv_write(c->cache.get(), 1, dk.get(), dv.get(), &err), err, "kv_write");
             r.new_case("prefill of two sequences");
             const Queries two{std::vector<int32_t>(all.positions.begin(), all.positions.begin() + 58),
                               std::vector<int32_t>(all.slots.begin(), all.slots.begin() + 58)};
             r.begin_batch(two.positions, two.slots, 3, max_pages, table);
             attend_and_check(r, *c, two, 4, 0, kref, vref);
             r.new_case("single tokens, window 5");
             const Queries some{{36, 3, 20, 0}, {0, 0, 1, 1}};
             r.begin_batch(some.positions, some.slots, 3, max_pages, table);
             attend_and_check(r, *c, some, 4, 5, kref, vref);
             r.new_case("single tokens over 600 keys");
             const Queries deep{{599, 36}, {2, 0}};
             r.begin_batch(deep.positions, deep.slots, 3, max_pages, table);
             attend_and_check(r, *c, deep, 4, 0, kref, vref);
           });
    }
}

void run_window_pages(Runner& r) {
  auto needs = [](const BackendHandle& be) -> std::string {
    if (!be.has_cap(SL_CAP_KV_LAYERS) || !be.has_cap(SL_CAP_KV_WINDOW_PAGES)) return "no window pages (SL_CAP_KV_WINDOW_PAGES)";
    return {};
  };
  r.op("kv layers: sliding window's pages f16", needs, [&] {
    sl_kv_layer windowed{};
    windowed.kind = SL_KV_WINDOW;
    windowed.n_kv_heads = 2;
    windowed.k_head_dim = windowed.v_head_dim = 16;
    windowed.window = 7;
    const sl_kvcodec_api* api = builtin_f16_codec();
    auto c = two_layer_cache(r, api, windowed, 4, 6, 0);
    // 45 positions of one sequence, the window layer's blocks on window pages 4, 1, 5.
    const uint32_t n = 45;
    const auto k = r.random(std::size_t(n) * 32), v = r.random(std::size_t(n) * 32);
    std::vector<std::vector<float>> kref = {codec_rounded(api, c->tested.k.get(), k, 16)};
    std::vector<std::vector<float>> vref = {codec_rounded(api, c->tested.v.get(), v, 16)};
    Queries all;
    for (uint32_t p = 0; p < n; ++p) {
      all.positions.push_back(static_cast<int32_t>(p));
      all.slots.push_back(0);
    }
    const std::vector<int32_t> pages = {0, 1, 2}, window = {4, 1, 5};
    r.begin_batch(all.positions, all.slots, 1, 3, pages, &window);
    auto dk = r.upload(k), dv = r.upload(v);
    sl_error err{};
    r.new_case("every position, every block held");
    r.expect_ok(r.ops().kv_write(c->cache.get(), 1, dk.get(), dv.get(), &err), err, "kv_write");
    attend_and_check(r, *c, all, 2, 7, kref, vref);
    // Block 0 leaves every later query's window: released (-1), and its page rewritten by another
    // sequence — the window's queries must not read it.
    const Queries other{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, std::vector<int32_t>(16, 0)};
    const std::vector<int32_t> other_window = {4};
    r.begin_batch(other.positions, other.slots, 1, 1, std::vector<int32_t>{3}, &other_window);
    auto junk = r.upload(std::vector<float>(16 * 32, 1000.0f));
    r.expect_ok(r.ops().kv_write(c->cache.get(), 1, junk.get(), junk.get(), &err), err, "kv_write");
    r.new_case("a run of 12 queries (33..44), block 0 released and reused");
    const Queries late{{33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44}, std::vector<int32_t>(12, 0)};
    const std::vector<int32_t> released = {-1, 1, 5};
    r.begin_batch(late.positions, late.slots, 1, 3, pages, &released);
    attend_and_check(r, *c, late, 2, 7, kref, vref);
    r.new_case("one query (44), blocks 0 and 1 released");
    const std::vector<int32_t> only_last = {-1, -1, 5};
    const Queries last{{44}, {0}};
    r.begin_batch(last.positions, last.slots, 1, 3, pages, &only_last);
    attend_and_check(r, *c, last, 2, 7, kref, vref);
  });
}

void run_state(Runner& r) {
  r.op("kv layers: recurrent state", per_layer(runs_state_copy), [&] {
    sl_kv_layer state{};
    state.kind = SL_KV_STATE;
    state.state_bytes = 40;  // 10 floats a sequence
    auto c = two_layer_cache(r, builtin_f32_codec(), state, 2, 0, 4);
    sl_kv_cache* cache = c->cache.get();
    const std::vector<int32_t> positions = {0, 0}, slots = {0, 1}, pages = {0, 1}, states = {2, 0};
    r.begin_batch(positions, slots, 2, 1, pages, nullptr, &states);
    sl_error err{};
    auto read = [&](const std::string& where, const std::vector<float>& want) {
      auto out = r.upload(std::vector<float>(20, -1.0f));
      r.expect_ok(r.ops().state_read(cache, 1, 0, 10, out.get(), &err), err, "state read");
      const auto got = r.download(out, 20);
      for (std::size_t i = 0; i < 20; ++i) r.check(got[i], want[i], kExact, where + ", value " + std::to_string(i));
    };
    r.new_case("cleared slots read as zeros");
    r.expect_ok(r.api()->kv_clear_state(r.raw(), cache, 2, &err), err, "kv_clear_state");
    r.expect_ok(r.api()->kv_clear_state(r.raw(), cache, 0, &err), err, "kv_clear_state");
    read("after kv_clear_state", std::vector<float>(20, 0.0f));
    r.new_case("written by COPY, read back by COPY");
    auto x = r.random(20);
    auto dx = r.upload(x);
    r.expect_ok(r.ops().state_write(cache, 1, 0, 10, dx.get(), &err), err, "state write");
    read("after a write", x);
    r.new_case("a range of the state (floats 4..6)");
    const auto part = r.random(6);
    auto dpart = r.upload(part);
    r.expect_ok(r.ops().state_write(cache, 1, 4, 3, dpart.get(), &err), err, "state write");
    for (uint32_t s = 0; s < 2; ++s)
      for (uint32_t i = 0; i < 3; ++i) x[s * 10 + 4 + i] = part[s * 3 + i];
    read("after a partial write", x);
    r.new_case("kv_copy_state to another slot, the source kept");
    r.expect_ok(r.api()->kv_copy_state(r.raw(), cache, 2, 3, &err), err, "kv_copy_state");
    const std::vector<int32_t> swapped = {0, 3};  // sequence 1 now reads the copy of sequence 0's state
    r.begin_batch(positions, slots, 2, 1, pages, nullptr, &swapped);
    std::vector<float> want(20);
    for (uint32_t i = 0; i < 10; ++i) {
      want[i] = x[10 + i];
      want[10 + i] = x[i];
    }
    read("the copy", want);
    r.new_case("a slot cleared again, the others kept");
    r.expect_ok(r.api()->kv_clear_state(r.raw(), cache, 0, &err), err, "kv_clear_state");
    for (uint32_t i = 0; i < 10; ++i) want[i] = 0.0f;
    read("after clearing slot 0", want);
  });
}

// Shapes of the recurrent ops' check: grouped value heads (4 value heads on 2 key heads), a 4-tap
// convolution over q, k and v together.
constexpr uint32_t kNK = 2, kNV = 4, kDK = 8, kDV = 6, kTaps = 4;
constexpr uint32_t kConvDim = 2 * kNK * kDK + kNV * kDV;
constexpr uint32_t kWindowFloats = (kTaps - 1) * kConvDim, kMatrixFloats = kNV * kDK * kDV;

bool runs_recurrent_ops(const BackendHandle& be) {
  if (!be.keeps_state()) return false;
  StepGraph g;
  sl_weight taps{}, rates{};
  taps.struct_size = rates.struct_size = sizeof(sl_weight);
  taps.dtype = rates.dtype = SL_DTYPE_F32;
  taps.rows = kConvDim;
  taps.cols = kTaps;
  rates.rows = 1;
  rates.cols = kNV;
  g.causal_conv(g.buffer(nullptr, 2, kConvDim), g.weight(taps), SL_ACT_SILU, g.buffer(nullptr, 2, kConvDim), g.state(1, 2, kWindowFloats),
                "conv");
  sl_gated_delta_params p{};
  p.n_k_heads = kNK;
  p.n_v_heads = kNV;
  p.k_head_dim = kDK;
  p.v_head_dim = kDV;
  p.scale = 0.35f;
  p.l2_eps = 1e-6f;
  g.gated_delta(g.buffer(nullptr, 2, kConvDim), g.buffer(nullptr, 2, kNV), g.buffer(nullptr, 2, kNV), g.weight(rates), p,
                g.buffer(nullptr, 2, kNV * kDV), g.state(1, 2, kMatrixFloats, kWindowFloats * 4), "delta");
  const sl_graph& view = g.view();
  const std::span<const sl_tensor> tensors(view.tensors, view.n_tensors);
  return be.supports(view.nodes[0], tensors) && be.supports(view.nodes[1], tensors);
}

void run_recurrent_ops(Runner& r) {
  r.op("recurrent ops: causal_conv and gated_delta", per_layer(runs_recurrent_ops), [&] {
    sl_kv_layer state{};
    state.kind = SL_KV_STATE;
    state.state_bytes = uint64_t(kWindowFloats + kMatrixFloats) * 4;
    auto c = two_layer_cache(r, builtin_f32_codec(), state, 2, 0, 4);
    sl_kv_cache* cache = c->cache.get();
    sl_error err{};
    r.expect_ok(r.api()->kv_clear_state(r.raw(), cache, 2, &err), err, "kv_clear_state");
    r.expect_ok(r.api()->kv_clear_state(r.raw(), cache, 0, &err), err, "kv_clear_state");
    const Weight taps = r.weight(SL_DTYPE_F32, kConvDim, kTaps);
    const Weight rates = r.weight(SL_DTYPE_F32, 1, kNV, 0.5f);
    sl_gated_delta_params p{};
    p.struct_size = sizeof(p);
    p.n_k_heads = kNK;
    p.n_v_heads = kNV;
    p.k_head_dim = kDK;
    p.v_head_dim = kDV;
    p.scale = 1.0f / std::sqrt(float(kDK));
    p.l2_eps = 1e-6f;
    // The reference's states, per sequence: the window [K - 1][C] and the matrices [head][k][v].
    std::vector<std::vector<double>> window(2, std::vector<double>(kWindowFloats, 0.0)), S(2, std::vector<double>(kMatrixFloats, 0.0));
    auto step = [&](const std::string& name, const std::vector<int32_t>& positions, const std::vector<int32_t>& seqs) {
      r.new_case(name);
      const std::vector<int32_t> pages = {0, 1}, slots = {2, 0};
      r.begin_batch(positions, seqs, 2, 1, pages, nullptr, &slots);
      const uint32_t n = static_cast<uint32_t>(positions.size());
      const auto x = r.random(std::size_t(n) * kConvDim), qkv = r.random(std::size_t(n) * kConvDim, 1.0f);
      const auto a = r.random(std::size_t(n) * kNV, 1.5f), b = r.random(std::size_t(n) * kNV, 1.5f);
      auto dx = r.upload(x), dqkv = r.upload(qkv), da = r.upload(a), db = r.upload(b);
      auto conv_out = r.zeros(std::size_t(n) * kConvDim), delta_out = r.zeros(std::size_t(n) * kNV * kDV);
      r.expect_ok(r.ops().causal_conv(cache, 1, dx.get(), &taps.w, SL_ACT_SILU, conv_out.get(), &err), err, "causal_conv");
      r.expect_ok(r.ops().gated_delta(cache, 1, kWindowFloats, dqkv.get(), da.get(), db.get(), &rates.w, p, delta_out.get(), &err), err,
                  "gated_delta");
      const auto got_conv = r.download(conv_out, std::size_t(n) * kConvDim);
      const auto got_delta = r.download(delta_out, std::size_t(n) * kNV * kDV);
      for (uint32_t t = 0; t < n; ++t) {
        const uint32_t s = static_cast<uint32_t>(seqs[t]);
        auto& w = window[s];
        for (uint32_t ch = 0; ch < kConvDim; ++ch) {
          double acc = double(taps.values[std::size_t(ch) * kTaps + kTaps - 1]) * x[std::size_t(t) * kConvDim + ch];
          for (uint32_t k = 0; k + 1 < kTaps; ++k) acc += double(taps.values[std::size_t(ch) * kTaps + k]) * w[std::size_t(k) * kConvDim + ch];
          for (uint32_t k = 0; k + 2 < kTaps; ++k) w[std::size_t(k) * kConvDim + ch] = w[std::size_t(k + 1) * kConvDim + ch];
          w[std::size_t(kTaps - 2) * kConvDim + ch] = x[std::size_t(t) * kConvDim + ch];
          const double want = acc / (1.0 + std::exp(-acc));
          r.check(got_conv[std::size_t(t) * kConvDim + ch], float(want), 1e-5 * (1.0 + std::abs(want)),
                  "conv token " + std::to_string(t) + " channel " + std::to_string(ch));
        }
        const float* row = qkv.data() + std::size_t(t) * kConvDim;
        for (uint32_t h = 0; h < kNV; ++h) {
          const uint32_t kh = h / (kNV / kNK);
          double qq = 0, kk = 0;
          for (uint32_t i = 0; i < kDK; ++i) {
            qq += double(row[kh * kDK + i]) * row[kh * kDK + i];
            kk += double(row[kNK * kDK + kh * kDK + i]) * row[kNK * kDK + kh * kDK + i];
          }
          std::vector<double> q(kDK), k(kDK), kv(kDV, 0.0);
          for (uint32_t i = 0; i < kDK; ++i) {
            q[i] = row[kh * kDK + i] / std::sqrt(qq + 1e-6) * p.scale;
            k[i] = row[kNK * kDK + kh * kDK + i] / std::sqrt(kk + 1e-6);
          }
          const double av = a[std::size_t(t) * kNV + h];
          const double softplus = av > 20 ? av : std::log1p(std::exp(av));
          const double decay = std::exp(-std::exp(double(rates.values[h])) * softplus);
          const double beta = 1.0 / (1.0 + std::exp(-double(b[std::size_t(t) * kNV + h])));
          double* M = S[s].data() + std::size_t(h) * kDK * kDV;
          for (uint32_t i = 0; i < kDK; ++i)
            for (uint32_t j = 0; j < kDV; ++j) {
              M[i * kDV + j] *= decay;
              kv[j] += M[i * kDV + j] * k[i];
            }
          for (uint32_t j = 0; j < kDV; ++j) {
            const double delta = (row[2 * kNK * kDK + h * kDV + j] - kv[j]) * beta;
            double o = 0;
            for (uint32_t i = 0; i < kDK; ++i) {
              M[i * kDV + j] += k[i] * delta;
              o += M[i * kDV + j] * q[i];
            }
            r.check(got_delta[std::size_t(t) * kNV * kDV + h * kDV + j], float(o), 1e-5 * (1.0 + std::abs(o)),
                    "delta token " + std::to_string(t) + " head " + std::to_string(h) + " column " + std::to_string(j));
          }
        }
      }
    };
    step("prefill: two sequences' tokens interleaved, from cleared states", {0, 0, 1, 2, 1, 3}, {0, 1, 0, 0, 1, 0});
    step("decode: a token each, from the states the prefill left", {4, 2}, {0, 1});
    step("a sequence's tokens after the other's", {3, 4, 5, 5}, {1, 1, 1, 0});
  });
}

}  // namespace

void run_kv_layers(Runner& r) {
  run_layer_widths(r);
  run_window_pages(r);
  run_state(r);
  run_recurrent_ops(r);
}

}  // namespace sluice::conformance
