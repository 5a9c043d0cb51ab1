#include "model/families/gemma4.h"

#include <cmath>
#include <string>

#include "model/families/llama.h"  // activation()
#include "model/families/shared_bindings.h"

namespace sluice::families {

namespace {

bool shares_kv(const ModelConfig& c, int layer) { return c.kv_source_of(layer) != layer; }

// The feed-forward width of a layer: doubled on KV-sharing layers of use_double_wide_mlp models.
int64_t ffn_width(const ModelConfig& c, int layer) {
  return int64_t(c.intermediate_size) * (c.double_wide_shared_mlp && c.kv_shared_from > 0 && layer >= c.kv_shared_from ? 2 : 1);
}

// The activations as this layer's widths see them (its own head width, KV heads, MLP width).
blocks::Activations layer_view(StepGraph& g, const LayerContext& c) {
  const ModelConfig& cfg = *c.config;
  const int layer = static_cast<int>(c.layer);
  const uint32_t n = c.n_tokens, NH = static_cast<uint32_t>(cfg.num_heads);
  const uint32_t D = static_cast<uint32_t>(cfg.head_dim_of(layer)), KV = static_cast<uint32_t>(cfg.kv_heads_of(layer));
  const uint32_t F = static_cast<uint32_t>(ffn_width(cfg, layer));
  blocks::Activations a = *c.act;
  if (D != static_cast<uint32_t>(cfg.head_dim) || KV != static_cast<uint32_t>(cfg.num_kv_heads)) {
    a.q = g.reshape(c.act->q, n, NH * D);
    a.k = g.reshape(c.act->k, n, KV * D);
    a.v = g.reshape(c.act->v, n, KV * D);
    a.q_heads = g.reshape(c.act->q, n * NH, D);
    a.k_heads = g.reshape(c.act->k, n * KV, D);
    a.v_heads = g.reshape(c.act->v, n * KV, D);
    a.attn = g.reshape(c.act->attn, n, NH * D);
  }
  if (F != static_cast<uint32_t>(cfg.intermediate_size)) {
    a.gate = g.reshape(c.act->gate, n, F);
    a.up = g.reshape(c.act->up, n, F);
    a.act = g.reshape(c.act->act, n, F);
  }
  return a;
}

}  // namespace

#define SLUICE_TRY SLUICE_TRY_STATUS

Status Gemma4::bind_model(WeightSource& src, const ModelConfig& c, ModelWeights& w) const {
  if (c.per_layer_input_width <= 0) return {};
  const int64_t H = c.hidden_size, LP = int64_t(c.num_layers) * c.per_layer_input_width;
  SLUICE_TRY(src.bind(w.per_layer_embed, "model.embed_tokens_per_layer.weight", {c.per_layer_vocab, LP}));
  SLUICE_TRY(src.bind(w.per_layer_projection, "model.per_layer_model_projection.weight", {LP, H}));
  SLUICE_TRY(src.bind(w.per_layer_norm, "model.per_layer_projection_norm.weight", {c.per_layer_input_width}));
  w.has_per_layer_inputs = true;
  return {};
}

void Gemma4::after_embed(StepGraph& g, const EmbedContext& c) const {
  if (!c.model->has_per_layer_inputs) return;
  const ModelConfig& cfg = *c.config;
  const blocks::Activations& a = *c.act;
  const float P = static_cast<float>(cfg.per_layer_input_width), H = static_cast<float>(cfg.hidden_size);
  g.embed(g.weight(c.model->per_layer_embed), c.ids, a.per_layer_tokens, "per-layer embedding");
  g.scale(a.per_layer_tokens, std::sqrt(P), 0.0f, a.per_layer_tokens, "per-layer embedding scale");
  g.matmul(a.x, g.weight(c.model->per_layer_projection), StepGraph::kNone, a.per_layer_all, "per-layer projection");
  g.scale(a.per_layer_all, 1.0f / std::sqrt(H), 0.0f, a.per_layer_all, "per-layer projection scale");
  g.rms_norm(a.per_layer_rows, g.weight(c.model->per_layer_norm), cfg.norm_eps, cfg.norm_weight_offset, a.per_layer_rows,
             "per-layer projection norm");
  g.add(a.per_layer_all, a.per_layer_tokens, a.per_layer_all, "per-layer inputs");
  g.scale(a.per_layer_all, 1.0f / std::sqrt(2.0f), 0.0f, a.per_layer_all, "per-layer inputs scale");
}

Status Gemma4::bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const {
  const int64_t H = c.hidden_size, D = c.head_dim_of(layer), KV = c.kv_heads_of(layer), F = ffn_width(c, layer);
  const int64_t QD = int64_t(c.num_heads) * D, KD = KV * D;
  const bool full = c.layer_type(layer) == LayerType::kFullAttention;
  const std::string p = layer_prefix(layer);
  SLUICE_TRY(src.bind(w.attn_norm, p + "input_layernorm.weight", {H}));
  SLUICE_TRY(src.bind(w.q, p + "self_attn.q_proj.weight", {QD, H}));
  SLUICE_TRY(src.bind(w.q_norm, p + "self_attn.q_norm.weight", {D}));
  SLUICE_TRY(src.bind_optional(w.q_bias, w.has_q_bias, p + "self_attn.q_proj.bias", {QD}));
  if (!shares_kv(c, layer)) {  // a KV-sharing layer has no K/V projections of its own
    SLUICE_TRY(src.bind(w.k, p + "self_attn.k_proj.weight", {KD, H}));
    SLUICE_TRY(src.bind(w.k_norm, p + "self_attn.k_norm.weight", {D}));
    SLUICE_TRY(src.bind_optional(w.k_bias, w.has_k_bias, p + "self_attn.k_proj.bias", {KD}));
    if (!(c.full_k_eq_v && full)) {
      SLUICE_TRY(src.bind(w.v, p + "self_attn.v_proj.weight", {KD, H}));
      SLUICE_TRY(src.bind_optional(w.v_bias, w.has_v_bias, p + "self_attn.v_proj.bias", {KD}));
    }
    SLUICE_TRY(src.constant(w.v_norm, std::vector<float>(static_cast<std::size_t>(D), 1.0f)));
    w.has_v_norm = true;
  }
  w.has_qk_norm = true;
  SLUICE_TRY(src.bind(w.o, p + "self_attn.o_proj.weight", {H, QD}));
  SLUICE_TRY(src.bind_optional(w.o_bias, w.has_o_bias, p + "self_attn.o_proj.bias", {H}));
  SLUICE_TRY(src.bind(w.post_attn_norm, p + "post_attention_layernorm.weight", {H}));
  SLUICE_TRY(src.bind(w.ffn_norm, p + "pre_feedforward_layernorm.weight", {H}));
  SLUICE_TRY(src.bind(w.post_ffn_norm, p + "post_feedforward_layernorm.weight", {H}));
  SLUICE_TRY(bind_gated_mlp(src, p, F, H, w));
  if (sparse) {  // the MoE block beside the MLP (the router's product and the experts are the driver's)
    SLUICE_TRY(src.bind(w.router_scale, p + "router.scale", {H}));
    auto scale = src.values(p + "router.per_expert_scale", {c.moe.n_experts});
    if (!scale) return scale.error();
    w.expert_scale = std::move(*scale);
    SLUICE_TRY(src.bind(w.post_ffn_norm_dense, p + "post_feedforward_layernorm_1.weight", {H}));
    SLUICE_TRY(src.bind(w.post_ffn_norm_experts, p + "post_feedforward_layernorm_2.weight", {H}));
    SLUICE_TRY(src.bind(w.pre_ffn_norm_experts, p + "pre_feedforward_layernorm_2.weight", {H}));
  }
  if (c.per_layer_input_width > 0) {
    const int64_t P = c.per_layer_input_width;
    SLUICE_TRY(src.bind(w.per_layer_gate, p + "per_layer_input_gate.weight", {P, H}));
    SLUICE_TRY(src.bind(w.per_layer_projection, p + "per_layer_projection.weight", {H, P}));
    SLUICE_TRY(src.bind(w.per_layer_norm, p + "post_per_layer_input_norm.weight", {H}));
    w.has_per_layer_input = true;
  }
  if (src.has(p + "layer_scalar")) {
    auto scale = src.scalar(p + "layer_scalar");
    if (!scale) return scale.error();
    if (!std::isfinite(*scale)) return make_error("tensor '" + p + "layer_scalar' is not finite");
    w.output_scale = *scale;
  }
  return {};
}

#undef SLUICE_TRY

void Gemma4::before_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  const ModelConfig& cfg = *c.config;
  const int layer = static_cast<int>(c.layer);
  const blocks::Activations a = layer_view(g, c);
  const float offset = cfg.norm_weight_offset;
  g.rms_norm(a.x, g.weight(w.attn_norm), cfg.norm_eps, offset, a.h, c.prefix + "attn_norm");
  const bool shared = shares_kv(cfg, layer), k_eq_v = cfg.full_k_eq_v && cfg.layer_type(layer) == LayerType::kFullAttention;
  blocks::AttentionWeights aw;
  aw.q = g.weight(w.q);
  aw.o = g.weight(w.o);
  aw.q_norm = g.weight(w.q_norm);
  if (w.has_q_bias) aw.q_bias = g.weight(w.q_bias);
  if (w.has_o_bias) aw.o_bias = g.weight(w.o_bias);
  if (!shared) {
    aw.k = g.weight(w.k);
    aw.k_norm = g.weight(w.k_norm);
    if (w.has_k_bias) aw.k_bias = g.weight(w.k_bias);
    if (!k_eq_v) aw.v = g.weight(w.v);
    if (!k_eq_v && w.has_v_bias) aw.v_bias = g.weight(w.v_bias);
    if (w.has_v_norm) aw.v_norm = g.weight(w.v_norm);
  }
  blocks::AttentionShape s;
  s.n_heads = static_cast<uint32_t>(cfg.num_heads);
  s.n_kv_heads = static_cast<uint32_t>(cfg.kv_heads_of(layer));
  s.head_dim = static_cast<uint32_t>(cfg.head_dim_of(layer));
  s.v_head_dim = s.head_dim;
  s.norm_eps = cfg.norm_eps;
  s.norm_offset = offset;
  s.rope = c.rope;
  s.window = w.window;
  s.scale = cfg.attention_scale;
  s.softcap = cfg.attention_softcap;
  s.value_from_key = k_eq_v;
  s.writes_kv = !shared;
  blocks::attention(g, a, aw, s, shared ? c.kv_cache_layer : c.cache_layer, c.prefix);
  g.rms_norm(a.o, g.weight(w.post_attn_norm), cfg.norm_eps, offset, a.o, c.prefix + "post_attn_norm");
  g.add(a.x, a.o, a.x, c.prefix + "attention residual");
  g.rms_norm(a.x, g.weight(w.ffn_norm), cfg.norm_eps, offset, a.h, c.prefix + "pre_ffn_norm");
}

