#pragma once
// One decoder layer's weights as the families bind them (core/model/families/): which optional
// tensors the checkpoint has decides biases and q/k norms; Gemma's norms after attention and after
// the feed-forward block are the post_* ones.
#include <cstdint>
#include <vector>

#include "sluice/graph.h"

namespace sluice {

struct LayerWeights {
  sl_weight attn_norm{}, q{}, k{}, v{}, o{}, q_bias{}, k_bias{}, v_bias{}, o_bias{};
  sl_weight q_norm{}, k_norm{}, ffn_norm{}, gate{}, up{}, down{};
  sl_weight post_attn_norm{}, post_ffn_norm{};  // Gemma: on each block's output before its residual add
  // Gemma 4: V's norm (ones: it has no scale), the per-layer input's gate, projection and norm, and
  // the layer's output scale (a checkpoint scalar, read on the host).
  sl_weight v_norm{}, per_layer_gate{}, per_layer_projection{}, per_layer_norm{};
  bool has_v_norm = false, has_per_layer_input = false;
  float output_scale = 1.0f;
  // Gemma 4's MoE block beside the MLP: its router's input scale (router.scale), the norms of the
  // MLP's and the experts' outputs and of the experts' input, and each expert's routing weight scale.
  sl_weight router_scale{}, post_ffn_norm_dense{}, post_ffn_norm_experts{}, pre_ffn_norm_experts{};
  std::vector<float> expert_scale;
  bool has_q_bias = false, has_k_bias = false, has_v_bias = false, has_o_bias = false, has_qk_norm = false;
  bool qk_norm_full = false;  // q/k norms over the whole projection (olmoe) rather than per head
  uint32_t window = 0;
  int moe_index = -1;         // >= 0: a MoE block (router below, experts in the store)
  sl_weight router{};
  sl_weight router_bias{};    // where the model's router has one (gpt-oss)
  bool has_router_bias = false;
  // Attention sinks (gpt-oss): one logit per head that joins each softmax. The family reads the
  // values; the Transformer keeps them as float32 on the layer's backend (sinks).
  std::vector<float> sink_values;
  sl_buffer* sinks = nullptr;
  // A MoE block's always-run shared experts (ModelConfig::moe.shared_intermediate): a gated MLP whose
  // output the driver adds — DeepSeek's mlp.shared_experts, or Qwen3.5-MoE's mlp.shared_expert times
  // sigmoid(h · shared_expert_gate).
  sl_weight shared_gate{}, shared_up{}, shared_down{}, shared_expert_gate{};
  bool has_shared_experts = false;
  // A Gated DeltaNet layer (Qwen3.5's linear_attention): its products, dt_bias (in_proj_a's bias),
  // A_log, the convolution's taps [conv_dim, K], the gated norm and the output product.
  sl_weight lin_qkv{}, lin_z{}, lin_b{}, lin_a{}, lin_dt_bias{}, lin_a_log{}, lin_conv{}, lin_norm{}, lin_out{};
  bool linear = false;
  // MLA (DeepSeek-V3): q's down-projection and its norm (q is then q_b, in `q`; none without
  // q_lora_rank), the joint K/V latent + shared rotary key projection, the latent's norm and its
  // per-head expansion to [k_nope | v].
  sl_weight q_a{}, q_a_norm{}, kv_a{}, kv_a_norm{}, kv_b{};
  bool has_q_lora = false;
  // The router's correction bias that shifts the scores experts are chosen by (DeepSeek's
  // e_score_correction_bias, host values).
  std::vector<float> router_choice_bias;
};

// Tensors around the layers a family binds itself (Gemma 4's per-layer inputs: the token table
// [per_layer_vocab, L·P], the projection from the embedding [L·P, H] and its norm [P]).
struct ModelWeights {
  sl_weight per_layer_embed{}, per_layer_projection{}, per_layer_norm{};
  bool has_per_layer_inputs = false;
};

}  // namespace sluice
