#include "model/families/llama.h"

#include <string>

namespace sluice::families {

void Llama::before_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  const ModelConfig& cfg = *c.config;
  const blocks::Activations& a = *c.act;
  g.rms_norm(a.x, g.weight(w.attn_norm), cfg.norm_eps, 0.0f, a.h, c.prefix + "attn_norm");
  blocks::AttentionWeights aw;
  aw.q = g.weight(w.q);
  aw.k = g.weight(w.k);
  aw.v = g.weight(w.v);
  aw.o = g.weight(w.o);
  if (w.has_q_bias) aw.q_bias = g.weight(w.q_bias);
  if (w.has_k_bias) aw.k_bias = g.weight(w.k_bias);
  if (w.has_v_bias) aw.v_bias = g.weight(w.v_bias);
  if (w.has_o_bias) aw.o_bias = g.weight(w.o_bias);
  if (w.has_qk_norm) {
    aw.q_norm = g.weight(w.q_norm);
    aw.k_norm = g.weight(w.k_norm);
    aw.norm_per_head = !w.qk_norm_full;
  }
  blocks::AttentionShape s;
  s.n_heads = static_cast<uint32_t>(cfg.num_heads);
  s.n_kv_heads = static_cast<uint32_t>(cfg.num_kv_heads);
  s.head_dim = static_cast<uint32_t>(cfg.head_dim);
  s.v_head_dim = static_cast<uint32_t>(cfg.value_head_dim());
  s.norm_eps = cfg.norm_eps;
  s.rope = c.rope;
  s.window = w.window;
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

const Family* family_for(const ModelConfig& config) {
  static const Llama llama;
  const std::string& t = config.architecture;
  if (t == "llama" || t == "mistral" || t == "mixtral" || t == "qwen2" || t == "qwen3" || t == "qwen3_moe" || t == "olmoe") return &llama;
  return nullptr;
}

}  // namespace sluice::families