void Gemma4::dense_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  const blocks::Activations a = layer_view(g, c);
  blocks::gated_mlp(g, a, g.weight(w.gate), g.weight(w.up), g.weight(w.down), activation(*c.config), c.prefix);
}

StepGraph::Id Gemma4::before_moe(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  const ModelConfig& cfg = *c.config;
  const blocks::Activations a = layer_view(g, c);
  const float offset = cfg.norm_weight_offset;
  blocks::gated_mlp(g, a, g.weight(w.gate), g.weight(w.up), g.weight(w.down), activation(cfg), c.prefix);
  g.rms_norm(a.o, g.weight(w.post_ffn_norm_dense), cfg.norm_eps, offset, a.dense_out, c.prefix + "post_ffn_norm_1");
  // The router reads the residual stream normed with its own scale and 1/sqrt(H); the experts read it
  // through their own pre-norm.
  g.rms_norm(a.x, g.weight(w.router_scale), cfg.norm_eps, offset, a.router_in, c.prefix + "router norm");
  g.scale(a.router_in, 1.0f / std::sqrt(static_cast<float>(cfg.hidden_size)), 0.0f, a.router_in, c.prefix + "router scale");
  g.rms_norm(a.x, g.weight(w.pre_ffn_norm_experts), cfg.norm_eps, offset, a.h, c.prefix + "pre_ffn_norm_2");
  return a.router_in;
}

