#pragma once
// Reading a step graph (sluice/graph.h) from a backend: the tensors a node names, its parameters
// checked against their struct_size, and where two tensors share memory. Header-only, so backend
// plugins use it without linking the host's libraries.
#include <cstdint>
#include <cstddef>

#include "sluice/graph.h"

namespace sluice::graph {

// The node's i-th input or output tensor, or nullptr where it has none.
inline const sl_tensor* input(const sl_graph& g, const sl_node& n, uint32_t i) {
  if (i >= SL_NODE_MAX_INPUTS || n.inputs[i] == SL_NO_TENSOR || n.inputs[i] >= g.n_tensors) return nullptr;
  return &g.tensors[n.inputs[i]];
}
inline const sl_tensor* output(const sl_graph& g, const sl_node& n, uint32_t i) {
  if (i >= SL_NODE_MAX_OUTPUTS || n.outputs[i] == SL_NO_TENSOR || n.outputs[i] >= g.n_tensors) return nullptr;
  return &g.tensors[n.outputs[i]];
}

// The node's parameters as P, or nullptr when they are missing or older than P's first `needed`
// bytes (a parameter struct only grows; members past its struct_size are absent).
template <class P>
const P* params(const sl_node& n, std::size_t needed = sizeof(P)) {
  const auto* p = static_cast<const P*>(n.params);
  if (!p || p->struct_size < needed) return nullptr;
  return p;
}

inline uint64_t dtype_bytes(uint32_t dtype) {
  switch (dtype) {
    case SL_DTYPE_F16:
    case SL_DTYPE_BF16: return 2;
    default: return 4;
  }
}

inline uint64_t values(const sl_tensor& t) { return uint64_t(t.rows) * t.cols; }
inline uint64_t bytes(const sl_tensor& t) { return values(t) * dtype_bytes(t.dtype); }

// Whether two BUFFER tensors overlap in memory (views of one buffer: q as [n, heads·dim] and as
// [n·heads, dim] are the same values).
inline bool overlaps(const sl_tensor& a, const sl_tensor& b) {
  if (a.kind != SL_TENSOR_BUFFER || b.kind != SL_TENSOR_BUFFER || a.buffer != b.buffer) return false;
  return a.offset < b.offset + bytes(b) && b.offset < a.offset + bytes(a);
}
// Whether two BUFFER tensors are the same range (shape aside).
inline bool same_memory(const sl_tensor& a, const sl_tensor& b) {
  return a.kind == SL_TENSOR_BUFFER && b.kind == SL_TENSOR_BUFFER && a.buffer == b.buffer && a.offset == b.offset &&
         bytes(a) == bytes(b);
}

// Whether any node in [from, to) reads memory that overlaps t.
inline bool read_between(const sl_graph& g, uint32_t from, uint32_t to, const sl_tensor& t) {
  for (uint32_t i = from; i < to && i < g.n_nodes; ++i)
    for (uint32_t k = 0; k < SL_NODE_MAX_INPUTS; ++k)
      if (const sl_tensor* in = input(g, g.nodes[i], k); in && overlaps(*in, t)) return true;
  return false;
}

inline const char* op_name(uint32_t op) {
  switch (op) {
    case SL_OP_EMBED: return "embed";
    case SL_OP_RMS_NORM: return "rms_norm";
    case SL_OP_MATMUL: return "matmul";
    case SL_OP_ROPE: return "rope";
    case SL_OP_KV_WRITE: return "kv_write";
    case SL_OP_ATTENTION: return "attention";
    case SL_OP_GLU: return "glu";
    case SL_OP_ADD: return "add";
    case SL_OP_COPY: return "copy";
    case SL_OP_GET_ROWS: return "get_rows";
    case SL_OP_SCATTER_ADD_ROWS: return "scatter_add_rows";
    case SL_OP_ARGMAX: return "argmax";
    case SL_OP_SCALE: return "scale";
    case SL_OP_CAUSAL_CONV: return "causal_conv";
    case SL_OP_GATED_DELTA: return "gated_delta";
    case SL_OP_COPY_COLUMNS: return "copy_columns";
    case SL_OP_HEAD_MATMUL: return "head_matmul";
    case SL_OP_MOE_ROUTE: return "moe_route";
    case SL_OP_MATMUL_ID: return "matmul_id";
    case SL_OP_MOE_COMBINE: return "moe_combine";
    default: return "unknown op";
  }
}

// The node's name for messages: its own, else its op's.
inline const char* node_name(const sl_node& n) { return n.name && *n.name ? n.name : op_name(n.op); }

}  // namespace sluice::graph
