#pragma once
// The OpenCL backend's fusion pass: which runs of a step graph's nodes it hands its kernels as one
// launch. Device-free and pure (graph and options in, launches out), unit-tested without a GPU
// (tests/opencl/cl_fusion_plan_test.cpp); cl_graph.cpp runs the launches.
//
// A launch costs 5–7 µs on the H100 however little it does, so a decode layer is worth running in as
// few launches as its data flow allows. The joins, each a pattern of graph/patterns.h:
//   - products of one input: one pass over the input serves them all (q/k/v; gate/up where the GLU
//     join does not apply);
//   - the residual add and the norm after it (kAddNorm: one pass over the rows);
//   - rope(q), rope(k): one launch (kRopePair) — on a device cache inside the kv_write of k
//     (kRopeKvWrite), and in decode inside the attention that reads them (kRopeKvAttention,
//     kKvAttention without rope: attention_short_join stores the rows it then reads);
// and, where the dp4a decode products apply (NVIDIA, one row, 4-bit weights; kernels_cl/matvec.cl):
//   - gate/up products and the GLU of their outputs (kGlu: the activation's 15-bit form for down);
//   - a product, the residual add of its output and the norm after it (kResidual), and the embedding
//     of a step's token with the first norm (kEmbedNorm). The norm needs the sum of squares of the
//     whole row, so these launches leave it unfinished: each work-group writes its 32-row block of the
//     row, the block's Σ x² and the form of (w ⊙ x), and the product that reads the norm's output —
//     the next launch, marked by its norm_step — scales its sums by 1/rms and writes the norm's
//     output in passing.
// Only neighbours join, and only when no output overlaps what the run still reads; a graph in
// another order runs node by node, with the same results. What a pattern cannot see — where the
// weights lie in device memory, whether the batch is decode, how long the histories are — the launch
// checks when it runs, falling back to its nodes one by one (cl_graph.cpp).
#include <cstdint>
#include <vector>

#include "graph/patterns.h"

