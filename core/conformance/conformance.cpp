#include "conformance/conformance.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#include "conformance/runner.h"
#include "graph/step_graph.h"
#include "plugin/builtin_codecs.h"
#include "util/vec.h"

namespace sluice::conformance {
namespace {

void run_embed(Runner& r) {
  struct Form {
    sl_dtype dtype;
    uint32_t bits;
  };
  for (Form f : {Form{SL_DTYPE_F32, 0}, {SL_DTYPE_F16, 0}, {SL_DTYPE_BF16, 0}, {SL_DTYPE_U32, 4}, {SL_DTYPE_U32, 8}, {SL_DTYPE_U32, 3}}) {
    r.op(std::string("embed ") + form_name(f.dtype, f.bits), weight_form(SL_OP_EMBED, f.dtype, f.bits), [&] {
      for (uint32_t cols : {64u, 128u}) {
        r.new_case("40x" + std::to_string(cols));
        Weight t = f.bits ? r.quant_weight(f.bits, 32, 40, cols) : r.weight(f.dtype, 40, cols, 1.0f);
        const std::vector<int32_t> ids = {0, 39, 7, 7, 20};
        auto out = r.zeros(ids.size() * cols);
        sl_error err{};
        r.expect_ok(r.ops().embed(&t.w, ids.data(), 5, out.get(), &err), err, "embed");
        const auto got = r.download(out, ids.size() * cols);
        for (std::size_t i = 0; i < ids.size(); ++i)
          for (uint32_t c = 0; c < cols; ++c) {
            const double ref = t.values[std::size_t(ids[i]) * cols + c];
            r.check(got[i * cols + c], ref, kRel * std::abs(ref) + kFloor, "token " + std::to_string(i) + " col " + std::to_string(c));
          }
      }
    });
  }
}

void run_norms(Runner& r) {
  for (sl_dtype d : {SL_DTYPE_F32, SL_DTYPE_F16, SL_DTYPE_BF16}) {
    r.op(std::string("rms_norm ") + form_name(d, 0), weight_form(SL_OP_RMS_NORM, d, 0), [&] {
      for (auto [rows, dim] : {std::pair{1u, 7u}, {3u, 64u}, {70u, 33u}, {2u, 1000u}}) {
        r.new_case(std::to_string(rows) + "x" + std::to_string(dim));
        Weight w = r.weight(d, 1, dim, 0.5f);
        const auto x = r.random(std::size_t(rows) * dim, 2.0f, 0.3f);
        auto in = r.upload(x), out = r.zeros(x.size());
        sl_error err{};
        r.expect_ok(r.ops().rms_norm(in.get(), &w.w, 1.0f, out.get(), rows, dim, 1e-6f, &err), err, "rms_norm");
        const auto got = r.download(out, x.size());
        for (uint32_t row = 0; row < rows; ++row) {
          double ss = 0;
          for (uint32_t i = 0; i < dim; ++i) ss += double(x[row * dim + i]) * x[row * dim + i];
          const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
          for (uint32_t i = 0; i < dim; ++i) {
            const double ref = x[row * dim + i] * inv * (double(w.values[i]) + 1.0);
            r.check(got[row * dim + i], ref, 2 * kRel * std::abs(ref) + kFloor, "row " + std::to_string(row));
          }
        }
      }
    });
  }
}

void run_matmul(Runner& r) {
  struct Form {
    sl_dtype dtype;
    uint32_t bits, group;
  };
  std::vector<Form> forms = {{SL_DTYPE_F32, 0, 0}, {SL_DTYPE_F16, 0, 0}, {SL_DTYPE_BF16, 0, 0}};
  for (uint32_t bits = 2; bits <= 8; ++bits) forms.push_back({SL_DTYPE_U32, bits, bits % 2 ? 32u : 64u});
  const bool quick = r.options().quick;
  // A device with matrix units may multiply prefill-sized products (more than 8 activation rows) with
  // f16 inputs and f32 sums, as tensor-core GEMMs do (the OpenCL backend on NVIDIA,
  // kernels_cl/gemm_mma.cl): rounding x and w to f16 puts up to 2⁻¹⁰ relative error on each product.
  // So may batches of 4-bit decode products (2 or more rows: matvec_q4_batch_mma on tensor cores,
  // kernels_cl/matvec_batch_mma.cl, rounds x to f16 — the vendor-path tests hold it to its exact bound).
  // Single rows, and every product elsewhere, keep float32 precision.
  for (const Form& f : forms) {
    r.op(std::string("matmul ") + form_name(f.dtype, f.bits), weight_form(SL_OP_MATMUL, f.dtype, f.bits), [&] {
      const bool matrix_units = r.matrix_units();  // of this pass's backend
      std::vector<std::pair<uint32_t, uint32_t>> shapes =
          f.bits ? std::vector<std::pair<uint32_t, uint32_t>>{{8, 64}, {33, 128}, {300, 512}}
                 : std::vector<std::pair<uint32_t, uint32_t>>{{7, 13}, {33, 70}, {300, 1024}};
      if (!quick) shapes.push_back({1000, 2048});
      // 4-bit weights 4 and 8 bytes past an aligned start: decode kernels pick their load width by alignment.
      std::vector<uint32_t> leads(shapes.size(), 0);
      if (f.bits == 4) {
        shapes.insert(shapes.end(), {{33, 128}, {33, 128}});
        leads.insert(leads.end(), {4u, 8u});
      }
      for (std::size_t si = 0; si < shapes.size(); ++si) {
        const auto [out_f, in_f] = shapes[si];
        Weight w = f.bits ? r.quant_weight(f.bits, f.group, out_f, in_f, leads[si]) : r.weight(f.dtype, out_f, in_f);
        Weight bias = r.weight(SL_DTYPE_F32, 1, out_f, 1.0f);
        for (uint32_t n_rows : {1u, 3u, 8u, 9u, 40u}) {
          if (quick && out_f >= 300 && n_rows != 1 && n_rows != 40) continue;
          const bool with_bias = n_rows % 2 == 1;
          r.new_case(std::to_string(out_f) + "x" + std::to_string(in_f) + " rows " + std::to_string(n_rows) + (with_bias ? " bias" : "") +
                     (leads[si] ? " at +" + std::to_string(leads[si]) + " bytes" : ""));
          const auto x = r.random(std::size_t(n_rows) * in_f);
          auto in = r.upload(x), out = r.zeros(std::size_t(n_rows) * out_f);
          sl_error err{};
          r.expect_ok(r.ops().matmul(in.get(), n_rows, &w.w, with_bias ? &bias.w : nullptr, out.get(), &err), err, "matmul");
          const auto got = r.download(out, std::size_t(n_rows) * out_f);
          const bool f16_inputs = matrix_units && (n_rows > 8 || (f.bits == 4 && n_rows >= 2));
          const double rel = f16_inputs ? std::ldexp(1.0, -10) + 2 * kRel : 2 * kRel;
          for (uint32_t t = 0; t < n_rows; ++t)
            for (uint32_t o = 0; o < out_f; ++o) {
              double ref = with_bias ? bias.values[o] : 0.0, mag = std::abs(ref);
              for (uint32_t c = 0; c < in_f; ++c) {
                const double term = double(x[std::size_t(t) * in_f + c]) * w.values[std::size_t(o) * in_f + c];
                ref += term;
                mag += std::abs(term);
              }
              r.check(got[std::size_t(t) * out_f + o], ref, rel * mag + kFloor, "row " + std::to_string(t) + " out " + std::to_string(o));
            }
        }
      }
    });
  }
}

void run_rope(Runner& r) {
  r.op("rope", Needs{}, [&] {
    // Two batches, the second at later positions than the first: a backend that keeps per-position
    // state (the OpenCL backend's (cos, sin) tables) must extend it, not read past it.
    for (const std::vector<int32_t>& positions :
         {std::vector<int32_t>{0, 1, 17, 300, 2999}, std::vector<int32_t>{4095, 4096, 9000, 20000, 5}}) {
      r.begin_batch(positions, std::vector<int32_t>(positions.size(), 0), 1, 1, {0});
      const uint32_t n_heads = 3, head_dim = 10;
      for (uint32_t style : {0u, 1u})
        for (uint32_t rot : {10u, 6u}) {
          r.new_case("positions to " + std::to_string(positions[3]) + ", style " + std::to_string(style) + " rotary " +
                     std::to_string(rot));
          std::vector<float> inv(rot / 2);
          for (uint32_t i = 0; i < rot / 2; ++i) inv[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / rot));
          const auto x = r.random(positions.size() * n_heads * head_dim);
          auto buf = r.upload(x);
          sl_error err{};
          r.expect_ok(r.ops().rope(buf.get(), n_heads, head_dim, rot, inv.data(), 1.1f, style, &err), err, "rope");
          const auto got = r.download(buf, x.size());
          for (std::size_t t = 0; t < positions.size(); ++t)
            for (uint32_t h = 0; h < n_heads; ++h) {
              const float* v = x.data() + (t * n_heads + h) * head_dim;
              std::vector<double> ref(v, v + head_dim);
              for (uint32_t i = 0; i < rot / 2; ++i) {
                const double angle = static_cast<float>(positions[t]) * inv[i];
                const double c = std::cos(angle) * 1.1, s = std::sin(angle) * 1.1;
                const uint32_t a = style == 0 ? i : 2 * i, b = style == 0 ? i + rot / 2 : 2 * i + 1;
                ref[a] = v[a] * c - v[b] * s;
                ref[b] = v[b] * c + v[a] * s;
              }
              for (uint32_t d = 0; d < head_dim; ++d)
                r.check(got[(t * n_heads + h) * head_dim + d], ref[d], 4 * kRel * (std::abs(v[d]) + 1.0),
                        "token " + std::to_string(t));
            }
        }
    }
  });
}

void run_elementwise(Runner& r) {
  r.op("gated_activation", Needs{}, [&] {
    for (uint32_t act : {0u, 1u, 2u}) {
      r.new_case("activation " + std::to_string(act));
      const uint64_t n = 4099;
      const auto g = r.random(n, 3.0f), u = r.random(n);
      auto dg = r.upload(g), du = r.upload(u), out = r.zeros(n);
      sl_error err{};
      r.expect_ok(r.ops().gated_activation(act, dg.get(), du.get(), out.get(), n, &err), err, "gated_activation");
      const auto got = r.download(out, n);
      for (uint64_t i = 0; i < n; ++i) {
        const double x = g[i];
        const double a = act == 0 ? x / (1 + std::exp(-x))
                         : act == 1 ? 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
                                    : 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
        r.check(got[i], a * u[i], 4 * kRel * (std::abs(x * u[i]) + std::abs(a * u[i])) + kFloor, "value " + std::to_string(i));
      }
    }
  });
  // 2.2: gpt-oss's clamped SwiGLU, gate and up drawn wide so both clamps bite (gate above limit, up
  // past ±limit) as well as the smooth part between.
  r.op("swiglu_clamped", Needs{}, [&] {
    for (const float limit : {7.0f, 1.5f}) {
      r.new_case("limit " + std::to_string(limit));
      const uint64_t n = 4099;
      const auto g = r.random(n, 6.0f), u = r.random(n, 6.0f);
      auto dg = r.upload(g), du = r.upload(u), out = r.zeros(n);
      sl_glu_params p{};
      p.struct_size = sizeof(p);
      p.activation = SL_ACT_SWIGLU_CLAMPED;
      p.alpha = 1.702f;
      p.limit = limit;
      sl_error err{};
      r.expect_ok(r.ops().gated_activation(p, dg.get(), du.get(), out.get(), n, &err), err, "gated_activation");
      const auto got = r.download(out, n);
      for (uint64_t i = 0; i < n; ++i) {
        const double x = std::min<double>(g[i], limit), y = std::clamp<double>(u[i], -limit, limit);
        const double want = x / (1 + std::exp(-1.702 * x)) * (y + 1);
        r.check(got[i], want, 4 * kRel * (std::abs(x) * (std::abs(y) + 1)) + kFloor, "value " + std::to_string(i));
      }
    }
  });
  // 2.2: sigmoid (Qwen3.5's gated attention output), for the backends that say they run it.
  auto runs_sigmoid = [](const BackendHandle& be) -> std::string {
    StepGraph g;
    g.glu(g.buffer(nullptr, 1, 8), g.buffer(nullptr, 1, 8), SL_ACT_SIGMOID, g.buffer(nullptr, 1, 8), "glu");
    const sl_graph& view = g.view();
    return be.supports(view.nodes[0], std::span<const sl_tensor>(view.tensors, view.n_tensors)) ? "" : "unsupported";
  };
  r.op("gated_activation: sigmoid", runs_sigmoid, [&] {
    for (uint64_t n : {1u, 4099u}) {
      r.new_case("n " + std::to_string(n));
      const auto g = r.random(n, 3.0f), u = r.random(n);
      auto dg = r.upload(g), du = r.upload(u), out = r.zeros(n);
      sl_error err{};
      r.expect_ok(r.ops().gated_activation(SL_ACT_SIGMOID, dg.get(), du.get(), out.get(), n, &err), err, "gated_activation");
      const auto got = r.download(out, n);
      for (uint64_t i = 0; i < n; ++i) {
        const double want = u[i] / (1 + std::exp(-double(g[i])));
        r.check(got[i], want, 4 * kRel * std::abs(want) + kFloor, "value " + std::to_string(i));
      }
    }
  });
  for (const char* name : {"add", "copy"}) {
    r.op(name, Needs{}, [&] {
      for (uint64_t n : {1u, 13u, 4099u}) {
        r.new_case("n " + std::to_string(n));
        const auto a = r.random(n + 8), b = r.random(n + 8);
        auto da = r.upload(a), db = r.upload(b), out = r.zeros(n + 8);
        sl_error err{};
        const std::string op = name;
        std::vector<double> ref(n);
        if (op == "add") {
          r.expect_ok(r.ops().add(da.get(), db.get(), out.get(), n, &err), err, name);
          for (uint64_t i = 0; i < n; ++i) ref[i] = a[i] + b[i];
        } else {
          r.expect_ok(r.ops().copy(da.get(), 8, out.get(), 0, n, &err), err, name);
          for (uint64_t i = 0; i < n; ++i) ref[i] = a[i + 8];
        }
        const auto got = r.download(out, n);
        for (uint64_t i = 0; i < n; ++i) r.check(got[i], static_cast<float>(ref[i]), 0.0 + 1e-30, "value " + std::to_string(i));
      }
    });
  }
}

// SCALE (2.1): a plain scale, Gemma's logit soft-cap (scores far past the cap saturate), and in place.
void run_scale(Runner& r) {
  r.op("scale", Needs{}, [&] {
    struct Case {
      float scale, softcap;
      bool in_place;
    };
    for (const Case c : {Case{8.0f, 0.0f, false}, Case{1.0f, 30.0f, false}, Case{0.0625f, 50.0f, true}}) {
      for (uint64_t n : {1u, 4099u}) {
        r.new_case("scale " + std::to_string(c.scale) + " softcap " + std::to_string(c.softcap) + (c.in_place ? " in place" : "") + " n " +
                   std::to_string(n));
        auto x = r.random(n);
        for (uint64_t i = 0; i < n; i += 7) x[i] *= 500.0f;  // past the cap
        Buffer dx = r.upload(x), out = r.zeros(c.in_place ? 1 : n);
        sl_buffer* o = c.in_place ? dx.get() : out.get();
        sl_error err{};
        r.expect_ok(r.ops().scale(dx.get(), o, n, c.scale, c.softcap, &err), err, "scale");
        const auto got = r.download(c.in_place ? dx : out, n);
        for (uint64_t i = 0; i < n; ++i) {
          const double v = double(x[i]) * c.scale;
          const double want = c.softcap > 0 ? std::tanh(v / c.softcap) * c.softcap : v;
          r.check(got[i], static_cast<float>(want), 4 * kRel * std::abs(want) + kFloor, "value " + std::to_string(i));
        }
      }
    }
  });
}

struct AttnShape {
  uint32_t heads, kv_heads, dim, window;
  float softcap;
  bool sinks;
};

// Writes every position of the sequences (one batch), then attends for `queries` (sequence,
// position) in a second batch and checks against naive softmax attention over the codec-rounded K, V.
// f16_inputs: the backend may attend prefill runs with f16 inputs and f32 sums (tensor cores: the
// OpenCL backend on NVIDIA, kernels_cl/attention_mma.cl) — checked to that precision, derived below.
void attention_scenario(Runner& r, const sl_kvcodec_api& api, const AttnShape& s, const std::vector<uint32_t>& lengths,
                        uint32_t page_tokens, uint32_t max_pages, const std::vector<int32_t>& table, uint32_t n_pages,
                        const std::vector<std::pair<uint32_t, int32_t>>& queries, bool f16_inputs = false) {
  sl_error err{};
  sl_kvcodec *kc = nullptr, *vc = nullptr;
  r.expect_ok(api.create(s.dim, SL_KV_KEYS, "", &kc, &err), err, "codec create");
  std::unique_ptr<sl_kvcodec, void (*)(sl_kvcodec*)> kguard(kc, api.destroy);
  r.expect_ok(api.create(s.dim, SL_KV_VALUES, "", &vc, &err), err, "codec create");
  std::unique_ptr<sl_kvcodec, void (*)(sl_kvcodec*)> vguard(vc, api.destroy);
  sl_kv_format fmt{};
  fmt.struct_size = sizeof(fmt);
  api.get_format(kc, &fmt);
  sl_kv_layout layout{};
  layout.struct_size = sizeof(layout);
  layout.n_layers = 2;
  layout.n_kv_heads = s.kv_heads;
  layout.head_dim = s.dim;
  layout.page_tokens = page_tokens;
  layout.n_pages = n_pages;
  layout.k_api = &api;
  layout.k_codec = kc;
  layout.v_api = &api;
  layout.v_codec = vc;
  sl_kv_cache* cache = nullptr;
  r.expect_ok(r.api()->kv_create(r.raw(), &layout, &cache, &err), err, "kv_create");
  r.ops().set_kv_layout(layout);
  std::unique_ptr<sl_kv_cache, std::function<void(sl_kv_cache*)>> cguard(cache, [&](sl_kv_cache* c) { r.api()->kv_destroy(r.raw(), c); });
  const uint32_t n_seqs = static_cast<uint32_t>(lengths.size());
  const std::size_t kv_row = std::size_t(s.kv_heads) * s.dim, q_row = std::size_t(s.heads) * s.dim;
  std::vector<std::vector<float>> kref(n_seqs), vref(n_seqs);
  std::vector<int32_t> positions, slots;
  std::vector<float> k_all, v_all;
  for (uint32_t seq = 0; seq < n_seqs; ++seq) {
    auto k = r.random(lengths[seq] * kv_row), v = r.random(lengths[seq] * kv_row);
    k_all.insert(k_all.end(), k.begin(), k.end());
    v_all.insert(v_all.end(), v.begin(), v.end());
    std::vector<std::byte> rows(std::size_t(lengths[seq]) * s.kv_heads * fmt.row_bytes);
    kref[seq].resize(k.size());
    vref[seq].resize(v.size());
    api.encode(kc, k.data(), lengths[seq] * s.kv_heads, rows.data(), &err);
    api.decode(kc, rows.data(), lengths[seq] * s.kv_heads, kref[seq].data(), &err);
    api.encode(vc, v.data(), lengths[seq] * s.kv_heads, rows.data(), &err);
    api.decode(vc, rows.data(), lengths[seq] * s.kv_heads, vref[seq].data(), &err);
    for (uint32_t p = 0; p < lengths[seq]; ++p) {
      positions.push_back(static_cast<int32_t>(p));
      slots.push_back(static_cast<int32_t>(seq));
    }
  }
  r.begin_batch(positions, slots, n_seqs, max_pages, table);
  auto dk = r.upload(k_all), dv = r.upload(v_all);
  r.expect_ok(r.ops().kv_write(cache, 1, dk.get(), dv.get(), &err), err, "kv_write");

  positions.clear();
  slots.clear();
  for (const auto& [seq, pos] : queries) {
    slots.push_back(static_cast<int32_t>(seq));
    positions.push_back(pos);
  }
  r.begin_batch(positions, slots, n_seqs, max_pages, table);
  const auto qv = r.random(positions.size() * q_row);
  const auto sinks = r.random(s.heads);
  auto dq = r.upload(qv), ds = r.upload(sinks), out = r.zeros(qv.size());
  sl_attention_params p{};
  p.struct_size = sizeof(p);
  p.n_heads = s.heads;
  p.n_kv_heads = s.kv_heads;
  p.head_dim = s.dim;
  p.scale = static_cast<float>(1.0 / std::sqrt(double(s.dim)));
  p.window = s.window;
  p.softcap = s.softcap;
  r.expect_ok(r.ops().attention(cache, 1, dq.get(), &p, s.sinks ? ds.get() : nullptr, out.get(), &err), err, "attention");
  const auto got = r.download(out, qv.size());
  const uint32_t group = s.heads / s.kv_heads;
  for (std::size_t t = 0; t < positions.size(); ++t) {
    const uint32_t seq = static_cast<uint32_t>(slots[t]);
    const int32_t pos = positions[t];
    const int32_t lo = s.window ? std::max<int32_t>(0, pos - int32_t(s.window) + 1) : 0;
    for (uint32_t h = 0; h < s.heads; ++h) {
      const uint32_t kvh = h / group;
      const float* qh = qv.data() + t * q_row + std::size_t(h) * s.dim;
      std::vector<double> sc;
      double m = s.sinks ? sinks[h] : -INFINITY, most = 0;  // most: the largest Σ|q·k| of a key
      for (int32_t j = lo; j <= pos; ++j) {
        double dot = 0, dot_mag = 0;
        for (uint32_t d = 0; d < s.dim; ++d) {
          const double term = double(qh[d]) * kref[seq][(std::size_t(j) * s.kv_heads + kvh) * s.dim + d];
          dot += term;
          dot_mag += std::abs(term);
        }
        most = std::max(most, dot_mag);
        double score = dot * p.scale;
        if (s.softcap > 0) score = std::tanh(score / s.softcap) * s.softcap;
        sc.push_back(score);
        m = std::max(m, score);
      }
      double sum = s.sinks ? std::exp(sinks[h] - m) : 0.0;
      for (auto& x : sc) sum += (x = std::exp(x - m));
      for (uint32_t d = 0; d < s.dim; ++d) {
        double ref = 0, mag = 0;
        for (int32_t j = lo; j <= pos; ++j) {
          const double term = sc[j - lo] / sum * vref[seq][(std::size_t(j) * s.kv_heads + kvh) * s.dim + d];
          ref += term;
          mag += std::abs(term);
        }
        const double f16_tol = f16_attention_tolerance(p.scale, s.dim, most, pos - lo + 1, mag);
        r.check(got[t * q_row + std::size_t(h) * s.dim + d], ref, std::max(1e-4 * (mag + 1.0), f16_inputs ? f16_tol : 0.0),
                "token " + std::to_string(t) + " head " + std::to_string(h));
      }
    }
  }
}

// A codec table like the built-in one but without OpenCL source: device backends take their host path.
sl_kvcodec_api without_device_source(const sl_kvcodec_api* api) {
  sl_kvcodec_api copy = *api;
  copy.opencl_source = nullptr;
  return copy;
}

// One whose OpenCL source does not follow the contract: device backends must fall back, not fail.
sl_kvcodec_api with_broken_device_source(const sl_kvcodec_api* api) {
  sl_kvcodec_api copy = *api;
  copy.opencl_source = [](const sl_kvcodec*) -> const char* { return "float not_the_contract(void) { return 0.0f; }\n"; };
  return copy;
}

void run_attention(Runner& r) {
  struct CodecCase {
    const char* name;
    sl_kvcodec_api api;
  };
  const CodecCase codecs[] = {{"f32", *builtin_f32_codec()},
                              {"f16", *builtin_f16_codec()},
                              {"f16 host codec", without_device_source(builtin_f16_codec())},
                              {"f16 foreign device source", with_broken_device_source(builtin_f16_codec())}};
  const AttnShape shapes[] = {{4, 2, 16, 0, 0, false}, {8, 2, 64, 0, 0, false}, {6, 6, 32, 7, 0, false}, {4, 1, 16, 0, 5.0f, true}};
  for (const auto& cc : codecs) {
    r.op(std::string("kv_write+attention ") + cc.name, Needs{}, [&] {
      const bool matrix_units = r.matrix_units();  // of this pass's backend
      for (const auto& s : shapes) {
        const std::string shape = "heads " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " dim " +
                                  std::to_string(s.dim) + " window " + std::to_string(s.window) + (s.sinks ? " sinks" : "") +
                                  (s.softcap > 0 ? " softcap" : "");
        // Prefill of two sequences (37 and 21 positions, scattered pages) in one batch.
        r.new_case("prefill " + shape);
        std::vector<std::pair<uint32_t, int32_t>> all;
        for (uint32_t seq = 0; seq < 2; ++seq)
          for (int32_t p = 0; p < (seq ? 21 : 37); ++p) all.push_back({seq, p});
        attention_scenario(r, cc.api, s, {37, 21}, 16, 4, {5, 0, 9, 2, 7, 11, 3, -1}, 12, all, matrix_units);
      }
      // Decode over a long history (the device path may split the keys across work-groups).
      const uint32_t long_len = r.options().quick ? 700 : 3000, pages = (long_len + 15) / 16;
      std::vector<int32_t> table(pages);
      for (uint32_t i = 0; i < pages; ++i) table[i] = static_cast<int32_t>((i * 7) % pages);
      if (std::gcd(7u, pages) != 1) std::iota(table.begin(), table.end(), 0);
      for (const auto& s : {AttnShape{8, 2, 64, 0, 0, false}, AttnShape{4, 1, 16, 0, 0, true}}) {
        r.new_case("decode at " + std::to_string(long_len) + " heads " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads));
        attention_scenario(r, cc.api, s, {long_len}, 16, pages, table, pages, {{0, int32_t(long_len) - 1}, {0, int32_t(long_len) / 2}});
      }
    });
  }
}

}  // namespace

std::vector<OpResult> run_all(const BackendHandle& backend, const Options& options) {
  Runner r(backend, options);
  run_embed(r);
  run_norms(r);
  run_matmul(r);
  run_head_products(r);
  run_fused(r);
  run_row_moves(r);
  run_greedy_ops(r);
  run_rope(r);
  run_elementwise(r);
  run_scale(r);
  run_attention(r);
  run_kv_layers(r);
  run_plans(r);
  return std::move(r.results);
}

}  // namespace sluice::conformance
