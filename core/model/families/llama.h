#pragma once
// The llama-shaped decoder layer (llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, olmoe) as graph
// nodes: pre-norm attention and a pre-norm feed-forward block, each added to the residual stream.
// Another family (Gemma's four norms, Qwen3.5's linear attention) is another file like this one.
#include <cstdint>
#include <string>

#include "graph/step_graph.h"
#include "model/blocks.h"
#include "model/layer_weights.h"
#include "model/model_config.h"

namespace sluice::families::llama {

// What the layer's nodes need besides its weights.
struct LayerContext {
  const ModelConfig* config = nullptr;
  const blocks::Activations* act = nullptr;
  sl_rope_params rope{};  // inv_freq, rotary_dim, factor, style
  uint32_t cache_layer = 0;
  std::string prefix;     // "layer 3 "
};

// x → h = attn_norm(x); attention → o; x += o; h = ffn_norm(x): the feed-forward block's input.
void attention_half(StepGraph& g, const LayerContext& c, const LayerWeights& w);
// h → o: the dense gated MLP (a MoE layer's experts are run by the host's driver instead).
void dense_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w);
// x += o.
void residual(StepGraph& g, const LayerContext& c);
// The hidden activation of the config (SiLU, or GELU's tanh or exact form).
uint32_t activation(const ModelConfig& config);

}  // namespace sluice::families::llama
