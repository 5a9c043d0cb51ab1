#include "model/blocks.h"

#include <cmath>

namespace sluice::blocks {

namespace {

// q, k and v (in a's buffers) → attention's output in a.attn: q/k(/v) norms, rotary, the KV write of
// `layer`, attention over the cache. Without writes_kv only q is normed and rotated.
void attend(StepGraph& g, const Activations& a, const AttentionWeights& w, const AttentionShape& s, uint32_t layer,
            const std::string& prefix) {
  if (w.q_norm != StepGraph::kNone) {
    const Id q = w.norm_per_head ? a.q_heads : a.q, k = w.norm_per_head ? a.k_heads : a.k;
    g.rms_norm(q, w.q_norm, s.norm_eps, s.norm_offset, q, prefix + "q_norm");
    if (s.writes_kv) g.rms_norm(k, w.k_norm, s.norm_eps, s.norm_offset, k, prefix + "k_norm");
  }
  if (w.v_norm != StepGraph::kNone && s.writes_kv) g.rms_norm(a.v_heads, w.v_norm, s.norm_eps, 0.0f, a.v_heads, prefix + "v_norm");
  sl_rope_params rope = s.rope;
  rope.head_dim = s.head_dim;
  rope.n_heads = s.n_heads;
  g.rope(a.q, rope, prefix + "rope q");
  if (s.writes_kv) {
    rope.n_heads = s.n_kv_heads;
    g.rope(a.k, rope, prefix + "rope k");
    g.kv_write(a.k, a.v, layer, prefix + "kv_write");
  }
  sl_attention_params p{};
  p.layer = layer;
  p.n_heads = s.n_heads;
  p.n_kv_heads = s.n_kv_heads;
  p.head_dim = s.head_dim;
  p.scale = s.scale > 0.0f ? s.scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.window = s.window;
  p.softcap = s.softcap;
  p.v_head_dim = s.v_head_dim ? s.v_head_dim : s.head_dim;
  g.attention(a.q, w.sinks, p, a.attn, prefix + "attention");
}

}  // namespace

void attention(StepGraph& g, const Activations& a, const AttentionWeights& w, const AttentionShape& s, uint32_t layer,
               const std::string& prefix) {
  g.matmul(a.h, w.q, w.q_bias, a.q, prefix + "q");
  if (s.writes_kv) {
    g.matmul(a.h, w.k, w.k_bias, a.k, prefix + "k");
    if (s.value_from_key)
      g.copy(a.k, a.v, prefix + "v = k");
    else
      g.matmul(a.h, w.v, w.v_bias, a.v, prefix + "v");
  }
  attend(g, a, w, s, layer, prefix);
  g.matmul(a.attn, w.o, w.o_bias, a.o, prefix + "o");
}

void gated_attention(StepGraph& g, const Activations& a, const AttentionWeights& w, const AttentionShape& s, uint32_t layer,
                     const std::string& prefix) {
  // The three products of h side by side (a backend joins them), then the parting.
  g.matmul(a.h, w.q, w.q_bias, a.q_gate, prefix + "q and gate");
  g.matmul(a.h, w.k, w.k_bias, a.k, prefix + "k");
  g.matmul(a.h, w.v, w.v_bias, a.v, prefix + "v");
  // As rows of head_dim values, q_proj's output alternates a head's query and its gate.
  const uint32_t rows = g.tensor(a.q_heads).rows;
  std::vector<int32_t> queries(rows), gates(rows);
  for (uint32_t i = 0; i < rows; ++i) {
    queries[i] = static_cast<int32_t>(2 * i);
    gates[i] = static_cast<int32_t>(2 * i + 1);
  }
  g.get_rows(a.q_gate_rows, g.host_ints(std::move(queries)), a.q_heads, prefix + "q");
  g.get_rows(a.q_gate_rows, g.host_ints(std::move(gates)), a.attn_gate_heads, prefix + "gate");
  attend(g, a, w, s, layer, prefix);
  g.glu(a.attn_gate, a.attn, SL_ACT_SIGMOID, a.attn_gate, prefix + "output gate");
  g.matmul(a.attn_gate, w.o, w.o_bias, a.o, prefix + "o");
}

void gated_mlp(StepGraph& g, const Activations& a, Id gate, Id up, Id down, uint32_t activation, const std::string& prefix) {
  g.matmul(a.h, gate, StepGraph::kNone, a.gate, prefix + "gate");
  g.matmul(a.h, up, StepGraph::kNone, a.up, prefix + "up");
  g.glu(a.gate, a.up, activation, a.act, prefix + "activation");
  g.matmul(a.act, down, StepGraph::kNone, a.o, prefix + "down");
}

}  // namespace sluice::blocks
