#pragma once
// DeepSeek-V3 (model_type deepseek_v3): pre-norm layers of multi-head latent attention
// (blocks::mla_attention) and a gated MLP, the layers from first_k_dense_replace on a MoE block
// instead — sigmoid group-limited routing with a correction bias and shared experts, both the
// driver's (core/model/transformer_forward.cpp) from the data this family binds.
#include "model/families/family.h"

namespace sluice::families {

class DeepseekV3 : public Family {
 public:
  const char* name() const override { return "deepseek_v3"; }
  // model.layers.N.{input_layernorm, self_attn.{q_a_proj, q_a_layernorm, q_b_proj | q_proj,
  // kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj}, post_attention_layernorm,
  // mlp.{gate,up,down}_proj (dense) | mlp.{gate.e_score_correction_bias, shared_experts.*} (MoE)}.
  Status bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const override;
  // x → h = attn_norm(x); MLA → o; x += o; h = ffn_norm(x).
  void before_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
  void dense_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
  void after_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
};

}  // namespace sluice::families
