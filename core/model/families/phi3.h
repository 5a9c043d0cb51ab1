#pragma once
// Phi-3: the llama-shaped layer, its q/k/v projections stacked in one qkv_proj and gate/up in one
// gate_up_proj. The fused tensors are bound as row ranges, so the graph is llama's (and a backend's
// fusion pass joins the three products of one input again).
#include "model/families/llama.h"

namespace sluice::families {

class Phi3 final : public Llama {
 public:
  const char* name() const override { return "phi3"; }
  // model.layers.N.{input_layernorm, self_attn.{qkv_proj: [q; k; v], o_proj}, post_attention_layernorm,
  // mlp.{gate_up_proj: [gate; up], down_proj}}.
  Status bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const override;
};

}  // namespace sluice::families
