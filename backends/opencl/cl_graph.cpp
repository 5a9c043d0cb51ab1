// Running a step graph on OpenCL: every node checked against its op's rules (graph/graph_check.h) and
// against what this backend's kernels address (a tensor away from its buffer's start only where the
// kernel takes an offset), the step's batch to the device, then the fusion pass's launches
// (cl_fusion.h), each joined where what the graph could not show allows it, else node by node.
#include <cstddef>
#include <memory>
#include <string>

#include "cl_backend.h"
#include "cl_fusion.h"
#include "graph/graph_check.h"
#include "graph/graph_copy.h"
#include "util/mxfp4.h"

namespace sluice::ocl {
namespace {

using graph::input;
using graph::output;

// Whether the node's kernel reads tensor slot `i` (an input, or an output when output) at an offset.
bool takes_offset(uint32_t op, bool is_output, uint32_t i) {
  switch (op) {
    case SL_OP_EMBED: return !is_output && i == 1;  // ids on the device
    case SL_OP_COPY: return i == 0;
    case SL_OP_ARGMAX: return is_output && i == 0;
    default: return false;
  }
}

// "" when this backend's kernels can address every tensor of the node, else why not.
std::string addressable(const sl_graph& g, const sl_node& n) {
  auto check = [&](const sl_tensor* t, bool is_output, uint32_t i) -> std::string {
    if (!t || t->kind != SL_TENSOR_BUFFER) return {};
    if (t->buffer && !fits(t->buffer->bytes, t->offset, graph::bytes(*t))) return "a tensor lies past its buffer's end";
    if (t->offset != 0 && !takes_offset(n.op, is_output, i)) return "a tensor away from its buffer's start (this backend runs it only at the start)";
    if (t->offset % 4 != 0) return "a tensor at an offset that is not a whole number of values";
    return {};
  };
  for (uint32_t i = 0; i < SL_NODE_MAX_INPUTS; ++i)
    if (auto why = check(input(g, n, i), false, i); !why.empty()) return why;
  for (uint32_t i = 0; i < SL_NODE_MAX_OUTPUTS; ++i)
    if (auto why = check(output(g, n, i), true, i); !why.empty()) return why;
  return {};
}

// "" when the kernels run this KV_WRITE or ATTENTION node: on a layer with K/V pages (runs(layer)),
// FULL or WINDOW, of any widths (its geometry's program, cl_kv_geometry.h). A recurrent layer has
// none: its state is read and written by COPY.
template <class Runs>
std::string kv_node_runs(const sl_node& n, std::size_t n_layers, Runs runs) {
  const auto* kp = graph::params<sl_kv_params>(n);
  const auto* ap = graph::params<sl_attention_params>(n);
  if (n.op == SL_OP_KV_WRITE ? !kp : !ap) return "missing parameters";
  const uint32_t layer = n.op == SL_OP_KV_WRITE ? kp->layer : ap->layer;
  if (layer >= n_layers) return "layer " + std::to_string(layer) + " out of range";
  if (!runs(layer)) return "layer " + std::to_string(layer) + " keeps no K/V pages (a recurrent layer)";
  return {};
}

sl_buffer* buf(const sl_tensor* t) { return t ? t->buffer : nullptr; }
const sl_weight* weight_of(const sl_tensor* t) { return t ? t->weight : nullptr; }
uint32_t count32(const sl_tensor* t) { return static_cast<uint32_t>(graph::values(*t)); }

// One graph's run: the norm the last launch left to the next (cl_fusion.h: kResidual, kEmbedNorm),
// which never outlives the graph, and what the form pairs hold (the backend's, kept between graphs).
struct GraphRun {
  sl_backend* be;
  const sl_graph& g;
  sl_kv_cache* cache;
  sl_error* err;
  Forms& forms;
  NormStep left;
  bool has_left = false;
  const sl_node& node(uint32_t i) const { return g.nodes[i]; }
  const sl_tensor* in(uint32_t i, uint32_t k) const { return input(g, g.nodes[i], k); }
  const sl_tensor* out(uint32_t i, uint32_t k = 0) const { return output(g, g.nodes[i], k); }
};

// A norm left unfinished, run now as a launch of its own: before a launch that does not take it.
sl_status finish_norm(GraphRun& r) {
  if (!r.has_left) return SL_OK;
  r.has_left = false;
  return guarded(r.err, "rms_norm", [&] {
    norm_step_finish(r.be, r.left, r.forms);
    return SL_OK;
  });
}

// The node alone; step: a norm the launch before left, which a product of its output finishes.
sl_status run_node(GraphRun& r, uint32_t i, const NormStep* step) {
  sl_backend* be = r.be;
  const sl_node& n = r.node(i);
  sl_error* err = r.err;
  const sl_tensor *in0 = r.in(i, 0), *in1 = r.in(i, 1), *in2 = r.in(i, 2), *out = r.out(i);
  if (n.op != SL_OP_MATMUL)
    if (auto s = finish_norm(r); s != SL_OK) return s;
  switch (n.op) {
    case SL_OP_EMBED:
      if (in1->kind == SL_TENSOR_HOST) return embed(be, in0->weight, static_cast<const int32_t*>(in1->host), count32(in1), buf(out), err);
      return embed_device(be, in0->weight, buf(in1), in1->offset / 4, count32(in1), buf(out), err);
    case SL_OP_RMS_NORM: {
      const auto* p = graph::params<sl_norm_params>(n);
      return rms_norm(be, buf(in0), in1->weight, p->weight_offset, buf(out), in0->rows, in0->cols, p->eps, r.forms, err);
    }
    case SL_OP_MATMUL:
      return matmul(be, buf(in0), in0->rows, in1->weight, weight_of(in2), buf(out), r.forms, step, err);
    case SL_OP_ROPE: {
      const auto* p = graph::params<sl_rope_params>(n);
      RopeLaunch rope;
      if (auto s = rope_prepare(be, buf(in0), p->n_heads, p->head_dim, p->rotary_dim, p->inv_freq, p->attention_factor, p->style, rope, err);
          s != SL_OK || !rope.x)
        return s;
      return guarded(err, "rope", [&] {
        launch_rope(be, rope);
        return SL_OK;
      });
    }
    case SL_OP_KV_WRITE:
      return kv_write(be, r.cache, graph::params<sl_kv_params>(n)->layer, buf(in0), buf(in1), nullptr, err);
    case SL_OP_ATTENTION: {
      AttentionParams p;
      static_cast<sl_attention_params&>(p) = *graph::params<sl_attention_params>(n);
      p.sinks = buf(in1);
      return attention(be, r.cache, p.layer, buf(in0), &p, buf(out), nullptr, r.forms, err);
    }
    case SL_OP_GLU:
      return gated_activation(be, graph::params<sl_glu_params>(n), buf(in0), buf(in1), buf(out), graph::values(*out), r.forms,
                              err);
    case SL_OP_ADD:
      return add(be, buf(in0), buf(in1), buf(out), graph::values(*out), err);
    case SL_OP_COPY:
      if (in0->kind == SL_TENSOR_STATE || out->kind == SL_TENSOR_STATE) {
        if (!r.cache) return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(graph::node_name(n)) + ": a state without a KV cache in the step");
        return copy_state(be, r.cache, in0, out, err);
      }
      return copy(be, buf(in0), in0->offset / 4, buf(out), out->offset / 4, graph::values(*out), err);
    case SL_OP_GET_ROWS:
      return gather_rows(be, buf(in0), static_cast<const int32_t*>(in1->host), count32(in1), in0->cols, buf(out), err);
    case SL_OP_SCATTER_ADD_ROWS:
      return scatter_add_rows(be, buf(in0), static_cast<const int32_t*>(in1->host), static_cast<const float*>(in2->host), count32(in1),
                              in0->cols, buf(out), err);
    case SL_OP_SCALE: {
      const auto* p = graph::params<sl_scale_params>(n);
      return scale(be, buf(in0), buf(out), graph::values(*out), p->scale, p->softcap, err);
    }
    case SL_OP_COPY_COLUMNS:  // 2.2
      return copy_columns(be, buf(in0), in0->cols, buf(out), out->rows, out->cols, *graph::params<sl_copy_columns_params>(n), err);
    case SL_OP_HEAD_MATMUL:  // 2.4
      return head_matmul(be, buf(in0), in0->rows, in1->weight, *graph::params<sl_head_matmul_params>(n), buf(out), err);
    case SL_OP_ARGMAX:
      return argmax(be, buf(in0), in0->rows, in0->cols, buf(out), out->offset / 4, err);
    case SL_OP_CAUSAL_CONV:  // 2.2
      return causal_conv(be, r.cache, buf(in0), in1->weight, graph::params<sl_conv_params>(n)->activation, buf(out), *r.out(i, 1), err);
    case SL_OP_GATED_DELTA:  // 2.2
      return gated_delta(be, r.cache, buf(in0), buf(in1), buf(in2), r.in(i, 3)->weight, *graph::params<sl_gated_delta_params>(n), buf(out),
                         *r.out(i, 1), err);
    case SL_OP_MOE_ROUTE:  // 2.5
      return moe_route(be, buf(in0), in0->rows, in0->cols, weight_of(in1), *graph::params<sl_moe_route_params>(n), buf(out), buf(r.out(i, 1)),
                       err);
    case SL_OP_MATMUL_ID:  // 2.5
      return matmul_id(be, buf(in0), in0->rows, in1->weight, buf(in2), in2->rows, in2->cols, graph::params<sl_matmul_id_params>(n)->n_experts,
                       buf(out), err);
    case SL_OP_MOE_COMBINE:  // 2.5
      return moe_combine(be, buf(in0), buf(in1), out->rows, in1->cols, out->cols, buf(out), err);
    default:
      return set_error(err, SL_ERR_UNSUPPORTED, std::string(graph::node_name(n)) + ": op not supported by the OpenCL backend");
  }
}

sl_status run_products(GraphRun& r, uint32_t first, uint32_t count, const NormStep* step) {
  const sl_weight* ws[kMatmulMultiMax];
  const sl_weight* biases[kMatmulMultiMax];
  sl_buffer* outs[kMatmulMultiMax];
  for (uint32_t i = 0; i < count; ++i) {
    ws[i] = r.in(first + i, 1)->weight;
    biases[i] = weight_of(r.in(first + i, 2));
    outs[i] = buf(r.out(first + i));
  }
  const sl_tensor* x = r.in(first, 0);
  return matmul_multi(r.be, buf(x), x->rows, count, ws, biases, outs, r.forms, step, r.err);
}

sl_status run_add_norm(GraphRun& r, uint32_t add) {
  const uint32_t norm = add + 1;
  const auto* p = graph::params<sl_norm_params>(r.node(norm));
  const sl_tensor* x = r.in(norm, 0);
  return add_rms_norm(r.be, buf(x), buf(r.in(add, 1)), r.in(norm, 1)->weight, p->weight_offset, buf(r.out(norm)), x->rows, x->cols, p->eps,
                      r.forms, r.err);
}

// The rope pair of nodes first, first + 1 as one launch's arguments (q, then k as x2); where the
// two do not share a table (never, after graph::rope_pair), q is launched alone now and k returned.
sl_status prepare_rope_pair(GraphRun& r, uint32_t first, RopeLaunch& pair) {
  RopeLaunch k;
  for (uint32_t i = 0; i < 2; ++i) {
    const auto* p = graph::params<sl_rope_params>(r.node(first + i));
    if (auto s = rope_prepare(r.be, buf(r.in(first + i, 0)), p->n_heads, p->head_dim, p->rotary_dim, p->inv_freq, p->attention_factor,
                              p->style, i == 0 ? pair : k, r.err);
        s != SL_OK)
      return s;
  }
  if (!pair.x) {  // nothing to rotate in q (then in k neither: one rotary_dim)
    pair = k;
    return SL_OK;
  }
  if (k.x && pair.table() == k.table() && pair.half == k.half && pair.style == k.style && pair.head_dim == k.head_dim) {
    pair.x2 = k.x;
    pair.n_heads2 = k.n_heads;
    return SL_OK;
  }
  return guarded(r.err, "rope", [&] {
    launch_rope(r.be, pair);
    pair = k;
    return SL_OK;
  });
}

sl_status run_launch(GraphRun& r, const Launch& l) {
  sl_backend* be = r.be;
  // Writers: forms of what this launch overwrites no longer stand for it.
  for (uint32_t i = l.first; i < l.first + l.count; ++i)
    for (uint32_t k = 0; k < SL_NODE_MAX_OUTPUTS; ++k)
      if (const sl_tensor* t = r.out(i, k); t && t->kind == SL_TENSOR_BUFFER) r.forms.written(t->buffer);
  const NormStep* step = nullptr;
  const bool products = l.kind == LaunchKind::kProducts || l.kind == LaunchKind::kGlu ||
                        (l.kind == LaunchKind::kNode && r.node(l.first).op == SL_OP_MATMUL);
  if (l.norm_step >= 0 && products && r.has_left) {
    step = &r.left;
    r.has_left = false;  // this launch takes it (or runs it first)
  } else if (auto s = finish_norm(r); s != SL_OK) {
    return s;
  }
  const uint32_t i = l.first;
  switch (l.kind) {
    case LaunchKind::kNode:
      return run_node(r, i, step);
    case LaunchKind::kProducts:
      return run_products(r, i, l.count, step);
    case LaunchKind::kAddNorm:
      return run_add_norm(r, i);
    case LaunchKind::kEmbedNorm: {
      const auto* p = graph::params<sl_norm_params>(r.node(i + 1));
      bool joined = false;
      if (auto s = guarded(r.err, "embed", [&] {
            joined = embed_norm_join(be, r.in(i, 0)->weight, *r.in(i, 1), buf(r.out(i)), r.in(i + 1, 1)->weight, p->weight_offset, p->eps,
                                     buf(r.out(i + 1)), r.forms, &r.left);
            return SL_OK;
          });
          s != SL_OK)
        return s;
      if (joined) {
        r.has_left = true;
        return SL_OK;
      }
      if (auto s = run_node(r, i, nullptr); s != SL_OK) return s;
      return run_node(r, i + 1, nullptr);
    }
    case LaunchKind::kResidual: {
      const auto* p = graph::params<sl_norm_params>(r.node(i + 2));
      bool joined = false;
      if (auto s = guarded(r.err, "matmul", [&] {
            joined = residual_join(be, buf(r.in(i, 0)), r.in(i, 1)->weight, buf(r.out(i)), buf(r.out(i + 1)), r.in(i + 2, 1)->weight,
                                   p->weight_offset, p->eps, buf(r.out(i + 2)), r.forms, &r.left);
            return SL_OK;
          });
          s != SL_OK)
        return s;
      if (joined) {
        r.has_left = true;
        return SL_OK;
      }
      if (auto s = run_node(r, i, step); s != SL_OK) return s;
      return run_add_norm(r, i + 1);
    }
    case LaunchKind::kGlu: {
      bool joined = false;
      // The joined kernel adds no bias: products with one (gpt-oss's experts) run on their own.
      const bool biased = r.in(i, 2) || r.in(i + 1, 2);
      if (auto s = biased ? SL_OK : guarded(r.err, "glu", [&] {
            joined = glu_join(be, buf(r.in(i, 0)), r.in(i, 1)->weight, r.in(i + 1, 1)->weight, buf(r.out(i)), buf(r.out(i + 1)),
                              buf(r.out(i + 2)), graph::params<sl_glu_params>(r.node(i + 2))->activation, r.forms, step);
            return SL_OK;
          });
          s != SL_OK)
        return s;
      if (joined) return SL_OK;
      if (auto s = run_products(r, i, 2, step); s != SL_OK) return s;
      return run_node(r, i + 2, nullptr);
    }
    case LaunchKind::kRopePair: {
      RopeLaunch pair;
      if (auto s = prepare_rope_pair(r, i, pair); s != SL_OK || !pair.x) return s;
      return guarded(r.err, "rope", [&] {
        launch_rope(be, pair);
        return SL_OK;
      });
    }
    case LaunchKind::kRopeKvWrite: {
      RopeLaunch pair;
      if (auto s = prepare_rope_pair(r, i, pair); s != SL_OK) return s;
      return kv_write(be, r.cache, graph::params<sl_kv_params>(r.node(i + 2))->layer, buf(r.in(i + 2, 0)), buf(r.in(i + 2, 1)),
                      pair.x ? &pair : nullptr, r.err);
    }
    case LaunchKind::kKvAttention:
    case LaunchKind::kRopeKvAttention: {
      const uint32_t kv = l.kind == LaunchKind::kKvAttention ? i : i + 2;
      KvJoin join{buf(r.in(kv, 0)), buf(r.in(kv, 1)), {}};
      if (l.kind == LaunchKind::kRopeKvAttention)
        if (auto s = prepare_rope_pair(r, i, join.rope); s != SL_OK) return s;
      AttentionParams p;
      static_cast<sl_attention_params&>(p) = *graph::params<sl_attention_params>(r.node(kv + 1));
      p.sinks = buf(r.in(kv + 1, 1));
      return attention(be, r.cache, p.layer, buf(r.in(kv + 1, 0)), &p, buf(r.out(kv + 1)), &join, r.forms, r.err);
    }
  }
  return set_error(r.err, SL_ERR_INTERNAL, "graph_compute: unknown launch");
}

}  // namespace

