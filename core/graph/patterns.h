#pragma once
// Runs of nodes that backends' fusion passes join, as predicates over a graph (header-only, for
// plugins). Each says when the joined kernel computes what the nodes would one by one: the tensors
// the run reads are not overwritten before the run has read them.
#include <cstdint>
#include <vector>

#include "graph/graph_view.h"

namespace sluice::graph {

inline bool is_buffer(const sl_tensor* t) { return t && t->kind == SL_TENSOR_BUFFER; }

// Nodes [first, first + count) are MATMULs of one input (the same memory and rows), their outputs
// distinct from the input and from each other: one pass over the input serves them all.
inline bool products_of_one_input(const sl_graph& g, uint32_t first, uint32_t count) {
  if (count == 0 || first + count > g.n_nodes) return false;
  const sl_tensor* x = input(g, g.nodes[first], 0);
  if (!is_buffer(x)) return false;
  for (uint32_t i = first; i < first + count; ++i) {
    const sl_node& n = g.nodes[i];
    const sl_tensor *y = input(g, n, 0), *out = output(g, n, 0);
    if (n.op != SL_OP_MATMUL || !is_buffer(y) || !is_buffer(out) || !same_memory(*x, *y) || x->rows != y->rows) return false;
    if (overlaps(*out, *x)) return false;
    for (uint32_t j = first; j < i; ++j)
      if (const sl_tensor* other = output(g, g.nodes[j], 0); !is_buffer(other) || overlaps(*other, *out)) return false;
  }
  return true;
}

// nodes[i] adds in place (a += b) and nodes[i + 1] is the RMS_NORM of that sum into a tensor distinct
// from both addends: the residual step before a norm, one pass over the rows.
inline bool add_then_norm(const sl_graph& g, uint32_t i) {
  if (i + 1 >= g.n_nodes) return false;
  const sl_node& add = g.nodes[i];
  const sl_node& norm = g.nodes[i + 1];
  if (add.op != SL_OP_ADD || norm.op != SL_OP_RMS_NORM) return false;
  const sl_tensor *a = input(g, add, 0), *b = input(g, add, 1), *sum = output(g, add, 0);
  const sl_tensor *x = input(g, norm, 0), *out = output(g, norm, 0);
  if (!is_buffer(a) || !is_buffer(b) || !is_buffer(sum) || !is_buffer(x) || !is_buffer(out)) return false;
  return same_memory(*a, *sum) && same_memory(*x, *sum) && !overlaps(*out, *a) && !overlaps(*out, *b) && !overlaps(*b, *a);
}

// nodes[i] and nodes[i + 1] are ROPEs of two distinct tensors with one table (the same rotary dims,
// frequencies, factor, style and head_dim; the head counts may differ): q and k, rotated in one pass.
inline bool rope_pair(const sl_graph& g, uint32_t i) {
  if (i + 1 >= g.n_nodes || g.nodes[i].op != SL_OP_ROPE || g.nodes[i + 1].op != SL_OP_ROPE) return false;
  const auto* a = params<sl_rope_params>(g.nodes[i]);
  const auto* b = params<sl_rope_params>(g.nodes[i + 1]);
  const sl_tensor *x = input(g, g.nodes[i], 0), *y = input(g, g.nodes[i + 1], 0);
  if (!a || !b || !is_buffer(x) || !is_buffer(y) || overlaps(*x, *y) || x->rows != y->rows) return false;
  if (a->head_dim != b->head_dim || a->rotary_dim != b->rotary_dim || a->style != b->style ||
      a->attention_factor != b->attention_factor || !a->inv_freq || !b->inv_freq)
    return false;
  for (uint32_t f = 0; f < a->rotary_dim / 2; ++f)
    if (a->inv_freq[f] != b->inv_freq[f]) return false;
  return true;
}

// nodes[i] is the KV_WRITE of k and nodes[i + 1] the ATTENTION of the same layer, whose output
// overlaps none of q, k, v and the sinks, and whose query is neither k nor v: the attention may store
// the rows it is about to read in its own pass.
inline bool kv_write_then_attention(const sl_graph& g, uint32_t i) {
  if (i + 1 >= g.n_nodes || g.nodes[i].op != SL_OP_KV_WRITE || g.nodes[i + 1].op != SL_OP_ATTENTION) return false;
  const auto* kv = params<sl_kv_params>(g.nodes[i]);
  const auto* att = params<sl_attention_params>(g.nodes[i + 1]);
  if (!kv || !att || kv->layer != att->layer) return false;
  const sl_tensor *k = input(g, g.nodes[i], 0), *v = input(g, g.nodes[i], 1);
  const sl_tensor *q = input(g, g.nodes[i + 1], 0), *sinks = input(g, g.nodes[i + 1], 1), *out = output(g, g.nodes[i + 1], 0);
  if (!is_buffer(k) || !is_buffer(v) || !is_buffer(q) || !is_buffer(out)) return false;
  if (overlaps(*out, *q) || overlaps(*out, *k) || overlaps(*out, *v) || overlaps(*q, *k) || overlaps(*q, *v)) return false;
  return !sinks || (is_buffer(sinks) && !overlaps(*sinks, *out) && !overlaps(*sinks, *q) && !overlaps(*sinks, *k));
}

// nodes[i] is a KV_WRITE whose k is the second tensor of the rope pair at nodes[i - 2] and whose v is
// neither: the pair may run in the write's pass (k rotated before it is stored).
inline bool rope_pair_then_kv_write(const sl_graph& g, uint32_t i) {
  if (i < 2 || i >= g.n_nodes || g.nodes[i].op != SL_OP_KV_WRITE || !rope_pair(g, i - 2)) return false;
  const sl_tensor *q = input(g, g.nodes[i - 2], 0), *kr = input(g, g.nodes[i - 1], 0);
  const sl_tensor *k = input(g, g.nodes[i], 0), *v = input(g, g.nodes[i], 1);
  return is_buffer(k) && is_buffer(v) && same_memory(*k, *kr) && !overlaps(*v, *q) && !overlaps(*v, *kr);
}

// nodes[i] and nodes[i + 1] are products of one input (gate and up) and nodes[i + 2] the GLU of
// their outputs into a tensor distinct from the input and both products.
inline bool glu_of_products(const sl_graph& g, uint32_t i) {
  if (i + 2 >= g.n_nodes || !products_of_one_input(g, i, 2) || g.nodes[i + 2].op != SL_OP_GLU) return false;
  const sl_node& glu = g.nodes[i + 2];
  const sl_tensor *x = input(g, g.nodes[i], 0), *gate = output(g, g.nodes[i], 0), *up = output(g, g.nodes[i + 1], 0);
  const sl_tensor *a = input(g, glu, 0), *b = input(g, glu, 1), *act = output(g, glu, 0);
  if (!is_buffer(a) || !is_buffer(b) || !is_buffer(act)) return false;
  return same_memory(*a, *gate) && same_memory(*b, *up) && !overlaps(*act, *x) && !overlaps(*act, *gate) && !overlaps(*act, *up);
}

// nodes[i] is a product whose output the ADD at nodes[i + 1] adds in place into x, and nodes[i + 2]
// the RMS_NORM of that sum (add_then_norm), neither x nor the norm's output overlapping the
// product's input: the residual step after an output projection, in the product's pass.
inline bool product_then_add_norm(const sl_graph& g, uint32_t i) {
  if (i + 2 >= g.n_nodes || g.nodes[i].op != SL_OP_MATMUL || !add_then_norm(g, i + 1)) return false;
  const sl_tensor *in = input(g, g.nodes[i], 0), *p = output(g, g.nodes[i], 0);
  const sl_tensor *x = input(g, g.nodes[i + 1], 0), *delta = input(g, g.nodes[i + 1], 1), *h = output(g, g.nodes[i + 2], 0);
  if (!is_buffer(in) || !is_buffer(p)) return false;
  return same_memory(*delta, *p) && !overlaps(*x, *in) && !overlaps(*h, *in) && !overlaps(*x, *p);
}

// nodes[i] is an EMBED and nodes[i + 1] the RMS_NORM of its rows into a tensor distinct from them.
inline bool embed_then_norm(const sl_graph& g, uint32_t i) {
  if (i + 1 >= g.n_nodes || g.nodes[i].op != SL_OP_EMBED || g.nodes[i + 1].op != SL_OP_RMS_NORM) return false;
  const sl_tensor *e = output(g, g.nodes[i], 0), *x = input(g, g.nodes[i + 1], 0), *out = output(g, g.nodes[i + 1], 0);
  return is_buffer(e) && is_buffer(x) && is_buffer(out) && same_memory(*e, *x) && !overlaps(*out, *e);
}

// A run of nodes a backend launches together.
enum class RunKind {
  kNode,      // one node alone
  kProducts,  // MATMULs of one input (products_of_one_input)
  kAddNorm,   // ADD in place, then RMS_NORM of the sum (add_then_norm)
};

struct Run {
  RunKind kind;
  uint32_t first;  // nodes [first, first + count)
  uint32_t count;
};

// The joins both in-tree backends make, in one left-to-right pass: the longest run of products of
// one input (up to max_products), else an add-then-norm pair, else the node alone. Only neighbours
// join, so a graph in another order runs node by node, with the same results.
inline std::vector<Run> plan_common_runs(const sl_graph& g, uint32_t max_products) {
  std::vector<Run> plan;
  for (uint32_t i = 0; i < g.n_nodes;) {
    uint32_t count = 1;
    while (count < max_products && i + count < g.n_nodes && products_of_one_input(g, i, count + 1)) ++count;
    if (count > 1) {
      plan.push_back({RunKind::kProducts, i, count});
      i += count;
    } else if (add_then_norm(g, i)) {
      plan.push_back({RunKind::kAddNorm, i, 2});
      i += 2;
    } else {
      plan.push_back({RunKind::kNode, i, 1});
      ++i;
    }
  }
  return plan;
}

}  // namespace sluice::graph
