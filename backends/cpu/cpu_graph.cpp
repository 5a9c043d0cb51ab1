// Running a step graph on the CPU: the step's batch copied, every node checked against its op's
// rules (graph/graph_check.h) and the buffers' bounds, the fusion pass's launches (cpu_fusion.h) run
// in order through the kernels of cpu_ops.cpp, cpu_matmul.cpp, cpu_attention.cpp and cpu_moe_ops.cpp.
#include <cstddef>
#include <cstring>
#include <string>

#include "cpu_backend.h"
#include "graph/graph_check.h"
#include "util/mxfp4.h"

namespace sluice::cpu {
namespace {

using graph::input;
using graph::output;

// A tensor as the kernels take it: a buffer of exactly its bytes at its offset (the kernels check
// their sizes against these).
struct View {
  sl_buffer buffer{};
  sl_buffer* get() { return &buffer; }
};

View view(const sl_tensor& t) {
  View v;
  if (t.kind == SL_TENSOR_BUFFER) {
    v.buffer.data = t.buffer->data + t.offset;
  } else {
    v.buffer.data = static_cast<std::byte*>(const_cast<void*>(t.host));
  }
  v.buffer.bytes = graph::bytes(t);
  return v;
}

sl_status take_batch(sl_backend* be, const sl_batch* batch, sl_error* err) {
  if (!batch || batch->n_tokens == 0 || !batch->positions || !batch->seq_slots || batch->n_seqs == 0)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "graph_compute: the step has no tokens");
  be->positions.assign(batch->positions, batch->positions + batch->n_tokens);
  be->seq_slots.assign(batch->seq_slots, batch->seq_slots + batch->n_tokens);
  be->n_seqs = batch->n_seqs;
  be->max_pages = batch->max_pages;
  const std::size_t table = static_cast<std::size_t>(batch->n_seqs) * batch->max_pages;
  if (table && !batch->page_table) return set_error(err, SL_ERR_INVALID_ARGUMENT, "graph_compute: the step has no page table");
  be->page_table.assign(batch->page_table, batch->page_table + table);
  if (batch->recent_table)
    be->recent_table.assign(batch->recent_table, batch->recent_table + table);
  else
    be->recent_table.clear();
  // 2.0's window table and state slots, where the host's batch has them.
  auto member = [&](std::size_t offset) { return batch->struct_size >= offset + sizeof(void*); };
  const int32_t* window = member(offsetof(sl_batch, window_table)) ? batch->window_table : nullptr;
  const int32_t* states = member(offsetof(sl_batch, state_slots)) ? batch->state_slots : nullptr;
  if (window)
    be->window_table.assign(window, window + table);
  else
    be->window_table.clear();
  if (states)
    be->state_slots.assign(states, states + batch->n_seqs);
  else
    be->state_slots.clear();
  for (uint32_t i = 0; i < batch->n_tokens; ++i)
    if (be->seq_slots[i] < 0 || static_cast<uint32_t>(be->seq_slots[i]) >= batch->n_seqs || be->positions[i] < 0)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "batch token " + std::to_string(i) + " has a bad sequence or position");
  return SL_OK;
}

// Every BUFFER tensor the node names lies inside its buffer.
bool within_buffers(const sl_graph& g, const sl_node& n) {
  auto inside = [](const sl_tensor* t) {
    return !t || t->kind != SL_TENSOR_BUFFER || (t->buffer && fits(t->buffer->bytes, t->offset, graph::bytes(*t)));
  };
  for (uint32_t i = 0; i < SL_NODE_MAX_INPUTS; ++i)
    if (!inside(input(g, n, i))) return false;
  for (uint32_t i = 0; i < SL_NODE_MAX_OUTPUTS; ++i)
    if (!inside(output(g, n, i))) return false;
  return true;
}

const sl_weight* weight_of(const sl_tensor* t) { return t ? t->weight : nullptr; }

