#include "model/families/deepseek_v3.h"

#include <string>

#include "model/families/llama.h"
#include "model/families/shared_bindings.h"

namespace sluice::families {

Status DeepseekV3::bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const {
  const auto& m = c.mla;
  const int64_t H = c.hidden_size, NH = c.num_heads, F = c.intermediate_size;
  const int64_t QK = c.head_dim, V = c.value_head_dim(), KL = m.kv_lora_rank, R = m.qk_rope_head_dim, NOPE = m.qk_nope_head_dim;
  const std::string p = layer_prefix(layer);
#define SLUICE_TRY SLUICE_TRY_STATUS
  SLUICE_TRY(src.bind(w.attn_norm, p + "input_layernorm.weight", {H}));
  if (m.q_lora_rank > 0) {
    SLUICE_TRY(src.bind(w.q_a, p + "self_attn.q_a_proj.weight", {m.q_lora_rank, H}));
    SLUICE_TRY(src.bind(w.q_a_norm, p + "self_attn.q_a_layernorm.weight", {m.q_lora_rank}));
    SLUICE_TRY(src.bind(w.q, p + "self_attn.q_b_proj.weight", {NH * QK, m.q_lora_rank}));
    w.has_q_lora = true;
  } else {
    SLUICE_TRY(src.bind(w.q, p + "self_attn.q_proj.weight", {NH * QK, H}));
  }
  SLUICE_TRY(src.bind(w.kv_a, p + "self_attn.kv_a_proj_with_mqa.weight", {KL + R, H}));
  SLUICE_TRY(src.bind(w.kv_a_norm, p + "self_attn.kv_a_layernorm.weight", {KL}));
  SLUICE_TRY(src.bind(w.kv_b, p + "self_attn.kv_b_proj.weight", {NH * (NOPE + V), KL}));
  SLUICE_TRY(src.bind(w.o, p + "self_attn.o_proj.weight", {H, NH * V}));
  if (c.attention_bias) return make_error(p + "self_attn: attention_bias is not supported for deepseek_v3");
  SLUICE_TRY(src.bind(w.ffn_norm, p + "post_attention_layernorm.weight", {H}));
  if (!sparse) {
    SLUICE_TRY(bind_gated_mlp(src, p, F, H, w));
  } else {
    const int64_t E = c.moe.n_experts, FS = c.moe.shared_intermediate;
    if (src.has(p + "mlp.gate.e_score_correction_bias")) {  // transformers' buffer of zeros where a checkpoint has none
      auto bias = src.values(p + "mlp.gate.e_score_correction_bias", {E});
      if (!bias) return bias.error();
      w.router_choice_bias = std::move(*bias);
    }
    if (FS > 0) {
      SLUICE_TRY(src.bind(w.shared_gate, p + "mlp.shared_experts.gate_proj.weight", {FS, H}));
      SLUICE_TRY(src.bind(w.shared_up, p + "mlp.shared_experts.up_proj.weight", {FS, H}));
      SLUICE_TRY(src.bind(w.shared_down, p + "mlp.shared_experts.down_proj.weight", {H, FS}));
      w.has_shared_experts = true;
    }
  }
#undef SLUICE_TRY
  return {};
}

void DeepseekV3::before_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  const ModelConfig& cfg = *c.config;
  const blocks::Activations& a = *c.act;
  g.rms_norm(a.x, g.weight(w.attn_norm), cfg.norm_eps, 0.0f, a.h, c.prefix + "attn_norm");
  blocks::MlaWeights mw;
  if (w.has_q_lora) {
    mw.q_a = g.weight(w.q_a);
    mw.q_a_norm = g.weight(w.q_a_norm);
  }
  mw.q = g.weight(w.q);
  mw.kv_a = g.weight(w.kv_a);
  mw.kv_a_norm = g.weight(w.kv_a_norm);
  mw.kv_b = g.weight(w.kv_b);
  mw.o = g.weight(w.o);
  blocks::MlaShape s;
  s.n_heads = static_cast<uint32_t>(cfg.num_heads);
  s.nope_dim = static_cast<uint32_t>(cfg.mla.qk_nope_head_dim);
  s.rope_dim = static_cast<uint32_t>(cfg.mla.qk_rope_head_dim);
  s.v_head_dim = static_cast<uint32_t>(cfg.value_head_dim());
  s.kv_lora_rank = static_cast<uint32_t>(cfg.mla.kv_lora_rank);
  s.norm_eps = cfg.norm_eps;
  s.rope = c.rope;
  // transformers' rope_interleave turns adjacent pairs (and leaves them de-interleaved, in Q and K alike).
  s.rope.style = cfg.rope_interleaved ? SL_ROPE_INTERLEAVED : SL_ROPE_NEOX;
  s.scale = cfg.attention_scale;
  s.latent = cfg.mla.latent_cache;
  blocks::mla_attention(g, a, mw, s, c.cache_layer, c.prefix);
  g.add(a.x, a.o, a.x, c.prefix + "attention residual");
  g.rms_norm(a.x, g.weight(w.ffn_norm), cfg.norm_eps, 0.0f, a.h, c.prefix + "ffn_norm");
}

void DeepseekV3::dense_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  blocks::gated_mlp(g, *c.act, g.weight(w.gate), g.weight(w.up), g.weight(w.down), activation(*c.config), c.prefix);
}

void DeepseekV3::after_ffn(StepGraph& g, const LayerContext& c, const LayerWeights&) const {
  g.add(c.act->x, c.act->o, c.act->x, c.prefix + "ffn residual");
}

}  // namespace sluice::families
