#include "model/families/qwen3_5.h"

#include <cmath>
#include <string>

#include "model/families/llama.h"  // activation()
#include "model/families/shared_bindings.h"

namespace sluice::families {

Status Qwen3_5::bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const {
  const int64_t H = c.hidden_size, D = c.head_dim, F = c.intermediate_size;
  const int64_t QD = int64_t(c.num_heads) * D, KD = int64_t(c.num_kv_heads) * D;
  const LinearAttentionConfig& l = c.linear;
  const std::string p = layer_prefix(layer);
#define SLUICE_TRY SLUICE_TRY_STATUS
  SLUICE_TRY(src.bind(w.attn_norm, p + "input_layernorm.weight", {H}));
  SLUICE_TRY(src.bind(w.ffn_norm, p + "post_attention_layernorm.weight", {H}));
  if (c.layer_type(layer) == LayerType::kLinearAttention) {
    const std::string a = p + "linear_attn.";
    const int64_t NV = l.n_v_heads, VD = l.value_dim(), CD = l.conv_dim();
    SLUICE_TRY(src.bind(w.lin_qkv, a + "in_proj_qkv.weight", {CD, H}));
    SLUICE_TRY(src.bind(w.lin_z, a + "in_proj_z.weight", {VD, H}));
    SLUICE_TRY(src.bind(w.lin_b, a + "in_proj_b.weight", {NV, H}));
    SLUICE_TRY(src.bind(w.lin_a, a + "in_proj_a.weight", {NV, H}));
    SLUICE_TRY(src.bind(w.lin_dt_bias, a + "dt_bias", {NV}));
    SLUICE_TRY(src.bind(w.lin_a_log, a + "A_log", {NV}));
    // nn.Conv1d's [channels, 1, kernel]: one row of taps a channel.
    SLUICE_TRY(src.bind(w.lin_conv, a + "conv1d.weight", {CD, 1, l.conv_kernel}));
    w.lin_conv.rows = static_cast<uint32_t>(CD);
    w.lin_conv.cols = static_cast<uint32_t>(l.conv_kernel);
    SLUICE_TRY(src.bind(w.lin_norm, a + "norm.weight", {l.v_head_dim}));
    SLUICE_TRY(src.bind(w.lin_out, a + "out_proj.weight", {H, VD}));
    w.linear = true;
  } else {
    SLUICE_TRY(bind_attention_projections(src, p, {H, 2 * QD, KD, KD, QD}, w));  // q: each head's query, then its gate
    SLUICE_TRY(src.bind(w.q_norm, p + "self_attn.q_norm.weight", {D}));
    SLUICE_TRY(src.bind(w.k_norm, p + "self_attn.k_norm.weight", {D}));
    w.has_qk_norm = true;
  }
  if (sparse) {
    const int64_t S = c.moe.shared_intermediate;
    if (S > 0) {
      SLUICE_TRY(src.bind(w.shared_gate, p + "mlp.shared_expert.gate_proj.weight", {S, H}));
      SLUICE_TRY(src.bind(w.shared_up, p + "mlp.shared_expert.up_proj.weight", {S, H}));
      SLUICE_TRY(src.bind(w.shared_down, p + "mlp.shared_expert.down_proj.weight", {H, S}));
      SLUICE_TRY(src.bind(w.shared_expert_gate, p + "mlp.shared_expert_gate.weight", {1, H}));
      w.has_shared_experts = true;
    }
  } else {
    SLUICE_TRY(bind_gated_mlp(src, p, F, H, w));
  }
#undef SLUICE_TRY
  return {};
}

void Qwen3_5::linear_attention(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  const ModelConfig& cfg = *c.config;
  const LinearAttentionConfig& l = cfg.linear;
  const blocks::Activations& a = *c.act;
  g.matmul(a.h, g.weight(w.lin_qkv), StepGraph::kNone, a.lin_qkv, c.prefix + "in_proj_qkv");
  g.matmul(a.h, g.weight(w.lin_z), StepGraph::kNone, a.lin_z, c.prefix + "in_proj_z");
  g.matmul(a.h, g.weight(w.lin_b), StepGraph::kNone, a.lin_b, c.prefix + "in_proj_b");
  g.matmul(a.h, g.weight(w.lin_a), g.weight(w.lin_dt_bias), a.lin_a, c.prefix + "in_proj_a + dt_bias");
  // The sequence's state: the convolution's window, then the delta rule's matrices.
  const uint64_t window_floats = l.conv_state_floats();
  const StepGraph::Id window = g.state(c.cache_layer, c.n_seqs, static_cast<uint32_t>(window_floats));
  const StepGraph::Id matrices = g.state(c.cache_layer, c.n_seqs, static_cast<uint32_t>(l.recurrent_state_floats()), window_floats * 4);
  g.causal_conv(a.lin_qkv, g.weight(w.lin_conv), activation(cfg), a.lin_conv, window, c.prefix + "conv1d");
  sl_gated_delta_params p{};
  p.n_k_heads = static_cast<uint32_t>(l.n_k_heads);
  p.n_v_heads = static_cast<uint32_t>(l.n_v_heads);
  p.k_head_dim = static_cast<uint32_t>(l.k_head_dim);
  p.v_head_dim = static_cast<uint32_t>(l.v_head_dim);
  p.scale = 1.0f / std::sqrt(static_cast<float>(l.k_head_dim));
  p.l2_eps = 1e-6f;  // transformers' l2norm
  g.gated_delta(a.lin_conv, a.lin_a, a.lin_b, g.weight(w.lin_a_log), p, a.lin_core, matrices, c.prefix + "gated delta rule");
  // The gated RMSNorm: per value head, weight w (not 1 + w), times silu(z).
  g.rms_norm(a.lin_core_heads, g.weight(w.lin_norm), cfg.norm_eps, 0.0f, a.lin_core_heads, c.prefix + "gated norm");
  g.glu(a.lin_z, a.lin_core, SL_ACT_SILU, a.lin_z, c.prefix + "norm gate");
  g.matmul(a.lin_z, g.weight(w.lin_out), StepGraph::kNone, a.o, c.prefix + "out_proj");
}

void Qwen3_5::before_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  const ModelConfig& cfg = *c.config;
  const blocks::Activations& a = *c.act;
  const float offset = cfg.norm_weight_offset;  // (1 + w)
  g.rms_norm(a.x, g.weight(w.attn_norm), cfg.norm_eps, offset, a.h, c.prefix + "attn_norm");
  if (w.linear) {
    linear_attention(g, c, w);
  } else {
    const blocks::AttentionWeights aw = attention_weights(g, w);
    blocks::AttentionShape s;
    s.n_heads = static_cast<uint32_t>(cfg.num_heads);
    s.n_kv_heads = static_cast<uint32_t>(cfg.num_kv_heads);
    s.head_dim = static_cast<uint32_t>(cfg.head_dim);
    s.norm_eps = cfg.norm_eps;
    s.norm_offset = offset;
    s.rope = c.rope;
    blocks::gated_attention(g, a, aw, s, c.cache_layer, c.prefix);
  }
  g.add(a.x, a.o, a.x, c.prefix + "attention residual");
  g.rms_norm(a.x, g.weight(w.ffn_norm), cfg.norm_eps, offset, a.h, c.prefix + "ffn_norm");
}

void Qwen3_5::dense_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  blocks::gated_mlp(g, *c.act, g.weight(w.gate), g.weight(w.up), g.weight(w.down), activation(*c.config), c.prefix);
}

void Qwen3_5::after_ffn(StepGraph& g, const LayerContext& c, const LayerWeights&) const {
  g.add(c.act->x, c.act->o, c.act->x, c.prefix + "ffn residual");
}

}  // namespace sluice::families