void Gemma4::after_ffn(StepGraph& g, const LayerContext& c, const LayerWeights& w) const {
  const ModelConfig& cfg = *c.config;
  const blocks::Activations& a = *c.act;
  const float offset = cfg.norm_weight_offset;
  if (w.moe_index >= 0) {  // the experts' output normed, plus the MLP's kept output
    g.rms_norm(a.o, g.weight(w.post_ffn_norm_experts), cfg.norm_eps, offset, a.o, c.prefix + "post_ffn_norm_2");
    g.add(a.o, a.dense_out, a.o, c.prefix + "mlp + experts");
  }
  g.rms_norm(a.o, g.weight(w.post_ffn_norm), cfg.norm_eps, offset, a.o, c.prefix + "post_ffn_norm");
  g.add(a.x, a.o, a.x, c.prefix + "ffn residual");
  if (w.has_per_layer_input && c.per_layer_rows) {
    g.get_rows(a.per_layer_rows, g.host(c.per_layer_rows, 1, c.n_tokens, SL_DTYPE_I32), a.per_layer, c.prefix + "per-layer input");
    g.matmul(a.x, g.weight(w.per_layer_gate), StepGraph::kNone, a.per_layer_gate, c.prefix + "per-layer gate");
    g.glu(a.per_layer_gate, a.per_layer, activation(cfg), a.per_layer_gate, c.prefix + "per-layer activation");
    g.matmul(a.per_layer_gate, g.weight(w.per_layer_projection), StepGraph::kNone, a.o, c.prefix + "per-layer projection");
    g.rms_norm(a.o, g.weight(w.per_layer_norm), cfg.norm_eps, offset, a.o, c.prefix + "per-layer norm");
    g.add(a.x, a.o, a.x, c.prefix + "per-layer residual");
  }
  if (w.output_scale != 1.0f) g.scale(a.x, w.output_scale, 0.0f, a.x, c.prefix + "layer scale");
}

}  // namespace sluice::families