// COPY with a sequence's state on either side (a STATE tensor: a row a sequence of the step).
sl_status copy_state(sl_backend* be, const sl_tensor& x, const sl_tensor& out, sl_kv_cache* cache, sl_error* err) {
  if (!cache) return set_error(err, SL_ERR_INVALID_ARGUMENT, "copy: a state without a KV cache in the step");
  const sl_tensor& state = x.kind == SL_TENSOR_STATE ? x : out;
  if (x.kind == SL_TENSOR_STATE && out.kind == SL_TENSOR_STATE)
    return set_error(err, SL_ERR_UNSUPPORTED, "copy: from one state to another (use kv_copy_state)");
  if (state.rows != be->n_seqs) return set_error(err, SL_ERR_INVALID_ARGUMENT, "copy: a state tensor has a row for each sequence of the step");
  if (state.state_layer >= cache->layout.n_layers || cache->layers[state.state_layer].kind != SL_KV_STATE)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "copy: layer " + std::to_string(state.state_layer) + " keeps no state");
  const uint64_t row_bytes = uint64_t(state.cols) * 4;
  if (!fits(cache->layers[state.state_layer].state_bytes, state.offset, row_bytes))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "copy: the state tensor lies past the layer's state");
  for (uint32_t i = 0; i < state.rows; ++i) {
    std::byte* s = state_of(be, cache, state.state_layer, i, err);
    if (!s) return SL_ERR_INVALID_ARGUMENT;
    s += state.offset;
    if (x.kind == SL_TENSOR_STATE)
      std::memcpy(out.buffer->data + out.offset + i * row_bytes, s, row_bytes);
    else
      std::memcpy(s, x.buffer->data + x.offset + i * row_bytes, row_bytes);
  }
  return SL_OK;
}

