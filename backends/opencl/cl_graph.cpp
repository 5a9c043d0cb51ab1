// Running a step graph on OpenCL: every node checked against its op's rules (graph/graph_check.h) and
// against what this backend's kernels address (a tensor away from its buffer's start only where the
// kernel takes an offset), the step's batch to the device, then the fusion pass's launches
// (cl_fusion.h) through the op entry points (OpEntries, cl_backend.cpp).
#include <cstddef>
#include <string>

#include "cl_backend.h"
#include "cl_fusion.h"
#include "graph/graph_check.h"

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

// "" when the kernels run this KV_WRITE or ATTENTION node: on a layer of the cache's own geometry
// (runs(layer)), V as wide as K. Per-layer widths and recurrent layers are allocated (kv_create) but
// not run here yet.
template <class Runs>
std::string kv_node_runs(const sl_node& n, std::size_t n_layers, Runs runs) {
  const auto* kp = graph::params<sl_kv_params>(n);
  const auto* ap = graph::params<sl_attention_params>(n);
  if (n.op == SL_OP_KV_WRITE ? !kp : !ap) return "missing parameters";
  const uint32_t layer = n.op == SL_OP_KV_WRITE ? kp->layer : ap->layer;
  if (layer >= n_layers) return "layer " + std::to_string(layer) + " out of range";
  if (!runs(layer)) return "layer " + std::to_string(layer) + " has K/V widths (or a kind) other than the cache's own: not run by the OpenCL kernels";
  if (n.op == SL_OP_ATTENTION && graph::attention_v_dim(*ap) != ap->head_dim) return "V narrower or wider than K: not run by the OpenCL kernels";
  return {};
}

sl_buffer* buf(const sl_tensor* t) { return t ? t->buffer : nullptr; }
const sl_weight* weight_of(const sl_tensor* t) { return t ? t->weight : nullptr; }
uint32_t count32(const sl_tensor* t) { return static_cast<uint32_t>(graph::values(*t)); }

sl_status run_node(sl_backend* be, const sl_graph& g, const sl_node& n, sl_kv_cache* cache, const OpEntries& ops, sl_error* err) {
  const sl_tensor* in0 = input(g, n, 0);
  const sl_tensor* in1 = input(g, n, 1);
  const sl_tensor* in2 = input(g, n, 2);
  const sl_tensor* out = output(g, n, 0);
  if ((n.op == SL_OP_KV_WRITE || n.op == SL_OP_ATTENTION) && !cache)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(graph::node_name(n)) + ": the step has no KV cache");
  if (n.op == SL_OP_KV_WRITE || n.op == SL_OP_ATTENTION) {
    const uint32_t layer = n.op == SL_OP_KV_WRITE ? graph::params<sl_kv_params>(n)->layer : graph::params<sl_attention_params>(n)->layer;
    if (layer >= cache->layers.size())
      return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(graph::node_name(n)) + ": layer " + std::to_string(layer) + " out of range");
    if (std::string why = kv_node_runs(n, cache->layers.size(), [&](uint32_t l) { return runs_layer(cache, l); }); !why.empty())
      return set_error(err, SL_ERR_UNSUPPORTED, std::string(graph::node_name(n)) + ": " + why);
  }
  switch (n.op) {
    case SL_OP_EMBED:
      if (in1->kind == SL_TENSOR_HOST)
        return ops.embed(be, in0->weight, static_cast<const int32_t*>(in1->host), count32(in1), buf(out), err);
      return ops.embed_device(be, in0->weight, buf(in1), in1->offset / 4, count32(in1), buf(out), err);
    case SL_OP_RMS_NORM: {
      const auto* p = graph::params<sl_norm_params>(n);
      return ops.rms_norm(be, buf(in0), in1->weight, p->weight_offset, buf(out), in0->rows, in0->cols, p->eps, err);
    }
    case SL_OP_MATMUL:
      return ops.matmul(be, buf(in0), in0->rows, in1->weight, weight_of(in2), buf(out), err);
    case SL_OP_ROPE: {
      const auto* p = graph::params<sl_rope_params>(n);
      return ops.rope(be, buf(in0), p->n_heads, p->head_dim, p->rotary_dim, p->inv_freq, p->attention_factor, p->style, err);
    }
    case SL_OP_KV_WRITE:
      return ops.kv_write(be, cache, graph::params<sl_kv_params>(n)->layer, buf(in0), buf(in1), err);
    case SL_OP_ATTENTION: {
      AttentionParams p;
      static_cast<sl_attention_params&>(p) = *graph::params<sl_attention_params>(n);
      p.sinks = buf(in1);
      return ops.attention(be, cache, p.layer, buf(in0), &p, buf(out), err);
    }
    case SL_OP_GLU:
      return ops.gated_activation(be, graph::params<sl_glu_params>(n)->activation, buf(in0), buf(in1), buf(out), graph::values(*out), err);
    case SL_OP_ADD:
      return ops.add(be, buf(in0), buf(in1), buf(out), graph::values(*out), err);
    case SL_OP_COPY:
      if (in0->kind == SL_TENSOR_STATE || out->kind == SL_TENSOR_STATE) {
        if (!cache) return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(graph::node_name(n)) + ": a state without a KV cache in the step");
        return ops.copy_state(be, cache, in0, out, err);
      }
      return ops.copy(be, buf(in0), in0->offset / 4, buf(out), out->offset / 4, graph::values(*out), err);
    case SL_OP_GET_ROWS:
      return ops.gather_rows(be, buf(in0), static_cast<const int32_t*>(in1->host), count32(in1), in0->cols, buf(out), err);
    case SL_OP_SCATTER_ADD_ROWS:
      return ops.scatter_add_rows(be, buf(in0), static_cast<const int32_t*>(in1->host), static_cast<const float*>(in2->host), count32(in1),
                                  in0->cols, buf(out), err);
    case SL_OP_ARGMAX:
      return ops.argmax(be, buf(in0), in0->rows, in0->cols, buf(out), out->offset / 4, err);
    default:
      return set_error(err, SL_ERR_UNSUPPORTED, std::string(graph::node_name(n)) + ": op not supported by the OpenCL backend");
  }
}

