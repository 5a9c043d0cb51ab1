#pragma once
// gpt-oss (model_type gpt_oss): the llama-shaped layer with biased q/k/v/o products, a learned
// attention sink per head joining every softmax, sliding and full layers alternating (layer_types),
// and a Mixture-of-Experts block in every layer — a biased router, softmax over its top k, fused
// biased experts with a clamped SwiGLU (MoeConfig; the experts' layout: core/model/expert_layout.h).
#include "model/families/llama.h"

namespace sluice::families {

class GptOss : public Llama {
 public:
  const char* name() const override { return "gpt_oss"; }
  // Llama's attention and norms (input_layernorm, post_attention_layernorm), the biases required,
  // and self_attn.sinks [n_heads].
  Status bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const override;
  // model.layers.N.mlp.router (weight and bias).
  std::string router_module(const ModelConfig& c, int layer) const override;
};

}  // namespace sluice::families
