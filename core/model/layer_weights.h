#pragma once
// One decoder layer's weights as the llama-shaped families bind them (llama, mistral, mixtral, qwen2,
// qwen3, qwen3_moe, olmoe): which optional tensors the checkpoint has decides biases and q/k norms.
#include <cstdint>

#include "sluice/graph.h"

namespace sluice {

struct LayerWeights {
  sl_weight attn_norm{}, q{}, k{}, v{}, o{}, q_bias{}, k_bias{}, v_bias{}, o_bias{};
  sl_weight q_norm{}, k_norm{}, ffn_norm{}, gate{}, up{}, down{};
  bool has_q_bias = false, has_k_bias = false, has_v_bias = false, has_o_bias = false, has_qk_norm = false;
  bool qk_norm_full = false;  // q/k norms over the whole projection (olmoe) rather than per head
  uint32_t window = 0;
  int moe_index = -1;         // >= 0: a MoE block (router below, experts in the store)
  sl_weight router{};
};

}  // namespace sluice
