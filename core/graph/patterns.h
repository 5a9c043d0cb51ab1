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
