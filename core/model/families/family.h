#pragma once
// A model family: how one decoder layer is written as graph nodes from the shared blocks
// (core/model/blocks.h). The forward driver (core/model/transformer_forward.cpp) asks the family for
// each layer's nodes around the feed-forward block and runs a Mixture-of-Experts block itself (its
// routing needs the host). A new family is a new file beside llama.cpp implementing this, and a line
// in family_for(); docs/ADDING_AN_ARCHITECTURE.md walks through it.
#include <cstdint>
#include <string>
#include <vector>

#include "graph/step_graph.h"
#include "model/blocks.h"
#include "model/layer_weights.h"
#include "model/model_config.h"
#include "util/result.h"

namespace sluice::families {

// What a layer's nodes need besides its weights.
struct LayerContext {
  const ModelConfig* config = nullptr;
  const blocks::Activations* act = nullptr;
  sl_rope_params rope{};  // inv_freq, rotary_dim, factor, style
  uint32_t layer = 0;        // the model's layer
  uint32_t cache_layer = 0;  // its layer in the stage's cache
  // The stage's cache layer whose K/V it attends: cache_layer, or a KV-sharing layer's source.
  uint32_t kv_cache_layer = 0;
  uint32_t n_seqs = 1;    // the step's sequences (rows of a STATE tensor)
  std::string prefix;     // "layer 3 ": names the layer's nodes in messages and profiles
  // Gemma 4: the rows of act->per_layer_rows that are this layer's per-layer input ([n] host indices).
  const int32_t* per_layer_rows = nullptr;
  uint32_t n_tokens = 0;
};

// What the nodes after the embedding need (Gemma 4's per-layer inputs).
struct EmbedContext {
  const ModelConfig* config = nullptr;
  const blocks::Activations* act = nullptr;
  const ModelWeights* model = nullptr;
  StepGraph::Id ids = StepGraph::kNone;  // the step's token ids (host or device)
};

// The checkpoint's tensors, as a family binds them: by name and expected shape (the Transformer's
// binder behind it places each on its stage's backend, quantized or not). Errors name the tensor.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  virtual Status bind(sl_weight& dst, const std::string& name, std::vector<int64_t> shape) = 0;
  // Rows [first, first + count) of a tensor of `shape` that stacks several matrices (Phi-3's fused
  // qkv_proj and gate_up_proj), as a weight of its own — quantized or not.
  Status bind_rows(sl_weight& dst, const std::string& name, std::vector<int64_t> shape, uint32_t first, uint32_t count);
  // A one-value tensor of the checkpoint (Gemma 4's layer_scalar), read on the host.
  virtual Result<float> scalar(const std::string& name) {
    return make_error("tensor '" + name + "': this weight source reads no values on the host");
  }
  // A small tensor of the checkpoint (Gemma 4's per_expert_scale), read on the host.
  virtual Result<std::vector<float>> values(const std::string& name, std::vector<int64_t> shape) {
    (void)shape;
    return make_error("tensor '" + name + "': this weight source reads no values on the host");
  }
  // A small weight of the given values made on the stage's backend (a norm without a scale as one of ones).
  virtual Status constant(sl_weight& dst, const std::vector<float>& values) {
    (void)dst;
    (void)values;
    return make_error("this weight source makes no constants");
  }
  // Binds it where the checkpoint has it; present says whether it did.
  Status bind_optional(sl_weight& dst, bool& present, const std::string& name, std::vector<int64_t> shape) {
    present = has(name);
    return present ? bind(dst, name, std::move(shape)) : Status{};
  }
};

// Where a family's checkpoints keep the tensors around the layers.
struct ModelTensorNames {
  std::string embed = "model.embed_tokens.weight";
  std::string final_norm = "model.norm.weight";
  std::string lm_head = "lm_head.weight";  // absent or tie_word_embeddings: the embedding table
};

class Family {
 public:
  virtual ~Family() = default;
  virtual const char* name() const = 0;
  virtual ModelTensorNames tensor_names() const { return {}; }
  // Binds the tensors around the layers the family uses itself (the first stage's; none by default).
  virtual Status bind_model(WeightSource& src, const ModelConfig& c, ModelWeights& w) const {
    (void)src;
    (void)c;
    (void)w;
    return {};
  }
  // Nodes after the embedding (and its scale) on the first stage; none by default.
  virtual void after_embed(StepGraph& g, const EmbedContext& c) const {
    (void)g;
    (void)c;
  }
  // A MoE layer's router module ("model.layers.3.mlp.gate"): its `.weight`, and `.bias` where the
  // config says the router has one.
  virtual std::string router_module(const ModelConfig& c, int layer) const;
  // Whether the family writes linear_attention (recurrent) layers; a model with such layers and a
  // family that does not is refused.
  virtual bool builds_linear_attention() const { return false; }
  // Binds layer `layer`'s weights by the family's checkpoint names and shapes: attention, norms and,
  // for a dense layer, the feed-forward block (a MoE layer's router and experts are the driver's:
  // core/model/expert_layout.h).
  virtual Status bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const = 0;
  // The residual stream x in, the feed-forward block's input in h out (attention and its residual
  // step included).
  virtual void before_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const = 0;
  // h → o: the dense feed-forward block.
  virtual void dense_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const = 0;
  // A layer with an MoE block beside its dense MLP (ModelConfig::moe.dense_beside): after before_ffn,
  // runs the dense MLP and keeps its output, leaves the experts' input in h and returns the router's
  // input (the driver then routes and runs the experts into o).
  virtual StepGraph::Id before_moe(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
    (void)g;
    (void)w;
    return c.act->h;
  }
  // o (the feed-forward output, dense or routed) back into x.
  virtual void after_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const = 0;
};

// The family of config.model_type, or null when none here builds it.
const Family* family_for(const ModelConfig& config);

}  // namespace sluice::families