int node_supported(const sl_backend*, const sl_node_query* q) {
  if (!q || !q->node || q->node->op == SL_OP_NONE || q->node->op >= SL_OP_COUNT) return 0;
  const sl_node& n = *q->node;
  for (uint32_t i = 0; i < SL_NODE_MAX_INPUTS + SL_NODE_MAX_OUTPUTS; ++i) {
    const bool is_output = i >= SL_NODE_MAX_INPUTS;
    const uint32_t index = is_output ? n.outputs[i - SL_NODE_MAX_INPUTS] : n.inputs[i];
    if (index == SL_NO_TENSOR || !q->tensors || index >= q->n_tensors) continue;
    const sl_tensor& t = q->tensors[index];
    if (t.kind == SL_TENSOR_WEIGHT) {
      if (t.weight && mxfp4::is_mxfp4(*t.weight)) {  // 2.3: products only
        if (n.op != SL_OP_MATMUL || i != 1) return 0;
        continue;
      }
      if (!t.weight || !weight_form_supported(t.weight->dtype, t.weight->bits)) return 0;
      if (n.op != SL_OP_MATMUL && n.op != SL_OP_HEAD_MATMUL && n.op != SL_OP_EMBED && n.op != SL_OP_MATMUL_ID && t.weight->bits != 0)
        return 0;  // norms and biases: plain values
    } else if (t.kind == SL_TENSOR_BUFFER && t.offset != 0 && !takes_offset(n.op, is_output, is_output ? i - SL_NODE_MAX_INPUTS : i)) {
      return 0;
    } else if (t.kind == SL_TENSOR_STATE && n.op != SL_OP_COPY && n.op != SL_OP_CAUSAL_CONV && n.op != SL_OP_GATED_DELTA) {
      return 0;  // states: COPY and the recurrent ops
    }
  }
  if (n.op == SL_OP_GLU) {
    const auto* p = graph::params<sl_glu_params>(n);
    if (!p || p->activation > SL_ACT_SIGMOID) return 0;
  }
  if (n.op == SL_OP_MOE_ROUTE) {  // 2.5: within the routing kernel's limits
    const auto* p = graph::params<sl_moe_route_params>(n);
    if (!p || !q->tensors || n.inputs[0] >= q->n_tensors || !routes_on_device(q->tensors[n.inputs[0]].cols, p->k)) return 0;
  }
  if (n.op == SL_OP_CAUSAL_CONV && n.inputs[1] < q->n_tensors && q->tensors) {
    const sl_tensor& w = q->tensors[n.inputs[1]];
    if (w.kind != SL_TENSOR_WEIGHT || !w.weight || w.weight->bits || w.weight->cols > kConvMaxTaps) return 0;
  }
  if ((n.op == SL_OP_KV_WRITE || n.op == SL_OP_ATTENTION) && q->kv && q->kv->struct_size >= offsetof(sl_kv_layout, layers) + sizeof(void*) &&
      q->kv->layers) {
    const sl_kv_layout& L = *q->kv;
    auto runs = [&](uint32_t l) { return L.layers[l].kind == SL_KV_FULL || L.layers[l].kind == SL_KV_WINDOW; };
    if (!kv_node_runs(n, L.n_layers, runs).empty()) return 0;
  }
  return 1;  // every KV codec: on the device with its OpenCL source, else through the host
}

