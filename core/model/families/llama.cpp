#include "model/families/llama.h"

#include <string>

#include "model/families/shared_bindings.h"

namespace sluice::families {

Status Llama::bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const {
  const int64_t H = c.hidden_size, D = c.head_dim, F = c.intermediate_size;
  const int64_t QD = c.num_heads * D, KD = c.num_kv_heads * D;
  const int64_t VD = int64_t(c.num_kv_heads) * c.value_head_dim(), OD = int64_t(c.num_heads) * c.value_head_dim();  // V, attention's output
  const std::string p = layer_prefix(layer);
#define SLUICE_TRY SLUICE_TRY_STATUS
  SLUICE_TRY(src.bind(w.attn_norm, p + "input_layernorm.weight", {H}));
  SLUICE_TRY(bind_attention_projections(src, p, {H, QD, KD, VD, OD}, w));
  if (c.qk_norm) {  // per head (qwen3)
    SLUICE_TRY(src.bind(w.q_norm, p + "self_attn.q_norm.weight", {D}));
    SLUICE_TRY(src.bind(w.k_norm, p + "self_attn.k_norm.weight", {D}));
    w.has_qk_norm = true;
  } else if (c.qk_norm_full) {  // over the whole projection (olmoe)
    SLUICE_TRY(src.bind(w.q_norm, p + "self_attn.q_norm.weight", {QD}));
    SLUICE_TRY(src.bind(w.k_norm, p + "self_attn.k_norm.weight", {KD}));
    w.has_qk_norm = w.qk_norm_full = true;
  }
  SLUICE_TRY(src.bind(w.ffn_norm, p + "post_attention_layernorm.weight", {H}));
  if (!sparse) SLUICE_TRY(bind_gated_mlp(src, p, F, H, w));
#undef SLUICE_TRY
  return {};
}

void Llama::before_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  const ModelConfig& cfg = *c.config;
  const blocks::Activations& a = *c.act;
  g.rms_norm(a.x, g.weight(w.attn_norm), cfg.norm_eps, 0.0f, a.h, c.prefix + "attn_norm");
  blocks::AttentionWeights aw = attention_weights(g, w);
  blocks::AttentionShape s;
  s.n_heads = static_cast<uint32_t>(cfg.num_heads);
  s.n_kv_heads = static_cast<uint32_t>(cfg.num_kv_heads);
  s.head_dim = static_cast<uint32_t>(cfg.head_dim);
  s.v_head_dim = static_cast<uint32_t>(cfg.value_head_dim());
  s.norm_eps = cfg.norm_eps;
  s.rope = c.rope;
  s.window = w.window;
  if (w.sinks) aw.sinks = g.buffer(w.sinks, 1, s.n_heads);
  blocks::attention(g, a, aw, s, c.cache_layer, c.prefix);
  g.add(a.x, a.o, a.x, c.prefix + "attention residual");
  g.rms_norm(a.x, g.weight(w.ffn_norm), cfg.norm_eps, 0.0f, a.h, c.prefix + "ffn_norm");
}

void Llama::dense_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  blocks::gated_mlp(g, *c.act, g.weight(w.gate), g.weight(w.up), g.weight(w.down), activation(*c.config), c.prefix);
}

void Llama::after_ffn(StepGraph& g, const LayerContext& c, const LayerWeights&) const {
  g.add(c.act->x, c.act->o, c.act->x, c.prefix + "ffn residual");
}

uint32_t activation(const ModelConfig& config) {
  const std::string& act = config.hidden_act;
  if (act == "gelu_pytorch_tanh" || act == "gelu_tanh") return SL_ACT_GELU_TANH;
  if (act == "gelu") return SL_ACT_GELU;
  return SL_ACT_SILU;
}

}  // namespace sluice::families
