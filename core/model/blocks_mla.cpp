// Multi-head latent attention (DeepSeek-V3) as graph nodes, in its two forms (blocks.h says how they
// relate): the latent cache with kv_b absorbed into each head's query and output, and the expanded
// form for a backend that does not run HEAD_MATMUL.
#include <cmath>

#include "model/blocks.h"

namespace sluice::blocks {

namespace {

// The q products (q_a, its norm, q_b; or q alone) and kv_a, shared by both forms.
void mla_projections(StepGraph& g, const Activations& a, const MlaWeights& w, const MlaShape& s, const std::string& prefix) {
  // The two products of h first, side by side (a backend may join products of one input).
  const bool q_latent = w.q_a != StepGraph::kNone;
  g.matmul(a.h, q_latent ? w.q_a : w.q, StepGraph::kNone, q_latent ? a.mla_q_latent : a.mla_q, prefix + (q_latent ? "q_a" : "q"));
  g.matmul(a.h, w.kv_a, StepGraph::kNone, a.mla_kv_latent, prefix + "kv_a");
  if (q_latent) {
    g.rms_norm(a.mla_q_latent, w.q_a_norm, s.norm_eps, 0.0f, a.mla_q_latent, prefix + "q_a_norm");
    g.matmul(a.mla_q_latent, w.q, StepGraph::kNone, a.mla_q, prefix + "q_b");
  }
}

sl_attention_params attention_params(const MlaShape& s, uint32_t layer, uint32_t n_kv_heads, uint32_t head_dim, uint32_t v_dim) {
  sl_attention_params p{};
  p.layer = layer;
  p.n_heads = s.n_heads;
  p.n_kv_heads = n_kv_heads;
  p.head_dim = head_dim;
  // The model's scale in both forms: the latent keys are wider, the scores the same.
  p.scale = s.scale > 0.0f ? s.scale : 1.0f / std::sqrt(static_cast<float>(s.nope_dim + s.rope_dim));
  p.v_head_dim = v_dim;
  return p;
}

void mla_latent(StepGraph& g, const Activations& a, const MlaWeights& w, const MlaShape& s, uint32_t layer, const std::string& prefix) {
  const uint32_t R = s.rope_dim, NOPE = s.nope_dim, V = s.v_head_dim, KL = s.kv_lora_rank, NH = s.n_heads;
  mla_projections(g, a, w, s, prefix);
  // Each head's query into the latent: q_lat[h] = q_nope[h] · W_UK[h], W_UK[h] the head's first nope rows of kv_b.
  g.copy_columns(a.mla_q_heads, 0, 0, NOPE, 1, a.mla_q_nope_heads, prefix + "q nope part");
  sl_head_matmul_params uk{};
  uk.n_heads = NH;
  uk.head_rows = NOPE + V;
  uk.row_offset = 0;
  uk.slice_rows = NOPE;
  uk.transpose = 1;
  g.head_matmul(a.mla_q_nope, w.kv_b, uk, a.mla_q_lat, prefix + "q absorbed (kv_b's k rows)");
  // The rotary parts, turned where they stand alone (ROPE turns a head's first rotary_dim values).
  sl_rope_params rope = s.rope;
  rope.head_dim = R;
  rope.rotary_dim = R;
  rope.n_heads = NH;
  g.copy_columns(a.mla_q_heads, NOPE, 0, R, 1, a.mla_q_pe_heads, prefix + "q rope part");
  g.rope(a.mla_q_pe, rope, prefix + "rope q");
  g.copy_columns(a.mla_q_lat_heads, 0, 0, KL, 1, a.mla_query_heads, prefix + "query latent part");
  g.copy_columns(a.mla_q_pe_heads, 0, KL, R, 1, a.mla_query_heads, prefix + "query rope part");
  rope.n_heads = 1;
  g.copy_columns(a.mla_kv_latent, KL, 0, R, 1, a.mla_k_pe, prefix + "k rope part");
  g.rope(a.mla_k_pe, rope, prefix + "rope k");
  g.copy_columns(a.mla_kv_latent, 0, 0, KL, 1, a.mla_kv_normed, prefix + "kv latent");
  g.rms_norm(a.mla_kv_normed, w.kv_a_norm, s.norm_eps, 0.0f, a.mla_kv_normed, prefix + "kv_a_norm");
  // The cache's one KV head: K = [latent | k_pe], V = the latent.
  g.copy_columns(a.mla_kv_normed, 0, 0, KL, 1, a.mla_k, prefix + "k latent part");
  g.copy_columns(a.mla_k_pe, 0, KL, R, 1, a.mla_k, prefix + "k rope part (cached)");
  g.kv_write(a.mla_k, a.mla_kv_normed, layer, prefix + "kv_write");
  g.attention(a.mla_query, StepGraph::kNone, attention_params(s, layer, 1, KL + R, KL), a.mla_o_lat, prefix + "attention");
  // Each head's output out of the latent: out[h] = o_lat[h] · W_UV[h]ᵀ, W_UV[h] the head's v rows of kv_b.
  sl_head_matmul_params uv{};
  uv.n_heads = NH;
  uv.head_rows = NOPE + V;
  uv.row_offset = NOPE;
  uv.slice_rows = V;
  uv.transpose = 0;
  g.head_matmul(a.mla_o_lat, w.kv_b, uv, a.attn, prefix + "attention out of the latent (kv_b's v rows)");
  g.matmul(a.attn, w.o, StepGraph::kNone, a.o, prefix + "o");
}

void mla_expanded(StepGraph& g, const Activations& a, const MlaWeights& w, const MlaShape& s, uint32_t layer, const std::string& prefix) {
  const uint32_t R = s.rope_dim, NOPE = s.nope_dim, V = s.v_head_dim, KL = s.kv_lora_rank, NH = s.n_heads;
  mla_projections(g, a, w, s, prefix);
  g.copy_columns(a.mla_q_heads, NOPE, 0, R, 1, a.q_heads, prefix + "q rope part");
  if (NOPE) g.copy_columns(a.mla_q_heads, 0, R, NOPE, 1, a.q_heads, prefix + "q nope part");
  g.copy_columns(a.mla_kv_latent, KL, 0, R, NH, a.k_heads, prefix + "k rope part (every head)");
  g.copy_columns(a.mla_kv_latent, 0, 0, KL, 1, a.mla_kv_normed, prefix + "kv latent");
  g.rms_norm(a.mla_kv_normed, w.kv_a_norm, s.norm_eps, 0.0f, a.mla_kv_normed, prefix + "kv_a_norm");
  g.matmul(a.mla_kv_normed, w.kv_b, StepGraph::kNone, a.mla_kv, prefix + "kv_b");
  if (NOPE) g.copy_columns(a.mla_kv_heads, 0, R, NOPE, 1, a.k_heads, prefix + "k nope part");
  g.copy_columns(a.mla_kv_heads, NOPE, 0, V, 1, a.v_heads, prefix + "v");
  sl_rope_params rope = s.rope;
  rope.head_dim = NOPE + R;
  rope.rotary_dim = R;
  rope.n_heads = NH;
  g.rope(a.q, rope, prefix + "rope q");
  g.rope(a.k, rope, prefix + "rope k");
  g.kv_write(a.k, a.v, layer, prefix + "kv_write");
  g.attention(a.q, StepGraph::kNone, attention_params(s, layer, NH, NOPE + R, V), a.attn, prefix + "attention");
  g.matmul(a.attn, w.o, StepGraph::kNone, a.o, prefix + "o");
}

}  // namespace

void mla_attention(StepGraph& g, const Activations& a, const MlaWeights& w, const MlaShape& s, uint32_t layer, const std::string& prefix) {
  if (s.latent)
    mla_latent(g, a, w, s, layer, prefix);
  else
    mla_expanded(g, a, w, s, layer, prefix);
}

}  // namespace sluice::blocks
