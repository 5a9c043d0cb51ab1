#pragma once
// The llama-shaped decoder layer (llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, olmoe): pre-norm
// attention and a pre-norm feed-forward block, each added to the residual stream. Biases and q/k
// norms come from which tensors the checkpoint has (LayerWeights), windows from the config.
#include "model/families/family.h"

namespace sluice::families {

class Llama : public Family {
 public:
  const char* name() const override { return "llama"; }
  // model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj (+ biases, q/k norms where present),
  // post_attention_layernorm, mlp.{gate,up,down}_proj}.
  Status bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const override;
  // x → h = attn_norm(x); attention → o; x += o; h = ffn_norm(x).
  void before_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
  // h → o: the gated MLP (SiLU or GELU, from config.hidden_act).
  void dense_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
  // x += o.
  void after_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const override;
};

// The hidden activation of the config (SiLU, or GELU's tanh or exact form).
uint32_t activation(const ModelConfig& config);

}  // namespace sluice::families
