#pragma once
// A model family: how one decoder layer is written as graph nodes from the shared blocks
// (core/model/blocks.h). The forward driver (core/model/transformer_forward.cpp) asks the family for
// each layer's nodes around the feed-forward block and runs a Mixture-of-Experts block itself (its
// routing needs the host). A new family is a new file beside llama.cpp implementing this, and a line
// in family_for(); docs/ADDING_AN_ARCHITECTURE.md walks through it.
#include <cstdint>
#include <string>

#include "graph/step_graph.h"
#include "model/blocks.h"
#include "model/layer_weights.h"
#include "model/model_config.h"

namespace sluice::families {

// What a layer's nodes need besides its weights.
struct LayerContext {
  const ModelConfig* config = nullptr;
  const blocks::Activations* act = nullptr;
  sl_rope_params rope{};  // inv_freq, rotary_dim, factor, style
  uint32_t cache_layer = 0;
  std::string prefix;     // "layer 3 ": names the layer's nodes in messages and profiles
};

class Family {
 public:
  virtual ~Family() = default;
  virtual const char* name() const = 0;
  // The residual stream x in, the feed-forward block's input in h out (attention and its residual
  // step included).
  virtual void before_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const = 0;
  // h → o: the dense feed-forward block.
  virtual void dense_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const = 0;
  // o (the feed-forward output, dense or routed) back into x.
  virtual void after_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const = 0;
};

// The family of config.model_type, or null when none here builds it.
const Family* family_for(const ModelConfig& config);

}  // namespace sluice::families