sl_status run_launch(sl_backend* be, const sl_graph& g, const Launch& l, sl_kv_cache* cache, const OpEntries& ops, sl_error* err) {
  const sl_node& first = g.nodes[l.first];
  switch (l.kind) {
    case LaunchKind::kProducts: {
      const sl_weight* ws[kMatmulMultiMax];
      const sl_weight* biases[kMatmulMultiMax];
      sl_buffer* outs[kMatmulMultiMax];
      for (uint32_t i = 0; i < l.count; ++i) {
        const sl_node& n = g.nodes[l.first + i];
        ws[i] = input(g, n, 1)->weight;
        biases[i] = weight_of(input(g, n, 2));
        outs[i] = buf(output(g, n, 0));
      }
      const sl_tensor* x = input(g, first, 0);
      return ops.matmul_multi(be, buf(x), x->rows, l.count, ws, biases, outs, err);
    }
    case LaunchKind::kAddNorm: {
      const sl_node& norm = g.nodes[l.first + 1];
      const auto* p = graph::params<sl_norm_params>(norm);
      const sl_tensor* x = input(g, norm, 0);
      return ops.add_rms_norm(be, buf(x), buf(input(g, first, 1)), input(g, norm, 1)->weight, p->weight_offset, buf(output(g, norm, 0)),
                              x->rows, x->cols, p->eps, err);
    }
    case LaunchKind::kNode:
      break;
  }
  return run_node(be, g, first, cache, ops, err);
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
      if (!t.weight || !weight_form_supported(t.weight->dtype, t.weight->bits)) return 0;
      if (n.op != SL_OP_MATMUL && n.op != SL_OP_EMBED && t.weight->bits != 0) return 0;  // norms and biases: plain values
    } else if (t.kind == SL_TENSOR_BUFFER && t.offset != 0 && !takes_offset(n.op, is_output, is_output ? i - SL_NODE_MAX_INPUTS : i)) {
      return 0;
    } else if (t.kind == SL_TENSOR_STATE && n.op != SL_OP_COPY) {
      return 0;  // a state is read and written by COPY alone (the recurrent ops to come)
    }
  }
  if ((n.op == SL_OP_KV_WRITE || n.op == SL_OP_ATTENTION) && q->kv && q->kv->struct_size >= offsetof(sl_kv_layout, layers) + sizeof(void*) &&
      q->kv->layers) {
    const sl_kv_layout& L = *q->kv;
    auto runs = [&](uint32_t l) {
      const sl_kv_layer& k = L.layers[l];
      return k.kind == SL_KV_FULL && k.n_kv_heads == L.n_kv_heads && k.k_head_dim == L.head_dim && k.v_head_dim == L.head_dim;
    };
    if (!kv_node_runs(n, L.n_layers, runs).empty()) return 0;
  }
  if (n.op == SL_OP_ATTENTION && n.params) {
    const auto* p = graph::params<sl_attention_params>(n);
    if (p && graph::attention_v_dim(*p) != p->head_dim) return 0;
  }
  return 1;  // every KV codec: on the device with its OpenCL source, else through the host
}

sl_status run_graph(sl_backend* be, const sl_graph* g, const sl_step* step, const OpEntries& ops, sl_error* err) {
  if (!g || !step || !step->batch || (g->n_nodes && !g->nodes) || (g->n_tensors && !g->tensors))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "graph_compute: no graph or step");
  for (uint32_t i = 0; i < g->n_nodes; ++i) {
    const sl_node& n = g->nodes[i];
    if (std::string why = graph::check_node(*g, n, step->batch->n_tokens); !why.empty()) return set_error(err, SL_ERR_INVALID_ARGUMENT, why);
    if (std::string why = addressable(*g, n); !why.empty())
      return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(graph::node_name(n)) + ": " + why);
  }
  if (auto s = ops.begin_batch(be, step->batch, err); s != SL_OK) return s;
  for (const Launch& l : plan_launches(*g))
    if (auto s = run_launch(be, *g, l, step->cache, ops, err); s != SL_OK) return s;
  return SL_OK;
}

}  // namespace sluice::ocl
