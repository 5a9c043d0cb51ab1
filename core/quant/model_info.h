#pragma once
// `sluice info`: what a model folder holds, read from config.json and the safetensors headers only
// (no weight is read): architecture and shape, parameters (quantized matrices counted by their logical
// size), bytes, bits per weight, and the KV cache's bytes per token for each codec.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "util/result.h"

namespace sluice {
class PluginRegistry;
}

namespace sluice::quant {

struct KvCodecSize {
  std::string name;
  double bits_per_value = 0;
  uint64_t bytes_per_token = 0;  // K and V of every layer that keeps every position (full attention)
  // Sliding-window layers keep only their window's pages (where the backend can: the CPU's): the
  // most one sequence holds of them, pages rounded as the KV cache holds them (core/engine/kv_cache.h).
  uint64_t window_bytes_per_sequence = 0;
};

struct ModelInfo {
  std::string architecture;
  int layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, ffn = 0;
  int experts = 0, experts_per_token = 0;
  bool tied = false;
  int tensors = 0, files = 0;
  uint64_t params = 0;              // logical parameters
  uint64_t bytes = 0;               // tensor data bytes
  uint64_t quantized_params = 0, quantized_bytes = 0;  // of the quantized matrices (words + scales + biases)
  uint64_t expert_params = 0;       // inside stacked experts (for the active count)
  std::map<std::string, int> forms; // "4-bit g64" / "bf16" -> tensors (matrices) of that form
  std::vector<KvCodecSize> kv;
  int sliding_layers = 0, linear_layers = 0;  // of `layers` (the rest: full attention)
  int window = 0;                             // the largest sliding window
  uint64_t state_bytes_per_sequence = 0;      // recurrent layers' state, where the model's family sizes it

  double bits_per_weight() const { return params ? 8.0 * static_cast<double>(bytes) / static_cast<double>(params) : 0; }
  double quantized_bits_per_weight() const {
    return quantized_params ? 8.0 * static_cast<double>(quantized_bytes) / static_cast<double>(quantized_params) : 0;
  }
  uint64_t active_params() const {
    if (experts <= 0 || experts_per_token <= 0) return params;
    return params - expert_params + expert_params / experts * experts_per_token;
  }
};

// registry: kvcodec plugins to list besides the built-in f32 and f16 (may be null).
Result<ModelInfo> inspect_model(const std::filesystem::path& dir, const PluginRegistry* registry);

}  // namespace sluice::quant