sl_status run_node(sl_backend* be, const sl_graph& g, const sl_node& n, sl_kv_cache* cache, sl_error* err) {
  const sl_tensor* in0 = input(g, n, 0);
  const sl_tensor* in1 = input(g, n, 1);
  const sl_tensor* in2 = input(g, n, 2);
  const sl_tensor* out = output(g, n, 0);
  auto needs_cache = [&]() -> sl_status {
    return cache ? SL_OK : set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(graph::node_name(n)) + ": the step has no KV cache");
  };
  switch (n.op) {
    case SL_OP_EMBED: {
      View o = view(*out);
      if (in1->kind == SL_TENSOR_HOST)
        return embed(be, in0->weight, static_cast<const int32_t*>(in1->host), static_cast<uint32_t>(graph::values(*in1)), o.get(), err);
      View ids = view(*in1);
      return embed_device(be, in0->weight, ids.get(), 0, static_cast<uint32_t>(graph::values(*in1)), o.get(), err);
    }
    case SL_OP_RMS_NORM: {
      const auto* p = graph::params<sl_norm_params>(n);
      View x = view(*in0), o = view(*out);
      return rms_norm(be, x.get(), in1->weight, p->weight_offset, o.get(), in0->rows, in0->cols, p->eps, err);
    }
    case SL_OP_MATMUL: {
      View x = view(*in0), o = view(*out);
      return matmul(be, x.get(), in0->rows, in1->weight, weight_of(in2), o.get(), err);
    }
    case SL_OP_ROPE: {
      const auto* p = graph::params<sl_rope_params>(n);
      View x = view(*in0);
      return rope(be, x.get(), p->n_heads, p->head_dim, p->rotary_dim, p->inv_freq, p->attention_factor, p->style, err);
    }
    case SL_OP_KV_WRITE: {
      if (auto s = needs_cache(); s != SL_OK) return s;
      View k = view(*in0), v = view(*in1);
      return kv_write(be, cache, graph::params<sl_kv_params>(n)->layer, k.get(), v.get(), err);
    }
    case SL_OP_ATTENTION: {
      if (auto s = needs_cache(); s != SL_OK) return s;
      const auto* p = graph::params<sl_attention_params>(n);
      View q = view(*in0), o = view(*out);
      const float* sinks = nullptr;
      View sink_view;
      if (in1) {
        sink_view = view(*in1);
        sinks = reinterpret_cast<const float*>(sink_view.buffer.data);
      }
      return attention(be, cache, p->layer, q.get(), p, sinks, o.get(), err);
    }
    case SL_OP_GLU: {
      View gate = view(*in0), up = view(*in1), o = view(*out);
      return gated_activation(be, graph::params<sl_glu_params>(n), gate.get(), up.get(), o.get(), graph::values(*out), err);
    }
    case SL_OP_ADD: {
      View a = view(*in0), b = view(*in1), o = view(*out);
      return add(be, a.get(), b.get(), o.get(), graph::values(*out), err);
    }
    case SL_OP_COPY: {
      if (in0->kind == SL_TENSOR_STATE || out->kind == SL_TENSOR_STATE) return copy_state(be, *in0, *out, cache, err);
      View x = view(*in0), o = view(*out);
      return copy(be, x.get(), 0, o.get(), 0, graph::values(*out), err);
    }
    case SL_OP_GET_ROWS: {
      View x = view(*in0), o = view(*out);
      return gather_rows(be, x.get(), static_cast<const int32_t*>(in1->host), static_cast<uint32_t>(graph::values(*in1)), in0->cols,
                         o.get(), err);
    }
    case SL_OP_SCATTER_ADD_ROWS: {
      View x = view(*in0), o = view(*out);
      return scatter_add_rows(be, x.get(), static_cast<const int32_t*>(in1->host), static_cast<const float*>(in2->host),
                              static_cast<uint32_t>(graph::values(*in1)), in0->cols, o.get(), err);
    }
    case SL_OP_SCALE: {
      const auto* p = graph::params<sl_scale_params>(n);
      View x = view(*in0), o = view(*out);
      return scale(be, x.get(), o.get(), graph::values(*out), p->scale, p->softcap, err);
    }
    case SL_OP_COPY_COLUMNS: {  // 2.2
      View x = view(*in0), o = view(*out);
      return copy_columns(be, x.get(), in0->cols, o.get(), out->rows, out->cols, *graph::params<sl_copy_columns_params>(n), err);
    }
    case SL_OP_HEAD_MATMUL: {  // 2.4
      View x = view(*in0), o = view(*out);
      return head_matmul(be, x.get(), in0->rows, in1->weight, *graph::params<sl_head_matmul_params>(n), o.get(), err);
    }
    case SL_OP_ARGMAX: {
      View x = view(*in0), o = view(*out);
      return argmax(be, x.get(), in0->rows, in0->cols, o.get(), 0, err);
    }
    case SL_OP_CAUSAL_CONV: {  // 2.2
      View x = view(*in0), o = view(*out);
      return causal_conv(be, cache, x.get(), in1->weight, graph::params<sl_conv_params>(n)->activation, o.get(), *output(g, n, 1), err);
    }
    case SL_OP_GATED_DELTA: {  // 2.2
      View qkv = view(*in0), a = view(*in1), b = view(*in2), o = view(*out);
      return gated_delta(be, cache, qkv.get(), a.get(), b.get(), input(g, n, 3)->weight, *graph::params<sl_gated_delta_params>(n), o.get(),
                         *output(g, n, 1), err);
    }
    case SL_OP_MOE_ROUTE: {  // 2.5
      const sl_tensor* weights = output(g, n, 1);
      View l = view(*in0), ids = view(*out), w = view(*weights);
      return moe_route(be, l.get(), in0->rows, in0->cols, weight_of(in1), *graph::params<sl_moe_route_params>(n), ids.get(), w.get(), err);
    }
    case SL_OP_MATMUL_ID: {  // 2.5
      View x = view(*in0), ids = view(*in2), o = view(*out);
      return matmul_id(be, x.get(), in0->rows, in1->weight, ids.get(), in2->rows, in2->cols, graph::params<sl_matmul_id_params>(n)->n_experts,
                       o.get(), err);
    }
    case SL_OP_MOE_COMBINE: {  // 2.5
      View x = view(*in0), w = view(*in1), o = view(*out);
      return moe_combine(be, x.get(), w.get(), out->rows, in1->cols, out->cols, o.get(), err);
    }
    default:
      return set_error(err, SL_ERR_UNSUPPORTED, std::string(graph::node_name(n)) + ": op not supported by the CPU backend");
  }
}

sl_status run_launch(sl_backend* be, const sl_graph& g, const Launch& l, sl_kv_cache* cache, sl_error* err) {
  const sl_node& first = g.nodes[l.first];
  switch (l.kind) {
    case LaunchKind::kProducts: {
      View x = view(*input(g, first, 0));
      const sl_weight* ws[kMatmulMultiMax];
      const sl_weight* biases[kMatmulMultiMax];
      View outs[kMatmulMultiMax];
      sl_buffer* out_ptrs[kMatmulMultiMax];
      for (uint32_t i = 0; i < l.count; ++i) {
        const sl_node& n = g.nodes[l.first + i];
        ws[i] = input(g, n, 1)->weight;
        biases[i] = weight_of(input(g, n, 2));
        outs[i] = view(*output(g, n, 0));
        out_ptrs[i] = outs[i].get();
      }
      return matmul_multi(be, x.get(), input(g, first, 0)->rows, l.count, ws, biases, out_ptrs, err);
    }
    case LaunchKind::kAddNorm: {
      const sl_node& norm = g.nodes[l.first + 1];
      const auto* p = graph::params<sl_norm_params>(norm);
      const sl_tensor* x = input(g, norm, 0);
      View xv = view(*x), delta = view(*input(g, first, 1)), o = view(*output(g, norm, 0));
      return add_rms_norm(be, xv.get(), delta.get(), input(g, norm, 1)->weight, p->weight_offset, o.get(), x->rows, x->cols, p->eps, err);
    }
    case LaunchKind::kNode:
      break;
  }
  return run_node(be, g, first, cache, err);
}

