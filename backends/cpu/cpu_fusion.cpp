// The CPU fusion pass: patterns over consecutive nodes. Only neighbours are joined, so a graph in
// another order (or with a node between) runs node by node, with the same results.
#include "cpu_fusion.h"

#include "graph/graph_view.h"

namespace sluice::cpu {
namespace {

using graph::input;
using graph::output;

bool is_buffer(const sl_tensor* t) { return t && t->kind == SL_TENSOR_BUFFER; }

// Node b is a MATMUL of the same input as a (a MATMUL), writing somewhere neither reads nor writes.
bool joins_product(const sl_graph& g, uint32_t first, uint32_t count) {
  const sl_node& head = g.nodes[first];
  const sl_node& next = g.nodes[first + count];
  if (next.op != SL_OP_MATMUL) return false;
  const sl_tensor *x = input(g, head, 0), *y = input(g, next, 0), *out = output(g, next, 0);
  if (!is_buffer(x) || !is_buffer(y) || !is_buffer(out) || !graph::same_memory(*x, *y) || x->rows != y->rows) return false;
  if (graph::overlaps(*out, *x)) return false;
  for (uint32_t i = first; i < first + count; ++i) {
    const sl_tensor* other = output(g, g.nodes[i], 0);
    if (!is_buffer(other) || graph::overlaps(*other, *out)) return false;
  }
  return true;
}

// nodes[i] adds in place (out = a) and nodes[i + 1] normalizes that sum into a distinct tensor.
bool add_then_norm(const sl_graph& g, uint32_t i) {
  if (i + 1 >= g.n_nodes) return false;
  const sl_node& add = g.nodes[i];
  const sl_node& norm = g.nodes[i + 1];
  if (add.op != SL_OP_ADD || norm.op != SL_OP_RMS_NORM) return false;
  const sl_tensor *a = input(g, add, 0), *b = input(g, add, 1), *sum = output(g, add, 0);
  const sl_tensor *x = input(g, norm, 0), *out = output(g, norm, 0);
  if (!is_buffer(a) || !is_buffer(b) || !is_buffer(sum) || !is_buffer(x) || !is_buffer(out)) return false;
  return graph::same_memory(*a, *sum) && graph::same_memory(*x, *sum) &&
         !graph::overlaps(*out, *a) && !graph::overlaps(*out, *b) && !graph::overlaps(*b, *a);
}

}  // namespace

std::vector<Launch> plan_launches(const sl_graph& g) {
  std::vector<Launch> plan;
  for (uint32_t i = 0; i < g.n_nodes;) {
    const sl_node& n = g.nodes[i];
    if (n.op == SL_OP_MATMUL) {
      uint32_t count = 1;
      while (count < kMatmulMultiMax && i + count < g.n_nodes && joins_product(g, i, count)) ++count;
      if (count > 1) {
        plan.push_back({LaunchKind::kMatmulMulti, i, count});
        i += count;
        continue;
      }
    }
    if (add_then_norm(g, i)) {
      plan.push_back({LaunchKind::kAddRmsNorm, i, 2});
      i += 2;
      continue;
    }
    plan.push_back({LaunchKind::kSingle, i, 1});
    ++i;
  }
  return plan;
}

}  // namespace sluice::cpu
