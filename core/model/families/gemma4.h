#pragma once
// Gemma 4 (text, dense): Gemma's layer — each block normed before and after, its output added to the
// residual stream — with plain norm weights, unscaled scores (q/k norms carry the scale), V normed
// per head without a weight, full layers of their own head width rotating a proportional part of it,
// and, on the small models, a per-layer input: a token table and a projection of the embedding, one
// slice a layer, gated into the residual stream after the feed-forward block. Each layer's output is
// scaled by its layer_scalar. Full layers may take V from the K projection (attention_k_eq_v), and
// the last num_kv_shared_layers attend an earlier layer's K/V instead of writing their own.
#include "model/families/family.h"

namespace sluice::families {

class Gemma4 final : public Family {
 public:
  const char* name() const override { return "gemma4"; }
  // model.{embed_tokens_per_layer, per_layer_model_projection, per_layer_projection_norm} where the model
  // has per-layer inputs (hidden_size_per_layer_input > 0).
  Status bind_model(WeightSource& src, const ModelConfig& c, ModelWeights& w) const override;
  // The per-layer inputs of every layer: (norm(embedding · projectionᵀ / √H) + table[ids] · √P) / √2.
  void after_embed(StepGraph& g, const EmbedContext& c) const override;
  // model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
  // post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm, mlp.{gate,up,down}_proj,
  // per_layer_input_gate, per_layer_projection, post_per_layer_input_norm, layer_scalar}.
  Status bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const override;
  // h = norm(x); attention → o; o = post_attn_norm(o); x += o; h = pre_ffn_norm(x).
  void before_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
  // h → o: the gated MLP (twice as wide on KV-sharing layers of use_double_wide_mlp models).
  void dense_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
  // With an MoE block: the MLP on h → dense_out (normed); the router's input (norm(x) · scale / √H) and
  // the experts' input h = pre_ffn_norm_2(x).
  StepGraph::Id before_moe(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
  // o = post_ffn_norm(o) (with an MoE block first o = post_ffn_norm_2(o) + dense_out); x += o; x += norm(act(x · gateᵀ) · per_layer_input · projectionᵀ); x *= layer_scalar.
  void after_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
};

}  // namespace sluice::families