namespace {

// Every node checked against its op's rules for this batch, against what the kernels address, and
// its KV layer against the step's cache.
sl_status check_graph(const sl_graph& g, const sl_step& step, sl_error* err) {
  for (uint32_t i = 0; i < g.n_nodes; ++i) {
    const sl_node& n = g.nodes[i];
    if (std::string why = graph::check_node(g, n, step.batch->n_tokens); !why.empty()) return set_error(err, SL_ERR_INVALID_ARGUMENT, why);
    if (std::string why = addressable(g, n); !why.empty())
      return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(graph::node_name(n)) + ": " + why);
    if (n.op == SL_OP_KV_WRITE || n.op == SL_OP_ATTENTION) {  // the cache's layer runs it (cl_kv_cache.h)
      const sl_kv_cache* cache = step.cache;
      if (!cache) return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(graph::node_name(n)) + ": the step has no KV cache");
      const uint32_t layer = n.op == SL_OP_KV_WRITE ? graph::params<sl_kv_params>(n)->layer : graph::params<sl_attention_params>(n)->layer;
      if (layer >= cache->layers.size())
        return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(graph::node_name(n)) + ": layer " + std::to_string(layer) + " out of range");
      if (std::string why = kv_node_runs(n, cache->layers.size(), [&](uint32_t l) { return runs_layer(cache, l); }); !why.empty())
        return set_error(err, SL_ERR_UNSUPPORTED, std::string(graph::node_name(n)) + ": " + why);
    }
  }
  return SL_OK;
}

