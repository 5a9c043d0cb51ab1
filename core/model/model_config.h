#pragma once
// A model's description from config.json (+ generation_config.json): the data that makes
// architectures differ. One forward pass (core/model/forward) serves every architecture.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "util/result.h"

namespace sluice {

// kProportional (Gemma 4's full layers): the first partial_rotary_factor of a head's angles rotate with
// frequencies spaced over the whole head, the rest keep angle 0 — so rotary_dim is the whole head.
enum class RopeScaling { kNone, kLinear, kLlama3, kYarn, kDynamic, kLongRope, kProportional };

struct RopeConfig {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;           // llama3
  double high_freq_factor = 4.0;          // llama3
  int original_max_position = 8192;       // llama3 / yarn
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn
  // yarn: round the ramp's ends to whole dimensions (transformers' default); gpt-oss turns it off.
  bool truncate = true;
  std::optional<double> attention_factor;   // yarn mscale override
  // DeepSeek's yarn: cos/sin scaled by mscale(factor, mscale) / mscale(factor, mscale_all_dim) where both are set.
  std::optional<double> mscale, mscale_all_dim;
  double partial_rotary_factor = 1.0;     // fraction of head_dim rotated
  // longrope (Phi-3): per-frequency divisors, short within original_max_position, long past it.
  std::vector<double> short_factor, long_factor;
  // inv_freq[i] for i < rotary_dim/2, with scaling applied; attention_scaling multiplies cos/sin.
  std::vector<float> inverse_frequencies(int rotary_dim) const;
  float attention_scaling() const;
};

struct ModuleQuantization {
  int bits = 0;  // 0 = kept in floating point
  int group_size = 64;
};

// MLX affine quantization: `quantization` {bits, group_size, [mode: "affine"], and per-module overrides
// "<module path>": {bits, group_size} or false}. Whether a module is quantized at all is decided by
// the checkpoint (its `.scales` tensor); this says with which bits and group size.
struct QuantizationConfig {
  int bits = 0;  // 0 = none
  int group_size = 64;
  std::map<std::string, ModuleQuantization> overrides;  // module path ("model.layers.0.mlp.gate") -> form
  ModuleQuantization for_module(const std::string& module) const {
    auto it = overrides.find(module);
    return it != overrides.end() ? it->second : ModuleQuantization{bits, group_size};
  }
};

// How a token's experts and their weights come from the router's logits.
enum class MoeRouting {
  kSoftmaxTopK,  // softmax over every expert, the top k kept (mixtral, qwen3_moe, olmoe, qwen3.5, gemma 4)
  kTopKSoftmax,  // the top k logits, then softmax over those k (gpt-oss)
  // DeepSeek-V3: sigmoid scores; the choice by score + the layer's correction bias, among the
  // topk_group groups (of n_group) with the largest sums of their two best biased scores; weights
  // the unbiased scores of the chosen.
  kSigmoidGroupLimited,
};

// Mixture-of-Experts feed-forward blocks (mixtral, qwen3_moe, olmoe, gpt_oss, qwen3.5, gemma 4,
// deepseek_v3). The top k by the routing kind, their weights divided by their sum (normalize_top_k),
// times routed_scaling.
struct MoeConfig {
  MoeRouting routing = MoeRouting::kSoftmaxTopK;
  int n_group = 1, topk_group = 1;  // kSigmoidGroupLimited
  float routed_scaling = 1.0f;
  // Always-run experts beside the routed ones: one gated MLP of this width for every token, its output
  // added (DeepSeek's shared_experts: moe_intermediate_size × n_shared_experts), or added times
  // sigmoid(h · shared_expert_gate) where shared_gated (Qwen3.5-MoE's shared_expert); 0 = none.
  int shared_intermediate = 0;
  bool shared_gated = false;
  int n_experts = 0;            // 0: a dense model
  int top_k = 0;
  int expert_intermediate = 0;  // each expert's FFN width
  bool normalize_top_k = false;
  // Gemma 4: each MoE block runs beside the layer's dense MLP (their outputs summed), routed from its
  // own input, its top-k weights scaled per expert (the router's per_expert_scale).
  bool dense_beside = false;
  bool router_bias = false;     // the router is a linear layer with a bias (gpt-oss)
  bool expert_bias = false;     // each expert's gate, up and down products add biases (gpt-oss)
  // The experts' activation: SiLU-gated, or gpt-oss's clamped SwiGLU with these (swiglu_limit > 0).
  float swiglu_alpha = 0.0f, swiglu_limit = 0.0f;
  bool clamped_swiglu() const { return swiglu_limit > 0; }
  std::vector<bool> sparse_layer;  // per layer: a MoE block (true) or a dense MLP
  bool enabled() const { return n_experts > 0; }
  bool is_sparse(int layer) const { return enabled() && layer < static_cast<int>(sparse_layer.size()) && sparse_layer[layer]; }
};

// What a layer keeps per sequence, as transformers' config.json names it in layer_types:
// "full_attention", "sliding_attention", "linear_attention" (a recurrent layer: Gated DeltaNet, ...).
enum class LayerType { kFullAttention, kSlidingAttention, kLinearAttention };
const char* layer_type_name(LayerType type);

// One layer's needs of the KV cache (core/engine/kv_cache.h): K and V rows of every position (full
// attention) or of the newest `window` (sliding), of the given widths — or, for a recurrent layer,
// a fixed-size state per sequence.
struct LayerCacheSpec {
  LayerType type = LayerType::kFullAttention;
  uint32_t n_kv_heads = 0, k_head_dim = 0, v_head_dim = 0;  // attention layers
  uint32_t window = 0;        // sliding attention
  uint64_t state_bytes = 0;   // linear attention
};

// Gated DeltaNet, the recurrent (linear_attention) layers of Qwen3.5 / Qwen3-Next: q, k and v from
// one product, a short causal convolution over them, the gated delta rule, a gated RMSNorm.
struct LinearAttentionConfig {
  int conv_kernel = 0;  // linear_conv_kernel_dim; 0: the model has no such layers
  int n_k_heads = 0, n_v_heads = 0;
  int k_head_dim = 0, v_head_dim = 0;
  int key_dim() const { return n_k_heads * k_head_dim; }
  int value_dim() const { return n_v_heads * v_head_dim; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }  // q, k and v, convolved together
  // A sequence's state: the convolution's last conv_kernel - 1 inputs, then each value head's
  // [k_head_dim, v_head_dim] matrix.
  uint64_t conv_state_floats() const { return uint64_t(conv_kernel > 0 ? conv_kernel - 1 : 0) * conv_dim(); }
  uint64_t recurrent_state_floats() const { return uint64_t(n_v_heads) * k_head_dim * v_head_dim; }
};

struct ModelConfig {
  std::string architecture;        // model_type: llama, qwen2, qwen3, mistral, ...
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int max_position_embeddings = 4096;
  float norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  bool attention_bias = false;     // q/k/v biases (qwen2: true)
  bool attention_out_bias = false; // o_proj bias
  bool mlp_bias = false;
  bool qk_norm = false;            // per-head RMSNorm on q and k (qwen3, qwen3_moe)
  bool qk_norm_full = false;       // RMSNorm over the whole q and k projections (olmoe)
  std::string hidden_act = "silu";
  RopeConfig rope;
  // Sliding-window attention: window in tokens for each layer (0 = full attention).
  std::vector<int> layer_window;
  // Per layer (config.json's layer_types where it has one): full or sliding attention (as
  // layer_window says) or linear attention (recurrent). Empty: every layer attention, as layer_window says.
  std::vector<LayerType> layer_types;
  // The rotary embedding of sliding-window layers where it differs from `rope` (Gemma 3's local base).
  std::optional<RopeConfig> sliding_rope;
  // Gemma: the embedding multiplied by this (sqrt(hidden_size)); 0 = not scaled.
  float embed_scale = 0.0f;
  // Gemma: RMSNorm weights stored as weight - 1 (every norm multiplies by weight + this).
  float norm_weight_offset = 0.0f;
  // Attention scores' scale where it is not 1/sqrt(head_dim) (Gemma's query_pre_attn_scalar^-1/2); 0 = that.
  float attention_scale = 0.0f;
  // tanh soft-capping of attention scores and of the final logits (Gemma 2); 0 = none.
  float attention_softcap = 0.0f;
  float final_logit_softcap = 0.0f;
  // Per layer where they differ from head_dim / num_kv_heads (Gemma 4's full layers, from
  // per_layer_config or global_head_dim); empty: every layer alike.
  std::vector<int> layer_head_dim, layer_kv_heads;
  // Gemma 4: V normed per head without a weight; full layers whose V is their K projection
  // (attention_k_eq_v); layers from kv_shared_from on attend the K/V of the last earlier layer of
  // their type instead of writing their own (num_kv_shared_layers; -1 = none); each layer's
  // per-layer input of per_layer_input_width values from a table of per_layer_vocab rows (0 = none).
  bool value_norm = false;
  bool full_k_eq_v = false;
  int kv_shared_from = -1;
  int per_layer_input_width = 0;
  int per_layer_vocab = 0;
  bool double_wide_shared_mlp = false;
  // V values per KV head where they differ from K's (MLA); 0 = head_dim. Set by the families that have it.
  int v_head_dim = 0;
  // Multi-head latent attention (DeepSeek-V3): q through a rank-q_lora_rank bottleneck (0: q_proj
  // straight), K and V expanded per head from a normed latent of kv_lora_rank values, each head's
  // K and Q [nope | rope] with a rotary part of qk_rope_head_dim values shared by all heads' K.
  // head_dim is qk_nope_head_dim + qk_rope_head_dim, v_head_dim V's width.
  struct Mla {
    int q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0;
    // The cache keeps the latent (blocks::mla_attention): one KV head, K = [normed latent | rotated
    // k_pe] (kv_lora_rank + qk_rope_head_dim values), V = the latent (kv_lora_rank). Set where the
    // model has a nope part (absorbing kv_b needs one); the Transformer clears it where a stage's
    // backend does not run HEAD_MATMUL (ABI 2.4), and K/V are then expanded per head as before.
    bool latent_cache = false;
    bool enabled() const { return kv_lora_rank > 0; }
  } mla;
  // Rotated dimensions per head set outright (MLA's qk_rope_head_dim); 0: head_dim × partial_rotary_factor.
  int rope_dims = 0;
  // Rotary pairs are adjacent dimensions (DeepSeek's rope_interleave) rather than the halves.
  bool rope_interleaved = false;
  // Bytes of a linear-attention layer's state per sequence, from the family's fields (Qwen3.5:
  // `linear`'s convolution window and recurrent state).
  uint64_t linear_state_bytes = 0;
  LinearAttentionConfig linear;
  // Qwen3.5's full-attention layers: q_proj gives each head's query and a gate, and the attention
  // output is multiplied by sigmoid(gate) before o_proj.
  bool attention_output_gate = false;
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id;
  QuantizationConfig quantization;
  MoeConfig moe;

