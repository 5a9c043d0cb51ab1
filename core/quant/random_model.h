#pragma once
// `sluice make-model`: random-weight models of real shapes, written straight to disk — in bf16, or
// already quantized (MLX affine) when bits are given, with no full-precision intermediate.
//
// Weights are uniform with the standard deviation a trained model's initialisation would use:
// 1/sqrt(fan_in) for projections into a layer, that divided by sqrt(2 * layers) for the projections
// back into the residual stream (o_proj, down_proj), 0.02 for the embedding and biases, 1 for norms.
// Every layer's update is then O(1/sqrt(layers)) against a residual stream of O(1), so activations
// stay finite and of unit scale through all layers. Each tensor's values come from a counter-based
// generator keyed by (seed, tensor name): the same seed gives the same files.
//
// MoE presets are written in MLX's stacked layout: `mlp.switch_mlp.{gate,up,down}_proj.weight`
// [experts, out, in] and the router `mlp.gate.weight` (8 bits when quantized, as mlx-lm does) —
// except gpt-oss, written as transformers stores it (bf16 only): attention biases and sinks, the
// biased router `mlp.router`, and fused input-major experts `mlp.experts.{gate_up_proj, down_proj}`
// with their biases.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "quant/model_files.h"
#include "quant/safetensors_writer.h"
#include "util/result.h"

namespace sluice::quant {

struct ModelPreset {
  std::string name, model_type, architecture, description;
  int hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  bool tied = false, qkv_bias = false, qk_norm = false;
  int experts = 0, experts_per_token = 0, expert_ffn = 0;  // MoE when experts > 0
  double rope_theta = 10000.0;
  int max_positions = 32768;
  // Gemma 4 (model_type gemma4_text): every full_every-th layer full (global_head_dim, global_kv_heads
  // with K as V when k_eq_v), the rest sliding over sliding_window; per-layer inputs of per_layer_input
  // values; the last kv_shared layers attending earlier layers' K/V (MLP twice as wide there when
  // double_wide); with experts, the MoE block beside every layer's MLP.
  int global_head_dim = 0, global_kv_heads = 0, full_every = 0;
  int sliding_window = 0;  // Gemma 4's and gpt-oss's sliding layers' window
  int per_layer_input = 0, kv_shared = 0;
  bool k_eq_v = false, double_wide = false;
  // DeepSeek-V3 (model_type deepseek_v3, every layer dense): multi-head latent attention's ranks and
  // widths (head_dim unused).
  int q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  // Qwen3.5 MoE (model_type qwen3_5_moe_text): every full_every-th layer gated full attention (q_proj
  // twice as wide: queries and their gates; partial_rotary of each head turned), the others Gated
  // DeltaNet with linear_key_heads / linear_value_heads heads of linear_head_dim and a causal conv of
  // conv_kernel; a shared expert of shared_expert_ffn beside the routed ones.
  int linear_key_heads = 0, linear_value_heads = 0, linear_head_dim = 0, conv_kernel = 0, shared_expert_ffn = 0;
  double partial_rotary = 1.0;
  bool gemma4() const { return model_type == "gemma4_text"; }
  bool qwen35() const { return model_type == "qwen3_5_moe_text"; }
  bool deepseek() const { return model_type == "deepseek_v3"; }
};

const std::vector<ModelPreset>& model_presets();
const ModelPreset* find_preset(const std::string& name);

struct MakeModelOptions {
  std::string preset;
  std::filesystem::path output;
  int bits = 0;  // 0: bf16
  int group_size = 64;
  uint64_t seed = 0;
  std::filesystem::path tokenizer_from;  // folder with tokenizer.json (and template)
  uint64_t max_shard_bytes = SafetensorsWriter::kDefaultShardBytes;
  bool quiet = false;
};

// The tensors a preset has, in HF/MLX naming, unquantized shapes.
std::vector<TensorPlan> preset_tensors(const ModelPreset& p);
Result<uint64_t> make_model(const MakeModelOptions& options);  // returns bytes written

}  // namespace sluice::quant