bool valid_step(const sl_step* step) { return step && step->batch; }

// The step's batch to the device, then the launches in order.
sl_status run_launches(sl_backend* be, const sl_graph& g, const std::vector<Launch>& launches, const sl_step& step, sl_error* err) {
  if (auto s = begin_batch(be, step.batch, err); s != SL_OK) return s;
  GraphRun run{be, g, step.cache, err, be->forms, {}, false};
  for (const Launch& l : launches)
    if (auto s = run_launch(run, l); s != SL_OK) return s;
  return finish_norm(run);
}

}  // namespace

sl_status run_graph(sl_backend* be, const sl_graph* g, const sl_step* step, sl_error* err) {
  if (!g || !valid_step(step) || (g->n_nodes && !g->nodes) || (g->n_tensors && !g->tensors))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "graph_compute: no graph or step");
  if (auto s = check_graph(*g, *step, err); s != SL_OK) return s;
  return run_launches(be, *g, plan_launches(*g, be->fusion), *step, err);
}

sl_status create_plan(sl_backend* be, const sl_graph* g, sl_plan** out, sl_error* err) {
  if (!out) return set_error(err, SL_ERR_INVALID_ARGUMENT, "plan_create: nowhere to put the plan");
  *out = nullptr;
  if (!g) return set_error(err, SL_ERR_INVALID_ARGUMENT, "plan_create: no graph");
  auto plan = std::make_unique<sl_plan>(*g);
  if (!plan->graph.error().empty()) return set_error(err, SL_ERR_INVALID_ARGUMENT, "plan_create: " + plan->graph.error());
  plan->launches = plan_launches(plan->graph.view(), be->fusion);
  *out = plan.release();
  return SL_OK;
}

sl_status compute_plan(sl_backend* be, sl_plan* plan, const sl_step* step, sl_error* err) {
  if (!plan || !valid_step(step)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "plan_compute: no plan or step");
  // The checks hold for as long as the batch's size and the cache are the ones they were made for.
  if (!plan->checked || plan->checked_tokens != step->batch->n_tokens || plan->checked_cache != step->cache) {
    plan->checked = false;
    if (auto s = check_graph(plan->graph.view(), *step, err); s != SL_OK) return s;
    plan->checked = true;
    plan->checked_tokens = step->batch->n_tokens;
    plan->checked_cache = step->cache;
  }
  return run_launches(be, plan->graph.view(), plan->launches, *step, err);
}

}  // namespace sluice::ocl
