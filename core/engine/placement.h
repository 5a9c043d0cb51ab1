#pragma once
// Which backends run the model, and which layers each runs: --backend alone (every layer on one
// backend, the common case), or --gpu-layers / --devices (the first layers on GPU/OpenCL devices,
// the rest on the CPU backend; the policy is in layer_split.h). Opens the backends it places layers on.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "plugin/backend_handle.h"
#include "plugin/plugin_registry.h"
#include "util/result.h"

namespace sluice {

struct Placement {
  std::vector<std::unique_ptr<BackendHandle>> backends;  // one per stage, in layer order
  std::vector<uint32_t> n_layers;                        // the layers of each, in order
  bool split_requested = false;                          // --gpu-layers or --devices was given
  // "opencl: <device> (layers 0-1) + cpu: <device> (layers 2-3)", or the one backend's description.
  std::string describe() const;
};

// What the KV cache will hold, for --gpu-layers auto.
struct KvSizing {
  uint64_t bytes_per_token_per_layer = 0;  // K and V rows of every KV head
  uint32_t capacity_tokens = 0;            // positions reserved across all sequences
};

// Activations of one forward pass on a device: the per-token buffers of Transformer at the largest
// batch (a prefill chunk plus a decode token of every other sequence) and the logits of every row
// (perplexity asks for all of them).
uint64_t activation_bytes(const ModelConfig& config, const EngineOptions& options);

Result<Placement> place_layers(PluginRegistry& registry, const EngineOptions& options, const ModelConfig& config,
                               const SafetensorsSet& tensors, const KvSizing& kv);

}  // namespace sluice
