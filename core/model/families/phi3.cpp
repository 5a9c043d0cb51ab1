#include "model/families/phi3.h"

#include <string>

#include "model/families/shared_bindings.h"

namespace sluice::families {

Status Phi3::bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const {
  if (sparse) return make_error("phi3 has no Mixture-of-Experts layers");
  const int64_t H = c.hidden_size, D = c.head_dim, F = c.intermediate_size;
  const uint32_t QD = static_cast<uint32_t>(c.num_heads * D), KD = static_cast<uint32_t>(c.num_kv_heads * D);
  const std::string p = layer_prefix(layer);
#define SLUICE_TRY SLUICE_TRY_STATUS
  const std::string qkv = p + "self_attn.qkv_proj.weight", gate_up = p + "mlp.gate_up_proj.weight";
  SLUICE_TRY(src.bind(w.attn_norm, p + "input_layernorm.weight", {H}));
  SLUICE_TRY(src.bind_rows(w.q, qkv, {QD + 2 * KD, H}, 0, QD));
  SLUICE_TRY(src.bind_rows(w.k, qkv, {QD + 2 * KD, H}, QD, KD));
  SLUICE_TRY(src.bind_rows(w.v, qkv, {QD + 2 * KD, H}, QD + KD, KD));
  SLUICE_TRY(src.bind(w.o, p + "self_attn.o_proj.weight", {H, QD}));
  SLUICE_TRY(src.bind(w.ffn_norm, p + "post_attention_layernorm.weight", {H}));
  SLUICE_TRY(src.bind_rows(w.gate, gate_up, {2 * F, H}, 0, static_cast<uint32_t>(F)));
  SLUICE_TRY(src.bind_rows(w.up, gate_up, {2 * F, H}, static_cast<uint32_t>(F), static_cast<uint32_t>(F)));
  SLUICE_TRY(src.bind(w.down, p + "mlp.down_proj.weight", {H, F}));
#undef SLUICE_TRY
  return {};
}

}  // namespace sluice::families
