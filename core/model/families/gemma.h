#pragma once
// Gemma 2 and Gemma 3 (text): each block normed before and after — attention's output and the MLP's
// output go through their own RMSNorm before the residual add — with norms of (1 + weight), the
// embedding scaled by sqrt(hidden) and the logits soft-capped (the driver's, from ModelConfig),
// attention scaled by query_pre_attn_scalar and soft-capped (Gemma 2), per-head q/k norms (Gemma 3),
// sliding and full layers with their own rotary tables (the driver picks each layer's).
#include "model/families/family.h"

namespace sluice::families {

class Gemma final : public Family {
 public:
  const char* name() const override { return "gemma"; }
  // model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj (+ q_norm, k_norm: Gemma 3),
  // post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm, mlp.{gate,up,down}_proj}.
  Status bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const override;
  // h = norm(x); attention → o; o = post_attn_norm(o); x += o; h = pre_ffn_norm(x).
  void before_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
  // h → o: the gated MLP (GELU's tanh form, from the config).
  void dense_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
  // o = post_ffn_norm(o); x += o.
  void after_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
};

}  // namespace sluice::families
