#pragma once
// One decoder layer's weights as the families bind them (core/model/families/): which optional
// tensors the checkpoint has decides biases and q/k norms; Gemma's norms after attention and after
// the feed-forward block are the post_* ones.
#include <cstdint>

#include "sluice/graph.h"

namespace sluice {

struct LayerWeights {
  sl_weight attn_norm{}, q{}, k{}, v{}, o{}, q_bias{}, k_bias{}, v_bias{}, o_bias{};
  sl_weight q_norm{}, k_norm{}, ffn_norm{}, gate{}, up{}, down{};
  sl_weight post_attn_norm{}, post_ffn_norm{};  // Gemma: on each block's output before its residual add
  bool has_q_bias = false, has_k_bias = false, has_v_bias = false, has_o_bias = false, has_qk_norm = false;
  bool qk_norm_full = false;  // q/k norms over the whole projection (olmoe) rather than per head
  uint32_t window = 0;
  int moe_index = -1;         // >= 0: a MoE block (router below, experts in the store)
  sl_weight router{};
  // A shared expert beside the routed ones (Qwen3.5-MoE): a gated MLP whose output the driver adds
  // times sigmoid(h · shared_expert_gate).
  sl_weight shared_gate{}, shared_up{}, shared_down{}, shared_expert_gate{};
  bool has_shared_expert = false;
  // A Gated DeltaNet layer (Qwen3.5's linear_attention): its products, dt_bias (in_proj_a's bias),
  // A_log, the convolution's taps [conv_dim, K], the gated norm and the output product.
  sl_weight lin_qkv{}, lin_z{}, lin_b{}, lin_a{}, lin_dt_bias{}, lin_a_log{}, lin_conv{}, lin_norm{}, lin_out{};
  bool linear = false;
};

}  // namespace sluice