namespace sluice::ocl {

enum class LaunchKind {
  kNode,             // one node alone
  kProducts,         // MATMULs of one input (count 2..kMatmulMultiMax)
  kAddNorm,          // ADD in place, RMS_NORM of the sum
  kRopePair,         // ROPE q, ROPE k
  kRopeKvWrite,      // ROPE q, ROPE k, KV_WRITE of k
  kKvAttention,      // KV_WRITE, ATTENTION of its layer
  kRopeKvAttention,  // ROPE q, ROPE k, KV_WRITE of k, ATTENTION of q
  kGlu,              // MATMUL gate, MATMUL up, GLU: dp4a
  kResidual,         // MATMUL, ADD of its output in place, RMS_NORM of the sum: dp4a, the norm left to the next launch
  kEmbedNorm,        // EMBED of one row, RMS_NORM of it: dp4a, the norm left to the next launch
};

struct Launch {
  LaunchKind kind;
  uint32_t first;  // nodes [first, first + count)
  uint32_t count;
  // The RMS_NORM node (index) the launch before left unfinished: this launch's products finish it.
  int32_t norm_step = -1;
};

constexpr uint32_t kMatmulMultiMax = 4;

// What the device and the backend's options allow, decided when the backend opens (cl_backend.cpp).
struct FusionOptions {
  bool dp4a = false;                 // the dp4a decode products (their 15-bit input forms)
  bool residual_join = true;         // kResidual (backend option "no-res-join" turns it off)
  bool glu_join = true;              // kGlu ("no-glu-join")
  bool rope_into_kv_write = true;    // kRopeKvWrite, kRopeKvAttention ("no-rope-join": the pair launches alone)
  bool attention_join = true;        // kKvAttention, kRopeKvAttention ("no-attention-join")
};

// A weight the one-row 4-bit decode kernels take (kernels_cl/matvec.cl: whole 16-byte row chunks,
// groups of whole 32-column blocks).
inline bool q4_decode_weight(const sl_weight* w) {
  return w && w->bits == 4 && w->dtype == SL_DTYPE_U32 && (uint64_t(w->cols) * 4 / 32) % 4 == 0 && w->group_size != 0 && w->group_size % 32 == 0;
}

namespace fusion_detail {

using graph::input;
using graph::output;

inline const sl_weight* weight_of(const sl_graph& g, const sl_node& n, uint32_t i) {
  const sl_tensor* t = input(g, n, i);
  return t && t->kind == SL_TENSOR_WEIGHT ? t->weight : nullptr;
}

// A one-row product the dp4a kernels take, bias or not.
inline bool dp4a_product(const sl_graph& g, uint32_t i) {
  if (i >= g.n_nodes || g.nodes[i].op != SL_OP_MATMUL) return false;
  const sl_tensor* x = input(g, g.nodes[i], 0);
  return x && x->rows == 1 && x->cols % 32 == 0 && q4_decode_weight(weight_of(g, g.nodes[i], 1));
}

// The joined gate/up/activation kernel's products: one row, two 4-bit weights of one shape and form
// in whole 32-row blocks, no biases.
inline bool glu_products(const sl_graph& g, uint32_t i) {
  if (!dp4a_product(g, i) || !dp4a_product(g, i + 1)) return false;
  const sl_weight *a = weight_of(g, g.nodes[i], 1), *b = weight_of(g, g.nodes[i + 1], 1);
  if (input(g, g.nodes[i], 2) || input(g, g.nodes[i + 1], 2)) return false;
  return a->rows == b->rows && a->rows % 32 == 0 && a->cols == b->cols && a->group_size == b->group_size &&
         a->scale_dtype == b->scale_dtype;
}

// The residual kernel's product (matvec_q4_dp4a_res): one row, 4-bit, no bias, whole 32-row blocks.
inline bool residual_product(const sl_graph& g, uint32_t i) {
  if (!dp4a_product(g, i) || input(g, g.nodes[i], 2)) return false;
  const sl_weight* w = weight_of(g, g.nodes[i], 1);
  return w->rows % 32 == 0 && w->rows <= UINT32_MAX / 2;
}

// Whether the launch starting at node j can finish the norm at node `norm`: a dp4a product of the
// norm's output (the first of its run; those after it read the output the first one wrote).
inline bool takes_norm_step(const sl_graph& g, uint32_t j, uint32_t norm) {
  if (!dp4a_product(g, j)) return false;
  const sl_tensor *x = input(g, g.nodes[j], 0), *h = output(g, g.nodes[norm], 0);
  return x && h && graph::same_memory(*x, *h) && h->cols % 32 == 0;
}

}  // namespace fusion_detail

// The launches of graph g, left to right, each the longest join that applies at its node.
inline std::vector<Launch> plan_launches(const sl_graph& g, const FusionOptions& o) {
  using namespace fusion_detail;
  std::vector<Launch> plan;
  int32_t leaves_norm = -1;  // the norm node the last launch left unfinished
  auto push = [&](LaunchKind kind, uint32_t first, uint32_t count) {
    plan.push_back({kind, first, count, leaves_norm});
    leaves_norm = -1;
  };
  for (uint32_t i = 0; i < g.n_nodes;) {
    const bool finishing = leaves_norm >= 0;  // this launch must take the norm step (kResidual and kEmbedNorm cannot)
    if (o.dp4a && !finishing && graph::embed_then_norm(g, i) && output(g, g.nodes[i], 0)->rows == 1 &&
        output(g, g.nodes[i], 0)->cols % 32 == 0 && takes_norm_step(g, i + 2, i + 1)) {
      push(LaunchKind::kEmbedNorm, i, 2);
      leaves_norm = static_cast<int32_t>(i + 1);
      i += 2;
      continue;
    }
    if (o.dp4a && o.residual_join && !finishing && residual_product(g, i) && graph::product_then_add_norm(g, i) &&
        takes_norm_step(g, i + 3, i + 2)) {
      push(LaunchKind::kResidual, i, 3);
      leaves_norm = static_cast<int32_t>(i + 2);
      i += 3;
      continue;
    }
    if (graph::rope_pair(g, i)) {
      if (o.rope_into_kv_write && graph::rope_pair_then_kv_write(g, i + 2)) {
        const sl_tensor* q = input(g, g.nodes[i], 0);
        const sl_tensor* att_q = i + 3 < g.n_nodes ? input(g, g.nodes[i + 3], 0) : nullptr;
        if (o.attention_join && graph::kv_write_then_attention(g, i + 2) && att_q && graph::same_memory(*att_q, *q)) {
          push(LaunchKind::kRopeKvAttention, i, 4);
          i += 4;
        } else {
          push(LaunchKind::kRopeKvWrite, i, 3);
          i += 3;
        }
      } else {
        push(LaunchKind::kRopePair, i, 2);
        i += 2;
      }
      continue;
    }
    if (o.attention_join && graph::kv_write_then_attention(g, i)) {
      push(LaunchKind::kKvAttention, i, 2);
      i += 2;
      continue;
    }
    if (o.dp4a && o.glu_join && glu_products(g, i) && graph::glu_of_products(g, i)) {
      push(LaunchKind::kGlu, i, 3);
      i += 3;
      continue;
    }
    uint32_t count = 1;
    while (count < kMatmulMultiMax && i + count < g.n_nodes && graph::products_of_one_input(g, i, count + 1)) ++count;
    if (count > 1) {
      push(LaunchKind::kProducts, i, count);
      i += count;
    } else if (!finishing && graph::add_then_norm(g, i)) {
      push(LaunchKind::kAddNorm, i, 2);
      i += 2;
    } else {
      push(LaunchKind::kNode, i, 1);
      ++i;
    }
  }
  return plan;
}

}  // namespace sluice::ocl