  static Result<ModelConfig> load(const std::filesystem::path& model_dir);
  static const std::vector<std::string>& supported_architectures();
  int rotary_dim() const { return rope_dims > 0 ? rope_dims : static_cast<int>(head_dim * rope.partial_rotary_factor); }
  int head_dim_of(int layer) const {
    return layer >= 0 && layer < static_cast<int>(layer_head_dim.size()) ? layer_head_dim[layer] : head_dim;
  }
  int kv_heads_of(int layer) const {
    return layer >= 0 && layer < static_cast<int>(layer_kv_heads.size()) ? layer_kv_heads[layer] : num_kv_heads;
  }
  // The widest head and K/V projection of any layer (activation buffers are sized by them).
  int max_head_dim() const;
  int max_kv_width() const;
  // Dimensions layer `layer` rotates (a proportional rope turns the whole head, most of it by angle 0).
  int rotary_dim_of(int layer) const;
  // The layer whose K/V layer `layer` attends: itself, or for a KV-sharing layer the last layer of its
  // type before kv_shared_from.
  int kv_source_of(int layer) const;
  // Whether layer `layer` keeps K/V (or a state) of its own: every layer but a KV-sharing one, which
  // reads its source's and has no place in the cache layout.
  bool keeps_cache(int layer) const { return kv_source_of(layer) == layer; }
  // Layer `layer`'s index among the layers that keep a cache (the layers before it that do).
  int cache_index(int layer) const;
  int value_head_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
  LayerType layer_type(int layer) const;
  // The rotary embedding layer `layer` uses (sliding_rope on a sliding layer where the model has one).
  const RopeConfig& rope_of(int layer) const {
    return sliding_rope && layer_type(layer) == LayerType::kSlidingAttention ? *sliding_rope : rope;
  }
  // What layer `layer` keeps in the KV cache (its type, widths, window or state).
  LayerCacheSpec layer_cache(int layer) const;
};

}  // namespace sluice
