#include "model/families/gemma.h"

#include <string>

#include "model/families/llama.h"  // activation()
#include "model/families/shared_bindings.h"

namespace sluice::families {

Status Gemma::bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const {
  if (sparse) return make_error(c.architecture + " has no Mixture-of-Experts layers");
  const int64_t H = c.hidden_size, D = c.head_dim, F = c.intermediate_size;
  const int64_t QD = c.num_heads * D, KD = c.num_kv_heads * D;
  const std::string p = layer_prefix(layer);
#define SLUICE_TRY SLUICE_TRY_STATUS
  SLUICE_TRY(src.bind(w.attn_norm, p + "input_layernorm.weight", {H}));
  SLUICE_TRY(bind_attention_projections(src, p, {H, QD, KD, KD, QD}, w));
  if (c.qk_norm) {  // Gemma 3: per head
    SLUICE_TRY(src.bind(w.q_norm, p + "self_attn.q_norm.weight", {D}));
    SLUICE_TRY(src.bind(w.k_norm, p + "self_attn.k_norm.weight", {D}));
    w.has_qk_norm = true;
  }
  SLUICE_TRY(src.bind(w.post_attn_norm, p + "post_attention_layernorm.weight", {H}));
  SLUICE_TRY(src.bind(w.ffn_norm, p + "pre_feedforward_layernorm.weight", {H}));
  SLUICE_TRY(src.bind(w.post_ffn_norm, p + "post_feedforward_layernorm.weight", {H}));
  SLUICE_TRY(bind_gated_mlp(src, p, F, H, w));
#undef SLUICE_TRY
  return {};
}

void Gemma::before_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  const ModelConfig& cfg = *c.config;
  const blocks::Activations& a = *c.act;
  const float offset = cfg.norm_weight_offset;
  g.rms_norm(a.x, g.weight(w.attn_norm), cfg.norm_eps, offset, a.h, c.prefix + "attn_norm");
  const blocks::AttentionWeights aw = attention_weights(g, w);
  blocks::AttentionShape s;
  s.n_heads = static_cast<uint32_t>(cfg.num_heads);
  s.n_kv_heads = static_cast<uint32_t>(cfg.num_kv_heads);
  s.head_dim = static_cast<uint32_t>(cfg.head_dim);
  s.norm_eps = cfg.norm_eps;
  s.norm_offset = offset;
  s.rope = c.rope;
  s.window = w.window;
  s.scale = cfg.attention_scale;
  s.softcap = cfg.attention_softcap;
  blocks::attention(g, a, aw, s, c.cache_layer, c.prefix);
  g.rms_norm(a.o, g.weight(w.post_attn_norm), cfg.norm_eps, offset, a.o, c.prefix + "post_attn_norm");
  g.add(a.x, a.o, a.x, c.prefix + "attention residual");
  g.rms_norm(a.x, g.weight(w.ffn_norm), cfg.norm_eps, offset, a.h, c.prefix + "pre_ffn_norm");
}

void Gemma::dense_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  blocks::gated_mlp(g, *c.act, g.weight(w.gate), g.weight(w.up), g.weight(w.down), activation(*c.config), c.prefix);
}

void Gemma::after_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  const ModelConfig& cfg = *c.config;
  g.rms_norm(c.act->o, g.weight(w.post_ffn_norm), cfg.norm_eps, cfg.norm_weight_offset, c.act->o, c.prefix + "post_ffn_norm");
  g.add(c.act->x, c.act->o, c.act->x, c.prefix + "ffn residual");
}

}  // namespace sluice::families
