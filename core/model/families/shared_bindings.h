#pragma once
// What several families bind and build alike: a layer's tensor-name prefix, the q/k/v/o projections
// with their optional biases, the gated MLP's three products, and the graph's view of a layer's
// attention weights. A family whose checkpoint differs (Phi-3's fused rows, Gemma 4's shared K/V,
// DeepSeek's latent attention) binds those parts itself.
#include <cstdint>
#include <string>

#include "model/families/family.h"

// Returns a failed Status from the enclosing function (a bind_layer's many binds).
#define SLUICE_TRY_STATUS(expr) \
  if (auto s_ = (expr); !s_) return s_

namespace sluice::families {

// "model.layers.N.": where transformers checkpoints keep layer N's tensors.
std::string layer_prefix(int layer);

// Rows of the q, k and v products and the o product's input width (all of the hidden width's input
// but o's output).
struct ProjectionWidths {
  int64_t hidden = 0, q = 0, k = 0, v = 0, o_in = 0;
};

// self_attn.{q,k,v,o}_proj.weight, and their .bias where the checkpoint has them.
Status bind_attention_projections(WeightSource& src, const std::string& prefix, const ProjectionWidths& widths, LayerWeights& w);

// mlp.{gate,up,down}_proj.weight of an MLP `ffn` wide.
Status bind_gated_mlp(WeightSource& src, const std::string& prefix, int64_t ffn, int64_t hidden, LayerWeights& w);

// The attention weights a layer bound: q/k/v/o, the biases it has, and its q/k norms (per head, or over
// the whole projection where the weights say qk_norm_full).
blocks::AttentionWeights attention_weights(StepGraph& g, const LayerWeights& w);

}  // namespace sluice::families
