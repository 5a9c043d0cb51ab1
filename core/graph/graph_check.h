#pragma once
// The shape rules of each op (sluice/graph.h), checked before a backend runs a node: a graph that
// breaks them gets an error naming the node, never a read or write out of bounds. Header-only, for
// backend plugins; buffer bounds are the backend's to check (it knows its buffers' sizes).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "graph/graph_view.h"

namespace sluice::graph {

// An attention node's V width (2.0's v_head_dim; 0 or absent: head_dim).
inline uint32_t attention_v_dim(const sl_attention_params& p) {
  return p.struct_size >= offsetof(sl_attention_params, v_head_dim) + sizeof(uint32_t) && p.v_head_dim ? p.v_head_dim : p.head_dim;
}

namespace detail {

inline std::string shape(const sl_tensor& t) { return "[" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + "]"; }

inline bool is_f32_values(const sl_tensor* t) {
  return t && (t->kind == SL_TENSOR_BUFFER || t->kind == SL_TENSOR_HOST) && t->dtype == SL_DTYPE_F32;
}
inline bool is_i32(const sl_tensor* t) {
  return t && (t->kind == SL_TENSOR_BUFFER || t->kind == SL_TENSOR_HOST) && t->dtype == SL_DTYPE_I32;
}
inline bool is_weight(const sl_tensor* t) { return t && t->kind == SL_TENSOR_WEIGHT && t->weight; }
inline bool is_activation(const sl_tensor* t) { return t && t->kind == SL_TENSOR_BUFFER && t->dtype == SL_DTYPE_F32 && t->buffer; }
// A sequence's state (2.0): F32 values, one row a sequence of the step; the backend checks the layer,
// the rows against the step's sequences and offset + cols against the layer's state.
inline bool is_state(const sl_tensor* t) {
  return t && t->struct_size >= offsetof(sl_tensor, state_layer) + sizeof(uint32_t) && t->kind == SL_TENSOR_STATE &&
         t->dtype == SL_DTYPE_F32 && t->offset % 4 == 0;
}
// Every index of a host I32 tensor in [0, limit).
inline bool rows_within(const sl_tensor& rows, uint32_t limit) {
  const auto* r = static_cast<const int32_t*>(rows.host);
  for (uint64_t i = 0; i < values(rows); ++i)
    if (r[i] < 0 || static_cast<uint32_t>(r[i]) >= limit) return false;
  return true;
}

}  // namespace detail

// "" when the node keeps its op's rules, else what is wrong. n_tokens: the step's batch size.
inline std::string check_node(const sl_graph& g, const sl_node& n, uint32_t n_tokens) {
  using namespace detail;
  const sl_tensor* in0 = input(g, n, 0);
  const sl_tensor* in1 = input(g, n, 1);
  const sl_tensor* in2 = input(g, n, 2);
  const sl_tensor* out = output(g, n, 0);
  auto fail = [&](const std::string& why) { return std::string(node_name(n)) + ": " + why; };
  for (uint32_t i = 0; i < SL_NODE_MAX_INPUTS; ++i)
    if (n.inputs[i] != SL_NO_TENSOR && n.inputs[i] >= g.n_tensors) return fail("input " + std::to_string(i) + " is not a tensor of the graph");
  for (uint32_t i = 0; i < SL_NODE_MAX_OUTPUTS; ++i)
    if (n.outputs[i] != SL_NO_TENSOR && n.outputs[i] >= g.n_tensors) return fail("output " + std::to_string(i) + " is not a tensor of the graph");
  switch (n.op) {
    case SL_OP_EMBED:
      if (!is_weight(in0) || !is_i32(in1) || !is_activation(out)) return fail("needs a table weight, I32 ids and an F32 output");
      if (out->rows != values(*in1) || out->cols != in0->weight->cols)
        return fail("output " + shape(*out) + " does not hold " + std::to_string(values(*in1)) + " rows of " + std::to_string(in0->weight->cols));
      return {};
    case SL_OP_RMS_NORM: {
      const auto* p = params<sl_norm_params>(n);
      if (!p) return fail("missing sl_norm_params");
      if (!is_activation(in0) || !is_weight(in1) || !is_activation(out)) return fail("needs F32 x and output and a weight");
      if (in1->weight->bits != 0 || in1->weight->cols != in0->cols || values(*out) != values(*in0))
        return fail("x " + shape(*in0) + ", weight of " + std::to_string(in1->weight->cols) + ", output " + shape(*out) + " do not fit");
      return {};
    }
    case SL_OP_MATMUL:
      if (!is_activation(in0) || !is_weight(in1) || !is_activation(out)) return fail("needs F32 x and output and a weight");
      if (in0->cols != in1->weight->cols || out->rows != in0->rows || out->cols != in1->weight->rows)
        return fail("x " + shape(*in0) + " times weight [" + std::to_string(in1->weight->rows) + ", " + std::to_string(in1->weight->cols) +
                    "] does not give " + shape(*out));
      if (in2 && (!is_weight(in2) || in2->weight->bits != 0 || in2->weight->cols != in1->weight->rows)) return fail("bias does not fit");
      if (overlaps(*in0, *out)) return fail("output overlaps x");
      return {};
    case SL_OP_ROPE: {
      const auto* p = params<sl_rope_params>(n);
      if (!p || !p->inv_freq) return fail("missing sl_rope_params or inv_freq");
      if (!is_activation(in0) || !out || !same_memory(*in0, *out)) return fail("rotates x in place: output must be x");
      if (p->rotary_dim > p->head_dim || p->rotary_dim % 2 || uint64_t(p->n_heads) * p->head_dim != in0->cols || in0->rows != n_tokens)
        return fail("x " + shape(*in0) + " is not [tokens, n_heads * head_dim] with rotary_dim <= head_dim");
      return {};
    }
    case SL_OP_KV_WRITE:
      if (!params<sl_kv_params>(n)) return fail("missing sl_kv_params");
      if (!is_activation(in0) || !is_activation(in1) || in0->rows != n_tokens || in1->rows != n_tokens)
        return fail("needs k [tokens, n_kv_heads * k_head_dim] and v [tokens, n_kv_heads * v_head_dim]");
      return {};
    case SL_OP_ATTENTION: {
      const auto* p = params<sl_attention_params>(n);
      if (!p) return fail("missing sl_attention_params");
      const uint32_t v_dim = attention_v_dim(*p);
      if (!is_activation(in0) || !is_activation(out) || in0->rows != n_tokens || out->rows != n_tokens ||
          uint64_t(p->n_heads) * p->head_dim != in0->cols || values(*out) != uint64_t(n_tokens) * p->n_heads * v_dim)
        return fail("needs q of [tokens, n_heads * head_dim] and output of [tokens, n_heads * v_head_dim]");
      if (p->n_kv_heads == 0 || p->n_heads % p->n_kv_heads) return fail("n_heads is not a multiple of n_kv_heads");
      if (in1 && (!is_f32_values(in1) || values(*in1) < p->n_heads)) return fail("sinks must be F32 [1, n_heads]");
      if (overlaps(*in0, *out)) return fail("output overlaps q");
      return {};
    }
    case SL_OP_GLU:
      if (!params<sl_glu_params>(n)) return fail("missing sl_glu_params");
      if (const auto* p = params<sl_glu_params>(n); p->activation == SL_ACT_SWIGLU_CLAMPED) {
        if (p->struct_size < offsetof(sl_glu_params, limit) + sizeof(float)) return fail("the clamped SwiGLU needs alpha and limit (ABI 2.2)");
        if (!(std::isfinite(p->alpha) && std::isfinite(p->limit) && p->limit > 0)) return fail("the clamped SwiGLU needs a finite alpha and a positive limit");
      }
      if (!is_activation(in0) || !is_activation(in1) || !is_activation(out) || values(*in0) != values(*in1) || values(*out) != values(*in0))
        return fail("needs gate, up and output of one size");
      return {};
    case SL_OP_ADD:
      if (!is_activation(in0) || !is_activation(in1) || !is_activation(out) || values(*in0) != values(*in1) || values(*out) != values(*in0))
        return fail("needs a, b and output of one size");
      return {};
    case SL_OP_COPY:
      if (!(is_activation(in0) || is_state(in0)) || !(is_activation(out) || is_state(out)) || values(*in0) != values(*out))
        return fail("needs x and output of one size (F32 activations or states)");
      return {};
    case SL_OP_GET_ROWS:
      if (!is_activation(in0) || !is_i32(in1) || in1->kind != SL_TENSOR_HOST || !is_activation(out)) return fail("needs F32 x, host I32 rows, F32 output");
      if (out->rows != values(*in1) || out->cols != in0->cols) return fail("output " + shape(*out) + " does not fit the rows asked");
      if (overlaps(*in0, *out)) return fail("output overlaps x");
      return rows_within(*in1, in0->rows) ? std::string() : fail("a row index lies outside x " + shape(*in0));
    case SL_OP_SCATTER_ADD_ROWS:
      if (!is_activation(in0) || !is_i32(in1) || in1->kind != SL_TENSOR_HOST || !in2 || in2->kind != SL_TENSOR_HOST ||
          in2->dtype != SL_DTYPE_F32 || !is_activation(out))
        return fail("needs F32 x, host I32 rows, host F32 weights, F32 output");
      if (values(*in1) != in0->rows || values(*in2) != in0->rows || out->cols != in0->cols)
        return fail("x " + shape(*in0) + ", rows and weights do not fit output " + shape(*out));
      if (overlaps(*in0, *out)) return fail("output overlaps x");
      return rows_within(*in1, out->rows) ? std::string() : fail("a row index lies outside the output " + shape(*out));
    case SL_OP_ARGMAX:
      if (!is_activation(in0) || !out || out->kind != SL_TENSOR_BUFFER || out->dtype != SL_DTYPE_I32 || values(*out) != in0->rows)
        return fail("needs F32 x [r, c] and an I32 output of r values");
      return {};
    case SL_OP_SCALE: {
      const auto* p = params<sl_scale_params>(n);
      if (!p) return fail("missing sl_scale_params");
      if (!std::isfinite(p->scale) || !std::isfinite(p->softcap) || p->softcap < 0) return fail("scale and softcap must be finite, softcap >= 0");
      if (!is_activation(in0) || !is_activation(out) || values(*out) != values(*in0)) return fail("needs x and output of one size");
      return {};
    }
    case SL_OP_CAUSAL_CONV: {  // 2.2
      const auto* p = params<sl_conv_params>(n);
      const sl_tensor* window = output(g, n, 1);
      if (!p) return fail("missing sl_conv_params");
      if (p->activation != SL_ACT_SILU && p->activation != SL_CONV_NO_ACTIVATION) return fail("activation must be SiLU or none");
      if (!is_activation(in0) || !is_weight(in1) || !is_activation(out) || !is_state(window))
        return fail("needs F32 x and output, a weight and a STATE window");
      const sl_weight& w = *in1->weight;
      if (w.bits != 0 || w.cols < 1 || w.rows != in0->cols || in0->rows != n_tokens || out->rows != n_tokens || out->cols != in0->cols)
        return fail("x " + shape(*in0) + ", weight [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) + "] and output " +
                    shape(*out) + " are not [tokens, C], [C, K], [tokens, C]");
      if (uint64_t(window->cols) != uint64_t(w.cols - 1) * w.rows) return fail("the window is not (K - 1) * C values a sequence");
      if (overlaps(*in0, *out)) return fail("output overlaps x");
      return {};
    }
    case SL_OP_GATED_DELTA: {  // 2.2
      const auto* p = params<sl_gated_delta_params>(n);
      const sl_tensor* in3 = input(g, n, 3);
      const sl_tensor* state = output(g, n, 1);
      if (!p) return fail("missing sl_gated_delta_params");
      if (p->n_k_heads == 0 || p->n_v_heads % p->n_k_heads || p->k_head_dim == 0 || p->v_head_dim == 0 || !std::isfinite(p->scale) ||
          !(p->l2_eps >= 0) || !std::isfinite(p->l2_eps))
        return fail("heads, widths, scale or l2_eps out of range (n_v_heads a multiple of n_k_heads)");
      const uint64_t qk = uint64_t(p->n_k_heads) * p->k_head_dim, vd = uint64_t(p->n_v_heads) * p->v_head_dim;
      if (!is_activation(in0) || !is_activation(in1) || !is_activation(in2) || !is_weight(in3) || !is_activation(out) || !is_state(state))
        return fail("needs F32 qkv, a, b and output, an A_log weight and a STATE");
      if (in0->rows != n_tokens || in0->cols != 2 * qk + vd || values(*in1) != uint64_t(n_tokens) * p->n_v_heads ||
          values(*in2) != uint64_t(n_tokens) * p->n_v_heads || values(*out) != n_tokens * vd)
        return fail("qkv " + shape(*in0) + ", a, b and output do not fit the heads");
      if (in3->weight->bits != 0 || in3->weight->rows != 1 || in3->weight->cols != p->n_v_heads) return fail("A_log is not [1, n_v_heads]");
      if (uint64_t(state->cols) != uint64_t(p->n_v_heads) * p->k_head_dim * p->v_head_dim)
        return fail("the state is not n_v_heads * k_head_dim * v_head_dim values a sequence");
      for (const sl_tensor* t : {in0, in1, in2})
        if (overlaps(*t, *out)) return fail("output overlaps an input");
      return {};
    }
    case SL_OP_COPY_COLUMNS: {
      const auto* p = params<sl_copy_columns_params>(n);
      if (!p) return fail("missing sl_copy_columns_params");
      if (!is_activation(in0) || !is_activation(out)) return fail("needs F32 x and output");
      if (p->width == 0 || p->repeat == 0) return fail("width and repeat must be at least 1");
      if (uint64_t(p->src_col) + p->width > in0->cols || uint64_t(p->dst_col) + p->width > out->cols)
        return fail("columns past x " + shape(*in0) + " or the output " + shape(*out));
      if (uint64_t(in0->rows) * p->repeat != out->rows) return fail("output " + shape(*out) + " needs repeat × x's rows " + shape(*in0));
      if (overlaps(*in0, *out)) return fail("output overlaps x");
      return {};
    }
    case SL_OP_HEAD_MATMUL: {  // 2.4
      const auto* p = params<sl_head_matmul_params>(n);
      if (!p) return fail("missing sl_head_matmul_params");
      if (!is_activation(in0) || !is_weight(in1) || !is_activation(out)) return fail("needs F32 x and output and a weight");
      const sl_weight& w = *in1->weight;
      if (p->n_heads == 0 || p->slice_rows == 0 || p->transpose > 1 || uint64_t(p->row_offset) + p->slice_rows > p->head_rows ||
          uint64_t(p->n_heads) * p->head_rows != w.rows)
        return fail("heads and slices do not fit the weight's " + std::to_string(w.rows) + " rows");
      const uint64_t in_w = p->transpose ? p->slice_rows : w.cols, out_w = p->transpose ? w.cols : p->slice_rows;
      if (in0->rows != out->rows || in0->cols != p->n_heads * in_w || out->cols != p->n_heads * out_w)
        return fail("x " + shape(*in0) + " and output " + shape(*out) + " are not [tokens, n_heads × the slice's widths]");
      if (overlaps(*in0, *out)) return fail("output overlaps x");
      return {};
    }
    case SL_OP_MOE_ROUTE: {  // 2.5
      const auto* p = params<sl_moe_route_params>(n);
      const sl_tensor* weights = output(g, n, 1);
      if (!p) return fail("missing sl_moe_route_params");
      if (!is_activation(in0) || !out || out->kind != SL_TENSOR_BUFFER || !out->buffer || out->dtype != SL_DTYPE_I32 ||
          !is_activation(weights))
        return fail("needs F32 logits, an I32 ids output and an F32 weights output");
      if (p->kind > SL_ROUTE_TOPK_SOFTMAX || p->k == 0 || p->k > in0->cols) return fail("k must be 1 … the experts, kind a sl_route_kind");
      if (values(*out) != uint64_t(in0->rows) * p->k || values(*weights) != values(*out))
        return fail("ids and weights must hold k values for each of the logits' " + std::to_string(in0->rows) + " rows");
      if (in1 && (!is_weight(in1) || in1->weight->bits != 0 || in1->weight->dtype != SL_DTYPE_F32 || in1->weight->cols != in0->cols))
        return fail("the experts' factors must be an F32 weight [1, E]");
      if (overlaps(*out, *weights) || overlaps(*in0, *out) || overlaps(*in0, *weights)) return fail("outputs overlap each other or the logits");
      return {};
    }
    case SL_OP_MATMUL_ID: {  // 2.5
      const auto* p = params<sl_matmul_id_params>(n);
      if (!p) return fail("missing sl_matmul_id_params");
      if (!is_activation(in0) || !is_weight(in1) || !in2 || in2->kind != SL_TENSOR_BUFFER || !in2->buffer || in2->dtype != SL_DTYPE_I32 ||
          !is_activation(out))
        return fail("needs F32 x and output, a weight and device I32 ids");
      const sl_weight& w = *in1->weight;
      if (p->n_experts == 0 || w.rows % p->n_experts) return fail("the weight's " + std::to_string(w.rows) + " rows are not n_experts stacked matrices");
      const uint64_t slots = values(*in2), per_row = in2->cols;
      if (in2->rows == 0 || per_row == 0) return fail("no ids");
      if (in0->cols != w.cols || (in0->rows != in2->rows && in0->rows != slots)) return fail("x " + shape(*in0) + " is not [n or n * k, cols]");
      if (out->rows != slots || out->cols != w.rows / p->n_experts) return fail("output " + shape(*out) + " is not [n * k, rows an expert]");
      if (overlaps(*in0, *out) || overlaps(*in2, *out)) return fail("output overlaps an input");
      return {};
    }
    case SL_OP_MOE_COMBINE:  // 2.5
      if (!is_activation(in0) || !is_activation(in1) || !is_activation(out)) return fail("needs F32 x, weights and output");
      if (out->rows == 0 || in1->rows != out->rows || in0->rows != uint64_t(out->rows) * in1->cols || in0->cols != out->cols)
        return fail("x " + shape(*in0) + " and weights " + shape(*in1) + " are not [n * k, c] and [n, k] for output " + shape(*out));
      if (overlaps(*in0, *out) || overlaps(*in1, *out)) return fail("output overlaps an input");
      return {};
    default:
      return fail("op " + std::to_string(n.op) + " is not known to this backend");
  }
}

}  // namespace sluice::graph
