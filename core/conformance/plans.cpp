// Graph plans (plan_create / plan_compute, optional in sluice/backend.h): a plan, run at each of
// several steps, gives what graph_compute gives for the same graph and step, bit for bit — one backend
// runs both — while the batch's positions and a HOST tensor's contents change between steps as the
// host changes them. The graph is a decode layer's shape without the cache (embedding from host ids,
// norm, q/k products and their rope, gate/up and the activation, down, the residual add and the next
// norm) so that a backend's fusion pass joins in the plan what it joins every step; 4-bit weights,
// the form the fused decode kernels take. Steps of 1 token (decode) and 3 (a prompt's chunk).
#include <cmath>
#include <string>
#include <vector>

#include "conformance/runner.h"
#include "graph/step_graph.h"

namespace sluice::conformance {
namespace {

constexpr uint32_t kHidden = 128, kHeads = 4, kKvHeads = 2, kHeadDim = 32, kFfn = 256, kVocab = 16;

std::string needs_plans(const BackendHandle& be) {
  const sl_backend_api* api = be.api();
  return api->plan_create && api->plan_compute && api->plan_destroy ? "" : "not implemented (optional)";
}

struct LayerWeights {
  Weight table, norm, q, k, gate, up, down, norm2;
};

struct Tensors {
  Buffer x, h, q, k, gate, up, act, down, out;
};

// The graph over the tensors (n tokens), ids read from `ids` (host memory the steps rewrite).
void build(StepGraph& g, const LayerWeights& w, const Tensors& t, uint32_t n, const std::vector<int32_t>& ids,
           const std::vector<float>& inv_freq) {
  const auto x = g.buffer(t.x.get(), n, kHidden), h = g.buffer(t.h.get(), n, kHidden);
  const auto q = g.buffer(t.q.get(), n, kHeads * kHeadDim), k = g.buffer(t.k.get(), n, kKvHeads * kHeadDim);
  const auto gate = g.buffer(t.gate.get(), n, kFfn), up = g.buffer(t.up.get(), n, kFfn), act = g.buffer(t.act.get(), n, kFfn);
  const auto down = g.buffer(t.down.get(), n, kHidden), out = g.buffer(t.out.get(), n, kHidden);
  g.embed(g.weight(w.table.w), g.host(ids.data(), 1, n, SL_DTYPE_I32), x);
  g.rms_norm(x, g.weight(w.norm.w), 1e-6f, 0.0f, h, "norm");
  g.matmul(h, g.weight(w.q.w), StepGraph::kNone, q, "q");
  g.matmul(h, g.weight(w.k.w), StepGraph::kNone, k, "k");
  sl_rope_params rope{};
  rope.struct_size = sizeof(rope);
  rope.head_dim = kHeadDim;
  rope.rotary_dim = kHeadDim;
  rope.style = SL_ROPE_NEOX;
  rope.attention_factor = 1.0f;
  rope.inv_freq = inv_freq.data();
  rope.n_heads = kHeads;
  g.rope(q, rope, "rope q");
  rope.n_heads = kKvHeads;
  g.rope(k, rope, "rope k");
  g.matmul(h, g.weight(w.gate.w), StepGraph::kNone, gate, "gate");
  g.matmul(h, g.weight(w.up.w), StepGraph::kNone, up, "up");
  g.glu(gate, up, SL_ACT_SILU, act, "glu");
  g.matmul(act, g.weight(w.down.w), StepGraph::kNone, down, "down");
  g.add(x, down, x, "residual");
  g.rms_norm(x, g.weight(w.norm2.w), 1e-6f, 0.0f, out, "norm 2");
}

std::vector<std::vector<float>> outputs(Runner& r, const Tensors& t, uint32_t n) {
  return {r.download(t.q, std::size_t(n) * kHeads * kHeadDim), r.download(t.k, std::size_t(n) * kKvHeads * kHeadDim),
          r.download(t.x, std::size_t(n) * kHidden), r.download(t.out, std::size_t(n) * kHidden)};
}

void plan_case(Runner& r, const LayerWeights& w, uint32_t n, const std::vector<std::vector<int32_t>>& step_positions) {
  r.new_case(std::to_string(n) + " token(s) a step, " + std::to_string(step_positions.size()) + " steps");
  Tensors t;
  for (Buffer* b : {&t.x, &t.h, &t.down, &t.out}) *b = r.zeros(std::size_t(n) * kHidden);
  t.q = r.zeros(std::size_t(n) * kHeads * kHeadDim);
  t.k = r.zeros(std::size_t(n) * kKvHeads * kHeadDim);
  for (Buffer* b : {&t.gate, &t.up, &t.act}) *b = r.zeros(std::size_t(n) * kFfn);
  std::vector<float> inv_freq(kHeadDim / 2);
  for (uint32_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / kHeadDim);
  std::vector<int32_t> ids(n);
  StepGraph g;
  build(g, w, t, n, ids, inv_freq);
  const sl_backend_api* api = r.api();
  sl_error err{};
  sl_plan* plan = nullptr;
  r.expect_ok(api->plan_create(r.raw(), &g.view(), &plan, &err), err, "plan_create");
  struct Destroy {
    const sl_backend_api* api;
    sl_backend* be;
    sl_plan* plan;
    ~Destroy() { api->plan_destroy(be, plan); }
  } destroy{api, r.raw(), plan};
  std::uniform_int_distribution<int32_t> id(0, kVocab - 1);
  for (std::size_t s = 0; s < step_positions.size(); ++s) {
    const std::vector<int32_t>& positions = step_positions[s];
    for (auto& v : ids) v = id(r.rng());
    const std::vector<int32_t> slots(n, 0), no_pages;
    const sl_batch batch = batch_view(positions, slots, 1, 0, no_pages);
    sl_step step{};
    step.struct_size = sizeof(step);
    step.batch = &batch;
    // The plan first: what the step before left on the device (its batch) must not stand in for this one.
    r.expect_ok(api->plan_compute(r.raw(), plan, &step, &err), err, "plan_compute");
    const auto got = outputs(r, t, n);
    r.expect_ok(api->graph_compute(r.raw(), &g.view(), &step, &err), err, "graph_compute");
    const auto want = outputs(r, t, n);
    static const char* names[] = {"q after rope", "k after rope", "residual", "norm 2"};
    for (std::size_t o = 0; o < got.size(); ++o)
      for (std::size_t i = 0; i < got[o].size(); ++i)
        r.check(got[o][i], want[o][i], 1e-30, "step " + std::to_string(s) + " " + names[o] + " [" + std::to_string(i) + "]");
  }
}

}  // namespace

void run_plans(Runner& r) {
  r.op("graph plans", needs_plans, [&] {
    LayerWeights w;
    w.table = r.weight(SL_DTYPE_F16, kVocab, kHidden);
    w.norm = r.weight(SL_DTYPE_F32, 1, kHidden, 0.3f, 1.0f);
    w.q = r.quant_weight(4, 64, kHeads * kHeadDim, kHidden);
    w.k = r.quant_weight(4, 64, kKvHeads * kHeadDim, kHidden);
    w.gate = r.quant_weight(4, 64, kFfn, kHidden);
    w.up = r.quant_weight(4, 64, kFfn, kHidden);
    w.down = r.quant_weight(4, 64, kHidden, kFfn);
    w.norm2 = r.weight(SL_DTYPE_F32, 1, kHidden, 0.3f, 1.0f);
    plan_case(r, w, 1, {{7}, {300}, {41}});
    plan_case(r, w, 3, {{0, 1, 2}, {10, 11, 12}});
  });
}

}  // namespace sluice::conformance
