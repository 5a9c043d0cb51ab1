#pragma once
// Qwen3.5 (qwen3_5_text, qwen3_5_moe_text): a hybrid of Gated DeltaNet linear-attention layers (three
// of four, by layer_types) and gated full attention, with (1 + w) RMSNorms, a dense MLP or a MoE block
// with a shared expert (the driver's). Transformers' Qwen3_5 / Qwen3_5Moe modeling, derived from
// Qwen3-Next.
#include "model/families/family.h"

namespace sluice::families {

class Qwen3_5 final : public Family {
 public:
  const char* name() const override { return "qwen3_5"; }
  bool builds_linear_attention() const override { return true; }
  // model.layers.N.{input_layernorm, post_attention_layernorm}, then linear_attn.{in_proj_qkv,
  // in_proj_z, in_proj_b, in_proj_a, dt_bias, A_log, conv1d, norm, out_proj} or self_attn.{q_proj
  // (queries and gates), k_proj, v_proj, o_proj, q_norm, k_norm}; mlp.{gate,up,down}_proj, or for a
  // MoE layer its shared expert mlp.shared_expert.* and mlp.shared_expert_gate.
  Status bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const override;
  // x → h = attn_norm(x); linear or gated attention → o; x += o; h = ffn_norm(x).
  void before_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
  void dense_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
  void after_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;

 private:
  // h → o through a Gated DeltaNet layer; its state in the cache layer's STATE (window, then matrices).
  void linear_attention(StepGraph& g, const LayerContext& c, const LayerWeights& w) const;
};

}  // namespace sluice::families