bool weight_form_runs(const sl_weight* w, uint32_t op) {
  if (mxfp4::is_mxfp4(*w)) return op == SL_OP_MATMUL;  // 2.3: products only
  if (w->dtype == SL_DTYPE_E2M1 || w->dtype == SL_DTYPE_E8M0) return false;  // another use of MXFP4's dtypes
  if (w->bits != 0)  // affine-quantized (MLX layout): products (2.4: per head too) and embedding lookups
    return (op == SL_OP_MATMUL || op == SL_OP_HEAD_MATMUL || op == SL_OP_EMBED || op == SL_OP_MATMUL_ID) &&
           (w->bits == 2 || w->bits == 3 || w->bits == 4 || w->bits == 5 || w->bits == 6 || w->bits == 8);
  return w->dtype == SL_DTYPE_F32 || w->dtype == SL_DTYPE_F16 || w->dtype == SL_DTYPE_BF16;
}

}  // namespace

// Ops that read or write a sequence's state (STATE tensors).
static bool takes_states(uint32_t op) { return op == SL_OP_COPY || op == SL_OP_CAUSAL_CONV || op == SL_OP_GATED_DELTA; }

int supports_node(const sl_backend*, const sl_node_query* q) {
  if (!q || !q->node || q->node->op == SL_OP_NONE || q->node->op >= SL_OP_COUNT) return 0;
  const sl_node& n = *q->node;
  if (n.op == SL_OP_GLU) {
    const auto* p = graph::params<sl_glu_params>(n);
    if (!p || p->activation > SL_ACT_SIGMOID) return 0;
  }
  for (uint32_t i = 0; i < SL_NODE_MAX_INPUTS; ++i) {
    if (n.inputs[i] == SL_NO_TENSOR || !q->tensors || n.inputs[i] >= q->n_tensors) continue;
    const sl_tensor& t = q->tensors[n.inputs[i]];
    if (t.kind == SL_TENSOR_WEIGHT && (!t.weight || !weight_form_runs(t.weight, n.op))) return 0;
    if (t.kind == SL_TENSOR_STATE && !takes_states(n.op)) return 0;
  }
  for (uint32_t i = 0; i < SL_NODE_MAX_OUTPUTS; ++i)
    if (n.outputs[i] != SL_NO_TENSOR && q->tensors && n.outputs[i] < q->n_tensors && q->tensors[n.outputs[i]].kind == SL_TENSOR_STATE &&
        !takes_states(n.op))
      return 0;
  return 1;  // every KV codec works through encode/decode or its fused hooks
}

sl_status graph_compute(sl_backend* be, const sl_graph* g, const sl_step* step, sl_error* err) {
  if (!g || !step || (g->n_nodes && !g->nodes) || (g->n_tensors && !g->tensors))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "graph_compute: no graph or step");
  try {
    if (auto s = take_batch(be, step->batch, err); s != SL_OK) return s;
    for (uint32_t i = 0; i < g->n_nodes; ++i) {
      const sl_node& n = g->nodes[i];
      if (std::string why = graph::check_node(*g, n, step->batch->n_tokens); !why.empty())
        return set_error(err, SL_ERR_INVALID_ARGUMENT, why);
      if (!within_buffers(*g, n))
        return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(graph::node_name(n)) + ": a tensor lies past its buffer's end");
    }
    for (const Launch& l : plan_launches(*g))
      if (auto s = run_launch(be, *g, l, step->cache, err); s != SL_OK) return s;
    return SL_OK;
  } catch (const std::bad_alloc&) {
    return set_error(err, SL_ERR_OUT_OF_MEMORY, "graph_compute: out of host memory");
  } catch (const std::exception& e) {
    return set_error(err, SL_ERR_INTERNAL, std::string("graph_compute: ") + e.what());
  }
}

}  // namespace sluice::cpu
