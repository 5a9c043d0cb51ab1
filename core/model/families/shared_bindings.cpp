#include "model/families/shared_bindings.h"

namespace sluice::families {

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

Status bind_attention_projections(WeightSource& src, const std::string& p, const ProjectionWidths& n, LayerWeights& w) {
  SLUICE_TRY_STATUS(src.bind(w.q, p + "self_attn.q_proj.weight", {n.q, n.hidden}));
  SLUICE_TRY_STATUS(src.bind(w.k, p + "self_attn.k_proj.weight", {n.k, n.hidden}));
  SLUICE_TRY_STATUS(src.bind(w.v, p + "self_attn.v_proj.weight", {n.v, n.hidden}));
  SLUICE_TRY_STATUS(src.bind(w.o, p + "self_attn.o_proj.weight", {n.hidden, n.o_in}));
  SLUICE_TRY_STATUS(src.bind_optional(w.q_bias, w.has_q_bias, p + "self_attn.q_proj.bias", {n.q}));
  SLUICE_TRY_STATUS(src.bind_optional(w.k_bias, w.has_k_bias, p + "self_attn.k_proj.bias", {n.k}));
  SLUICE_TRY_STATUS(src.bind_optional(w.v_bias, w.has_v_bias, p + "self_attn.v_proj.bias", {n.v}));
  SLUICE_TRY_STATUS(src.bind_optional(w.o_bias, w.has_o_bias, p + "self_attn.o_proj.bias", {n.hidden}));
  return {};
}

Status bind_gated_mlp(WeightSource& src, const std::string& p, int64_t ffn, int64_t hidden, LayerWeights& w) {
  SLUICE_TRY_STATUS(src.bind(w.gate, p + "mlp.gate_proj.weight", {ffn, hidden}));
  SLUICE_TRY_STATUS(src.bind(w.up, p + "mlp.up_proj.weight", {ffn, hidden}));
  SLUICE_TRY_STATUS(src.bind(w.down, p + "mlp.down_proj.weight", {hidden, ffn}));
  return {};
}

blocks::AttentionWeights attention_weights(StepGraph& g, const LayerWeights& w) {
  blocks::AttentionWeights aw;
  aw.q = g.weight(w.q);
  aw.k = g.weight(w.k);
  aw.v = g.weight(w.v);
  aw.o = g.weight(w.o);
  if (w.has_q_bias) aw.q_bias = g.weight(w.q_bias);
  if (w.has_k_bias) aw.k_bias = g.weight(w.k_bias);
  if (w.has_v_bias) aw.v_bias = g.weight(w.v_bias);
  if (w.has_o_bias) aw.o_bias = g.weight(w.o_bias);
  if (w.has_qk_norm) {
    aw.q_norm = g.weight(w.q_norm);
    aw.k_norm = g.weight(w.k_norm);
    aw.norm_per_head = !w.qk_norm_full;
  }
  return aw;
}

}  // namespace sluice::families
