// The forward pass as step graphs: for each stage, the family's nodes for its layers (the embedding
// on the first, the head on the last) in one graph run by the stage's backend; a Mixture-of-Experts
// layer splits it where the host routes (core/model/transformer.h).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/families/family.h"
#include "model/families/llama.h"  // activation()
#include "graph/moe_route.h"
#include "graph/stacked_weight.h"
#include "model/moe_routing.h"
#include "model/transformer.h"
#include "util/mxfp4.h"

namespace sluice {

void Transformer::declare_activations(Stage& st, PassGraph& pass, uint32_t n) const {
  const ModelConfig& c = config_;
  Activations& a = st.act;
  StepGraph& g = pass.graph;
  const uint32_t H = c.hidden_size, D = c.head_dim, NH = c.num_heads, NKV = c.num_kv_heads, DV = c.value_head_dim();
  const uint32_t F = static_cast<uint32_t>(std::max({c.intermediate_size, c.moe.expert_intermediate, c.moe.shared_intermediate}));
  blocks::Activations& t = pass.act;
  t.x = g.buffer(a.x.get(), n, H);
  t.h = g.buffer(a.h.get(), n, H);
  t.q = g.buffer(a.q.get(), n, NH * D);
  t.k = g.buffer(a.k.get(), n, NKV * D);
  t.v = g.buffer(a.v.get(), n, NKV * DV);
  t.q_heads = g.buffer(a.q.get(), n * NH, D);
  t.k_heads = g.buffer(a.k.get(), n * NKV, D);
  t.v_heads = g.buffer(a.v.get(), n * NKV, DV);
  if (c.moe.dense_beside) {
    t.dense_out = g.buffer(a.dense_out.get(), n, H);
    t.router_in = g.buffer(a.router_in.get(), n, H);
  }
  if (c.mla.enabled()) {
    const uint32_t QL = static_cast<uint32_t>(std::max(1, c.mla.q_lora_rank)), KL = static_cast<uint32_t>(c.mla.kv_lora_rank);
    const uint32_t R = static_cast<uint32_t>(c.mla.qk_rope_head_dim), KV = static_cast<uint32_t>(c.mla.qk_nope_head_dim) + DV;
    t.mla_q_latent = g.buffer(a.mla_q_latent.get(), n, QL);
    t.mla_q = g.buffer(a.mla_q.get(), n, NH * D);
    t.mla_q_heads = g.buffer(a.mla_q.get(), n * NH, D);
    t.mla_kv_latent = g.buffer(a.mla_kv_latent.get(), n, KL + R);
    t.mla_kv_normed = g.buffer(a.mla_kv_normed.get(), n, KL);
    t.mla_kv = g.buffer(a.mla_kv.get(), n, NH * KV);
    t.mla_kv_heads = g.buffer(a.mla_kv.get(), n * NH, KV);
    if (c.mla.latent_cache) {
      const uint32_t NOPE = static_cast<uint32_t>(c.mla.qk_nope_head_dim);
      t.mla_q_nope = g.buffer(a.mla_q_nope.get(), n, NH * NOPE);
      t.mla_q_nope_heads = g.buffer(a.mla_q_nope.get(), n * NH, NOPE);
      t.mla_q_pe = g.buffer(a.mla_q_pe.get(), n, NH * R);
      t.mla_q_pe_heads = g.buffer(a.mla_q_pe.get(), n * NH, R);
      t.mla_q_lat = g.buffer(a.mla_q_lat.get(), n, NH * KL);
      t.mla_q_lat_heads = g.buffer(a.mla_q_lat.get(), n * NH, KL);
      t.mla_query = g.buffer(a.mla_query.get(), n, NH * (KL + R));
      t.mla_query_heads = g.buffer(a.mla_query.get(), n * NH, KL + R);
      t.mla_k_pe = g.buffer(a.mla_k_pe.get(), n, R);
      t.mla_k = g.buffer(a.mla_k.get(), n, KL + R);
      t.mla_o_lat = g.buffer(a.mla_o_lat.get(), n, NH * KL);
    }
  }
  if (const uint32_t P = static_cast<uint32_t>(c.per_layer_input_width); P > 0) {
    const uint32_t L = static_cast<uint32_t>(c.num_layers);
    t.per_layer_all = g.buffer(a.per_layer_all.get(), n, L * P);
    t.per_layer_rows = g.buffer(a.per_layer_all.get(), n * L, P);
    t.per_layer_tokens = g.buffer(a.per_layer_tokens.get(), n, L * P);
    t.per_layer = g.buffer(a.per_layer.get(), n, P);
    t.per_layer_gate = g.buffer(a.per_layer_gate.get(), n, P);
  }
  t.attn = g.buffer(a.attn.get(), n, NH * DV);
  t.o = g.buffer(a.o.get(), n, H);
  const uint32_t ffn = c.moe.enabled() && c.intermediate_size <= 0 ? F : static_cast<uint32_t>(std::max(1, c.intermediate_size));
  t.gate = g.buffer(a.gate.get(), n, ffn);
  t.up = g.buffer(a.up.get(), n, ffn);
  t.act = g.buffer(a.act.get(), n, ffn);
  if (c.attention_output_gate) {
    t.q_gate = g.buffer(a.q_gate.get(), n, 2 * NH * D);
    t.q_gate_rows = g.buffer(a.q_gate.get(), 2 * n * NH, D);
    t.attn_gate = g.buffer(a.attn_gate.get(), n, NH * DV);
    t.attn_gate_heads = g.buffer(a.attn_gate.get(), n * NH, DV);
  }
  if (const LinearAttentionConfig& l = c.linear; l.conv_kernel > 0) {
    const uint32_t CD = static_cast<uint32_t>(l.conv_dim()), NV = static_cast<uint32_t>(l.n_v_heads), VD = static_cast<uint32_t>(l.value_dim());
    t.lin_qkv = g.buffer(a.lin_qkv.get(), n, CD);
    t.lin_conv = g.buffer(a.lin_conv.get(), n, CD);
    t.lin_z = g.buffer(a.lin_z.get(), n, VD);
    t.lin_a = g.buffer(a.lin_a.get(), n, NV);
    t.lin_b = g.buffer(a.lin_b.get(), n, NV);
    t.lin_core = g.buffer(a.lin_core.get(), n, VD);
    t.lin_core_heads = g.buffer(a.lin_core.get(), n * NV, static_cast<uint32_t>(l.v_head_dim));
  }
}

Status Transformer::flush(Stage& st, PassGraph& pass, uint32_t n) {
  if (!pass.graph.empty()) {
    sl_step step{};
    step.struct_size = sizeof(step);
    step.batch = &pass.batch;
    step.cache = pass.cache;
    if (auto s = st.backend->compute(pass.graph.view(), step); !s) return s;
  }
  pass.graph.clear();
  declare_activations(st, pass, n);
  return {};
}

Status Transformer::build_layer(Stage& st, PassGraph& pass, const Layer& L, uint32_t stage_layer, uint32_t n) {
  families::LayerContext ctx;
  ctx.config = &config_;
  ctx.act = &pass.act;
  ctx.rope.struct_size = sizeof(ctx.rope);
  const uint32_t layer = st.first + stage_layer;
  ctx.rope.rotary_dim = static_cast<uint32_t>(config_.rotary_dim_of(static_cast<int>(layer)));
  ctx.rope.style = SL_ROPE_NEOX;
  const RopeTable& table = pass.past_original_context && layer < layer_long_rope_.size() ? layer_long_rope_[layer] : layer_rope_[layer];
  ctx.rope.attention_factor = table.factor;
  ctx.rope.inv_freq = table.inv_freq.data();
  ctx.layer = layer;
  // Indices in the stage's cache layout, which holds only the layers that keep a cache of their own: a
  // KV-sharing layer's is its source's (it writes nothing; cache_layer is then unused).
  const int base = config_.cache_index(static_cast<int>(st.first));
  ctx.cache_layer = static_cast<uint32_t>(config_.cache_index(static_cast<int>(layer)) - base);
  ctx.kv_cache_layer = static_cast<uint32_t>(config_.cache_index(config_.kv_source_of(static_cast<int>(layer))) - base);
  ctx.n_tokens = n;
  if (!pass.per_layer_rows.empty()) ctx.per_layer_rows = pass.per_layer_rows.data() + std::size_t(layer) * n;
  ctx.n_seqs = pass.batch.n_seqs;
  ctx.prefix = "layer " + std::to_string(layer) + " ";
  family_->before_ffn(pass.graph, ctx, L);
  if (L.moe_index >= 0) {
    const StepGraph::Id router_input = family_->before_moe(pass.graph, ctx, L);
    if (auto s = build_moe(st, pass, L, n, router_input); !s) return s;
  } else {
    family_->dense_ffn(pass.graph, ctx, L);
  }
  family_->after_ffn(pass.graph, ctx, L);
  return {};
}

// Routing on the host (the expert ids are needed here anyway, to ask the store for them), by
// MoeConfig::routing: DeepSeek's sigmoid group-limited kind in core/model/moe_routing.cpp; here softmax
// over the experts' logits, the top k (ties to the lower index, as torch.topk), renormalised when the
// architecture says so — or (gpt-oss) the top k logits, then softmax over those k. The last two agree
// in exact arithmetic with renormalisation; each is computed in its model's order so the float32
// rounding is transformers'. Returns, per token, its (expert, weight) pairs.
std::vector<std::vector<std::pair<uint32_t, float>>> Transformer::route(const std::vector<float>& logits, uint32_t n,
                                                                        const std::vector<float>& expert_scale,
                                                                        const std::vector<float>& choice_bias) const {
  const auto& moe = config_.moe;
  if (moe.routing == MoeRouting::kSigmoidGroupLimited) return routing::sigmoid_group_limited(moe, logits, n, choice_bias);
  const uint32_t E = static_cast<uint32_t>(moe.n_experts), K = static_cast<uint32_t>(moe.top_k);
  const uint32_t kind = moe.routing == MoeRouting::kTopKSoftmax ? SL_ROUTE_TOPK_SOFTMAX : SL_ROUTE_SOFTMAX_TOPK;
  // Factors for every expert, or none (a layer's expert_scale may be absent or short).
  const float* factors = expert_scale.size() >= E ? expert_scale.data() : nullptr;
  std::vector<std::vector<std::pair<uint32_t, float>>> routes(n);
  graph::RouteScratch scratch;
  std::vector<uint32_t> ids(K);
  std::vector<float> weights(K);
  for (uint32_t t = 0; t < n; ++t) {
    graph::route_row(logits.data() + static_cast<std::size_t>(t) * E, E, K, kind, moe.normalize_top_k, factors, scratch, ids.data(),
                     weights.data());
    for (uint32_t i = 0; i < K; ++i) routes[t].emplace_back(ids[i], weights[i]);
  }
  return routes;
}

// The experts' activation: the family's, or gpt-oss's clamped SwiGLU with its parameters.
static sl_glu_params expert_activation(const ModelConfig& c) {
  sl_glu_params activation{};
  activation.activation = families::activation(c);
  if (c.moe.clamped_swiglu()) {
    activation.activation = SL_ACT_SWIGLU_CLAMPED;
    activation.alpha = c.moe.swiglu_alpha;
    activation.limit = c.moe.swiglu_limit;
  }
  return activation;
}

// Every token of h through the layer's shared experts' gated MLP (DeepSeek's, Qwen3.5's), into out.
void Transformer::shared_experts_mlp(Stage& st, PassGraph& pass, const Layer& L, uint32_t n, uint32_t activation,
                                     StepGraph::Id out) const {
  Activations& a = st.act;
  StepGraph& g = pass.graph;
  const uint32_t S = static_cast<uint32_t>(config_.moe.shared_intermediate);
  const StepGraph::Id gate = g.buffer(a.gate.get(), n, S), up = g.buffer(a.up.get(), n, S), act = g.buffer(a.act.get(), n, S);
  g.matmul(pass.act.h, g.weight(L.shared_gate), StepGraph::kNone, gate, "shared experts gate");
  g.matmul(pass.act.h, g.weight(L.shared_up), StepGraph::kNone, up, "shared experts up");
  g.glu(gate, up, activation, act, "shared experts activation");
  g.matmul(act, g.weight(L.shared_down), StepGraph::kNone, out, "shared experts down");
}

// o's starting value in a MoE block: the shared experts' MLP of every token (DeepSeek), else zeros (a
// gated shared expert, Qwen3.5's, is added after the routed ones instead).
void Transformer::start_moe_output(Stage& st, PassGraph& pass, const Layer& L, uint32_t n, bool shared_gated) const {
  const ModelConfig& c = config_;
  Activations& a = st.act;
  StepGraph& g = pass.graph;
  if (L.has_shared_experts && !shared_gated) {
    shared_experts_mlp(st, pass, L, n, families::activation(c), pass.act.o);
  } else {
    g.copy(g.buffer(a.zeros.get(), n, c.hidden_size), pass.act.o, "moe zero");
  }
}

// A MoE block: the router (and the next MoE layer's, whose guess at its experts starts the store's
// prefetch so its reads overlap this layer's compute) ends the graph; the host routes every token and
// fetches the routed experts; a new graph zeroes o and, per expert, gathers its rows, runs its gated
// MLP and adds the weighted result into o.
Status Transformer::build_moe(Stage& st, PassGraph& pass, const Layer& L, uint32_t n, StepGraph::Id router_input) {
  if (!store_) return make_error("a Mixture-of-Experts model needs an expert store");
  const ModelConfig& c = config_;
  const BackendHandle& backend = *st.backend;
  Activations& a = st.act;
  const uint32_t H = c.hidden_size, F = c.moe.expert_intermediate, E = static_cast<uint32_t>(c.moe.n_experts);
  const uint32_t moe_layer = static_cast<uint32_t>(L.moe_index);
  const auto bound_it = st.bound_experts.find(moe_layer);
  const BoundExperts* bound = bound_it != st.bound_experts.end() ? &bound_it->second : nullptr;
  if (bound && bound->device_routing && device_routing_allowed_ && n <= kDeviceRoutedTokens)
    return build_moe_on_device(st, pass, L, *bound, n, router_input);
  StepGraph& g = pass.graph;
  g.matmul(router_input, g.weight(L.router), L.has_router_bias ? g.weight(L.router_bias) : StepGraph::kNone,
           g.buffer(a.router_logits.get(), n, E), "router");
  const sl_weight *next_router = nullptr, *next_bias = nullptr;
  uint32_t next_layer = UINT32_MAX;
  if (moe_layer + 1 < experts_->n_moe_layers()) {
    next_layer = static_cast<uint32_t>(experts_->model_layer(moe_layer + 1));
    if (next_layer < st.end) {
      next_router = &layers_[next_layer].router;
      if (layers_[next_layer].has_router_bias) next_bias = &layers_[next_layer].router_bias;
    } else if (st.has_next_router) {
      next_router = &st.next_router;
      if (c.moe.router_bias) next_bias = &st.next_router_bias;
    }
  }
  if (next_router)
    g.matmul(router_input, g.weight(*next_router), next_bias ? g.weight(*next_bias) : StepGraph::kNone,
             g.buffer(a.next_router_logits.get(), n, E), "next router");
  const bool shared_gated = L.has_shared_experts && c.moe.shared_gated;
  if (shared_gated)  // its gate's logit, read back with the router's
    g.matmul(pass.act.h, g.weight(L.shared_expert_gate), StepGraph::kNone, g.buffer(a.shared_gate_logits.get(), n, 1), "shared expert gate");
  if (auto s = flush(st, pass, n); !s) return s;

  std::vector<float> logits(static_cast<std::size_t>(n) * E);
  if (auto s = backend.download(a.router_logits, 0, logits.data(), logits.size() * 4); !s) return s;
  std::vector<float> shared_weights;
  if (shared_gated) {
    shared_weights.resize(n);
    if (auto s = backend.download(a.shared_gate_logits, 0, shared_weights.data(), uint64_t(n) * 4); !s) return s;
    for (float& w : shared_weights) w = 1.0f / (1.0f + std::exp(-w));  // sigmoid, as transformers gates it
  }
  if (next_router) {
    std::vector<float> guess_logits(logits.size());
    if (auto s = backend.download(a.next_router_logits, 0, guess_logits.data(), guess_logits.size() * 4); !s) return s;
    std::vector<bool> want(E, false);
    const std::vector<float> no_bias;
    const std::vector<float>& next_choice_bias = next_layer < st.end ? layers_[next_layer].router_choice_bias : no_bias;
    for (const auto& r : route(guess_logits, n, {}, next_choice_bias))
      for (auto [e, w] : r) want[e] = true;
    std::vector<uint32_t> hint;
    for (uint32_t e = 0; e < E; ++e)
      if (want[e]) hint.push_back(e);
    store_->prefetch(moe_layer + 1, hint);
  }
  const auto routes = route(logits, n, L.expert_scale, L.router_choice_bias);
  std::vector<std::vector<int32_t>> rows(E);
  std::vector<std::vector<float>> weights(E);
  for (uint32_t t = 0; t < n; ++t)
    for (auto [e, w] : routes[t]) {
      rows[e].push_back(static_cast<int32_t>(t));
      weights[e].push_back(w);
    }
  std::vector<uint32_t> used;
  for (uint32_t e = 0; e < E; ++e)
    if (!rows[e].empty()) used.push_back(e);

  std::vector<const void*> parts;
  if (auto s = store_->acquire(moe_layer, used, parts); !s) return s;
  struct Release {
    ExpertStoreHandle* store;
    uint32_t layer;
    const std::vector<uint32_t>& experts;
    ~Release() { store->release(layer, experts); }
  } release{store_, moe_layer, used};

  start_moe_output(st, pass, L, n, shared_gated);
  const bool fused = experts_->form() != ExpertLayout::Form::kSeparate;
  const uint32_t per_part = fused ? 1 : experts_->n_parts() / 3;
  const sl_glu_params activation = expert_activation(c);
  for (std::size_t i = 0; i < used.size(); ++i) {
    const uint32_t e = used[i];
    const uint32_t m = static_cast<uint32_t>(rows[e].size());
    // The expert's weights wrapped for the backend (zero-copy on the CPU; an upload on a device): its
    // parts as the store hands them back, or their rearrangement (the fused form).
    sl_weight w[3]{}, bias[3]{};
    const std::size_t first_buffer = pass.keep.size();
    if (fused) {
      ArrangedExpert& x = pass.arranged.emplace_back();
      arrange_expert(*experts_, moe_layer, &parts[i * experts_->n_parts()], st.mxfp4_experts, x);
      // The three products' values (or MXFP4 codes), the biases, then the MXFP4 scales.
      std::vector<ArrangedExpert::Span> pieces = {x.weight(0), x.weight(1), x.weight(2), {x.gate_bias.data(), x.gate_bias.size() * 4},
                                                  {x.up_bias.data(), x.up_bias.size() * 4}, {x.down_bias.data(), x.down_bias.size() * 4}};
      if (x.mxfp4)
        for (uint32_t p = 0; p < 3; ++p) pieces.push_back(x.scales(p));
      for (const auto& [data, bytes] : pieces) {
        auto buf = backend.wrap_host(data, bytes);
        if (!buf) return buf.error();
        pass.keep.push_back(std::move(*buf));
      }
      for (uint32_t p = 0; p < 3; ++p) {
        bias[p].struct_size = sizeof(sl_weight);
        bias[p].data = pass.keep[first_buffer + 3 + p].get();
        bias[p].dtype = SL_DTYPE_F32;
        bias[p].rows = 1;
        bias[p].cols = p == 2 ? H : F;
      }
    }
    // The separate form's parts: bound once where the store's memory stays put (attach_expert_store), else
    // wrapped for this pass.
    std::vector<sl_buffer*> part_buffers;
    std::vector<uint64_t> part_offsets(experts_->n_parts(), 0);
    if (!fused) {
      if (bound && bound->stacked_form()) {  // expert e of each stack
        for (uint32_t index = 0; index < experts_->n_parts(); ++index) {
          part_buffers.push_back(bound->stacks[index].get());
          part_offsets[index] = uint64_t(e) * bound->strides[index];
        }
      } else if (bound) {
        for (const Buffer& b : bound->per_expert[e]) part_buffers.push_back(b.get());
      } else {
        for (uint32_t index = 0; index < experts_->n_parts(); ++index) {
          auto buf = backend.wrap_host(parts[i * experts_->n_parts() + index], experts_->part(moe_layer, e, index).bytes);
          if (!buf) return buf.error();
          part_buffers.push_back(buf->get());
          pass.keep.push_back(std::move(*buf));
        }
      }
    }
    for (uint32_t p = 0; p < 3; ++p) {
      const auto& proj = experts_->projection(moe_layer, static_cast<ExpertLayout::Projection>(p));
      sl_weight& wp = w[p];
      wp.struct_size = sizeof(sl_weight);
      wp.data = fused ? pass.keep[first_buffer + p].get() : part_buffers[p * per_part];
      wp.offset = fused ? 0 : part_offsets[p * per_part];
      wp.dtype = proj.dtype;
      wp.rows = proj.rows;
      wp.cols = proj.cols;
      if (fused && st.mxfp4_experts) {  // ABI 2.3's form (sluice/graph.h), codes and scales wrapped above
        wp.dtype = SL_DTYPE_E2M1;
        wp.bits = 4;
        wp.group_size = mxfp4::kBlock;
        wp.scale_dtype = SL_DTYPE_E8M0;
        wp.scales = pass.keep[first_buffer + 6 + p].get();
      } else if (!fused && proj.quantized()) {
        wp.bits = proj.bits;
        wp.group_size = proj.group_size;
        wp.scale_dtype = proj.scale_dtype;
        wp.scales = part_buffers[p * per_part + 1];
        wp.scales_offset = part_offsets[p * per_part + 1];
        wp.biases = part_buffers[p * per_part + 2];
        wp.biases_offset = part_offsets[p * per_part + 2];
      }
    }
    const std::string prefix = "expert " + std::to_string(e) + " ";
    const auto& r = pass.rows.emplace_back(std::move(rows[e]));
    const auto& wt = pass.weights.emplace_back(std::move(weights[e]));
    // An expert every token of the pass was routed to (each decode step's, one token) reads the
    // block's input as it is: its rows are 0..n-1 in order (pushed by token, an expert once a token).
    const bool every_row = m == n;
    const StepGraph::Id in = every_row ? pass.act.h : g.buffer(a.expert_in.get(), m, H), out = g.buffer(a.expert_out.get(), m, H);
    const StepGraph::Id gate = g.buffer(a.gate.get(), m, F), up = g.buffer(a.up.get(), m, F), act = g.buffer(a.act.get(), m, F);
    if (!every_row) g.get_rows(pass.act.h, g.host(r.data(), 1, m, SL_DTYPE_I32), in, prefix + "gather");
    auto bias_of = [&](uint32_t p) { return fused ? g.weight(bias[p]) : StepGraph::kNone; };
    g.matmul(in, g.weight(w[0]), bias_of(0), gate, prefix + "gate");
    g.matmul(in, g.weight(w[1]), bias_of(1), up, prefix + "up");
    g.glu(gate, up, activation, act, prefix + "activation");
    g.matmul(act, g.weight(w[2]), bias_of(2), out, prefix + "down");
    g.scatter_add_rows(out, g.host(r.data(), 1, m, SL_DTYPE_I32), g.host(wt.data(), 1, m, SL_DTYPE_F32), pass.act.o,
                       prefix + "scatter");
  }
  // The shared expert (Qwen3.5-MoE): every token through its gated MLP, added times its sigmoid gate.
  if (shared_gated) {
    std::vector<int32_t> all(n);
    std::iota(all.begin(), all.end(), 0);
    const auto& r = pass.rows.emplace_back(std::move(all));
    const auto& wt = pass.weights.emplace_back(std::move(shared_weights));
    const StepGraph::Id out = g.buffer(a.expert_out.get(), n, H);
    shared_experts_mlp(st, pass, L, n, SL_ACT_SILU, out);
    g.scatter_add_rows(out, g.host(r.data(), 1, n, SL_DTYPE_I32), g.host(wt.data(), 1, n, SL_DTYPE_F32), pass.act.o, "shared expert add");
  }
  // Experts wrapped for this pass are host memory the store lends until release: run them now and
  // wait. Bound ones (attach_expert_store) are the mapped files themselves — nothing to wait for, so
  // the host goes on issuing the next layer while these run (host arrays are read during the call).
  const bool borrowed = !pass.keep.empty() || !pass.arranged.empty();
  if (auto s = flush(st, pass, n); !s) return s;
  if (borrowed)
    if (auto s = backend.synchronize(); !s) return s;
  pass.keep.clear();
  pass.rows.clear();
  pass.weights.clear();
  pass.arranged.clear();
  return {};
}

// A MoE block whose experts are chosen on the device: the router's logits become each token's k
// (expert, weight) pairs there (MOE_ROUTE, in increasing expert order, the order the host adds them
// in), the k products of every projection are one launch each over the stacked experts (MATMUL_ID),
// and their weighted sum lands in o (MOE_COMBINE). The host reads nothing, so it goes on building the
// next layer while the device runs this one.
Status Transformer::build_moe_on_device(Stage& st, PassGraph& pass, const Layer& L, const BoundExperts& bound, uint32_t n,
                                        StepGraph::Id router_input) {
  const ModelConfig& c = config_;
  const BackendHandle& backend = *st.backend;
  Activations& a = st.act;
  const uint32_t H = c.hidden_size, F = c.moe.expert_intermediate, E = static_cast<uint32_t>(c.moe.n_experts);
  const uint32_t K = static_cast<uint32_t>(c.moe.top_k);
  if (n > a.capacity_routed) {
    auto grow = [&](Buffer& b, uint64_t floats) -> Status {
      auto nb = backend.alloc(std::max<uint64_t>(floats, 1) * 4);
      if (!nb) return nb.error();
      b = std::move(*nb);
      return {};
    };
    const uint64_t slots = uint64_t(n) * K;
    for (auto [buf, size] : {std::pair{&a.route_ids, slots}, {&a.route_weights, slots}, {&a.slot_gate, slots * F}, {&a.slot_up, slots * F},
                             {&a.slot_out, slots * H}, {&a.ones, uint64_t(n)}, {&a.shared_gate_weights, uint64_t(n)}})
      if (auto s = grow(*buf, size); !s) return s;
    const std::vector<float> ones(n, 1.0f);
    if (auto s = backend.upload(a.ones, 0, ones.data(), uint64_t(n) * 4); !s) return s;
    a.capacity_routed = n;
  }
  StepGraph& g = pass.graph;
  const StepGraph::Id logits = g.buffer(a.router_logits.get(), n, E);
  g.matmul(router_input, g.weight(L.router), L.has_router_bias ? g.weight(L.router_bias) : StepGraph::kNone, logits, "router");
  sl_moe_route_params route{};
  route.k = K;
  route.kind = c.moe.routing == MoeRouting::kTopKSoftmax ? SL_ROUTE_TOPK_SOFTMAX : SL_ROUTE_SOFTMAX_TOPK;
  route.normalize = c.moe.normalize_top_k ? 1 : 0;
  const StepGraph::Id ids = g.buffer(a.route_ids.get(), n, K, SL_DTYPE_I32), weights = g.buffer(a.route_weights.get(), n, K);
  g.moe_route(logits, bound.factors.data ? g.weight(bound.factors) : StepGraph::kNone, route, ids, weights, "route");
  const bool shared_gated = L.has_shared_experts && c.moe.shared_gated;
  start_moe_output(st, pass, L, n, shared_gated);
  const sl_glu_params activation = expert_activation(c);
  const StepGraph::Id gate = g.buffer(a.slot_gate.get(), n * K, F), up = g.buffer(a.slot_up.get(), n * K, F);
  const StepGraph::Id out = g.buffer(a.slot_out.get(), n * K, H);
  g.matmul_id(pass.act.h, g.weight(bound.stacked[0]), ids, E, gate, "experts gate");
  g.matmul_id(pass.act.h, g.weight(bound.stacked[1]), ids, E, up, "experts up");
  g.glu(gate, up, activation, gate, "experts activation");
  g.matmul_id(gate, g.weight(bound.stacked[2]), ids, E, out, "experts down");
  g.moe_combine(out, weights, pass.act.o, "experts combine");
  if (shared_gated) {  // the shared expert (Qwen3.5-MoE): every token's MLP added times the sigmoid of its gate
    const StepGraph::Id logit = g.buffer(a.shared_gate_logits.get(), n, 1), w = g.buffer(a.shared_gate_weights.get(), n, 1);
    g.matmul(pass.act.h, g.weight(L.shared_expert_gate), StepGraph::kNone, logit, "shared expert gate");
    g.glu(logit, g.buffer(a.ones.get(), n, 1), SL_ACT_SIGMOID, w, "shared expert sigmoid");
    const StepGraph::Id so = g.buffer(a.expert_out.get(), n, H);
    shared_experts_mlp(st, pass, L, n, SL_ACT_SILU, so);
    g.moe_combine(so, w, pass.act.o, "shared expert add");
  }
  return {};
}

void Transformer::build_head(Stage& st, PassGraph& pass, const ForwardBatch& batch, uint32_t n) {
  Activations& a = st.act;
  StepGraph& g = pass.graph;
  const uint32_t H = config_.hidden_size, rows = static_cast<uint32_t>(batch.logit_rows.size());
  bool every_row = rows == n;
  for (uint32_t i = 0; every_row && i < n; ++i) every_row = batch.logit_rows[i] == i;
  StepGraph::Id source = pass.act.x;
  if (!every_row) {  // the rows that need logits, in order
    source = g.buffer(a.last.get(), rows, H);
    g.get_rows(pass.act.x, g.host(batch.logit_rows.data(), 1, rows, SL_DTYPE_I32), source, "head rows");
  }
  const StepGraph::Id normed = g.buffer(a.last_norm.get(), rows, H);
  g.rms_norm(source, g.weight(final_norm_), config_.norm_eps, config_.norm_weight_offset, normed, "final norm");
  const StepGraph::Id logits = g.buffer(a.logits.get(), rows, config_.vocab_size);
  g.matmul(normed, g.weight(lm_head_), StepGraph::kNone, logits, "lm_head");
  if (config_.final_logit_softcap > 0) g.scale(logits, 1.0f, config_.final_logit_softcap, logits, "logit softcap");
}

Status Transformer::run_layers(const ForwardBatch& batch, std::span<sl_kv_cache* const> caches, int from_slot, PassGraph& last) {
  const uint32_t n = static_cast<uint32_t>(batch.tokens.size());
  if (n == 0) return make_error("forward: empty batch");
  if (batch.positions.size() != n || batch.seq_slots.size() != n)
    return make_error("forward: tokens, positions and sequence slots differ in length");
  for (uint32_t r : batch.logit_rows)
    if (r >= n) return make_error("forward: logit row out of range");
  if (caches.size() != stages_.size())
    return make_error("forward: the model runs on " + std::to_string(stages_.size()) + " backends and needs one KV cache for each, got " +
                      std::to_string(caches.size()));
  if (!batch.recent_table.empty() && batch.recent_table.size() != batch.page_table.size())
    return make_error("forward: recent table and page table differ in size");
  if (!batch.window_table.empty() && batch.window_table.size() != batch.page_table.size())
    return make_error("forward: window table and page table differ in size");
  if (!batch.state_slots.empty() && batch.state_slots.size() != batch.n_seqs)
    return make_error("forward: a state slot for each sequence");
  const uint32_t n_logits = static_cast<uint32_t>(batch.logit_rows.size());
  for (auto& st : stages_)
    if (auto s = ensure_activations(st, n, st.has_head ? std::max(1u, n_logits) : 0); !s) return s;

  sl_batch b{};
  b.struct_size = sizeof(b);
  b.n_tokens = n;
  b.positions = batch.positions.data();
  b.seq_slots = batch.seq_slots.data();
  b.n_seqs = batch.n_seqs;
  b.max_pages = batch.max_pages;
  b.page_table = batch.page_table.data();
  b.recent_table = batch.recent_table.empty() ? nullptr : batch.recent_table.data();
  b.window_table = batch.window_table.empty() ? nullptr : batch.window_table.data();
  b.state_slots = batch.state_slots.empty() ? nullptr : batch.state_slots.data();

  // transformers switches longrope to its long factors for a pass whose positions pass the trained context.
  bool past_original = false;
  for (int32_t p : batch.positions) past_original |= p + 1 > config_.rope.original_max_position;

  const uint64_t hidden_bytes = uint64_t(n) * config_.hidden_size * 4;
  for (std::size_t s = 0; s < stages_.size(); ++s) {
    Stage& st = stages_[s];
    PassGraph local;
    PassGraph& pass = s + 1 == stages_.size() ? last : local;
    pass.batch = b;
    pass.cache = caches[s];
    pass.past_original_context = past_original;
    pass.per_layer_rows.clear();
    if (const uint32_t L = static_cast<uint32_t>(config_.num_layers); config_.per_layer_input_width > 0) {
      pass.per_layer_rows.resize(std::size_t(L) * n);  // layer i's input for token t is row t·L + i of [n·L, P]
      for (uint32_t i = 0; i < L; ++i)
        for (uint32_t t = 0; t < n; ++t) pass.per_layer_rows[std::size_t(i) * n + t] = static_cast<int32_t>(t * L + i);
    }
    pass.graph.clear();
    declare_activations(st, pass, n);
    if (s == 0) {
      StepGraph& g = pass.graph;
      const StepGraph::Id ids = from_slot < 0 ? g.host(batch.tokens.data(), 1, n, SL_DTYPE_I32)
                                              : g.buffer(greedy_ids_.get(), 1, n, SL_DTYPE_I32,
                                                         uint64_t(from_slot) * greedy_capacity_ * sizeof(int32_t));
      g.embed(g.weight(embed_), ids, pass.act.x);
      if (config_.embed_scale > 0) g.scale(pass.act.x, config_.embed_scale, 0.0f, pass.act.x, "embedding scale");
      families::EmbedContext ectx;
      ectx.config = &config_;
      ectx.act = &pass.act;
      ectx.model = &model_weights_;
      ectx.ids = ids;
      family_->after_embed(g, ectx);
    } else {  // the hidden state moves to the next backend through host memory
      hidden_.resize(hidden_bytes / 4);
      if (auto r = stages_[s - 1].backend->download(stages_[s - 1].act.x, 0, hidden_.data(), hidden_bytes); !r) return r;
      if (auto r = st.backend->upload(st.act.x, 0, hidden_.data(), hidden_bytes); !r) return r;
      if (config_.per_layer_input_width > 0) {  // and every layer's per-layer input
        const uint64_t bytes = uint64_t(n) * config_.num_layers * config_.per_layer_input_width * 4;
        per_layer_host_.resize(bytes / 4);
        if (auto r = stages_[s - 1].backend->download(stages_[s - 1].act.per_layer_all, 0, per_layer_host_.data(), bytes); !r) return r;
        if (auto r = st.backend->upload(st.act.per_layer_all, 0, per_layer_host_.data(), bytes); !r) return r;
      }
    }
    for (uint32_t i = st.first; i < st.end; ++i)
      if (auto r = build_layer(st, pass, layers_[i], i - st.first, n); !r) return r;
    if (s + 1 < stages_.size())
      if (auto r = flush(st, pass, n); !r) return r;
  }
  return {};
}

Status Transformer::forward(const ForwardBatch& batch, sl_kv_cache* cache, std::vector<float>& logits) {
  return forward(batch, std::span<sl_kv_cache* const>(&cache, 1), logits);
}

Status Transformer::forward(const ForwardBatch& batch, std::span<sl_kv_cache* const> caches, std::vector<float>& logits) {
  PassGraph pass;
  if (auto s = run_layers(batch, caches, -1, pass); !s) return s;
  Stage& st = stages_.back();
  const uint32_t n = static_cast<uint32_t>(batch.tokens.size());
  if (!batch.logit_rows.empty()) build_head(st, pass, batch, n);
  if (auto s = flush(st, pass, n); !s) return s;
  if (batch.logit_rows.empty()) {
    logits.clear();
    for (const auto& stage : stages_)
      if (auto s = stage.backend->synchronize(); !s) return s;
    return {};
  }
  logits.resize(batch.logit_rows.size() * config_.vocab_size);
  return st.backend->download(st.act.logits, 0, logits.data(), logits.size() * 4);
}

bool Transformer::greedy_on_device() const {
  if (stages_.size() != 1) return false;  // the choice would have to cross devices
  // Ask the backend about the two nodes the greedy pass adds: ARGMAX of the logits into a device
  // buffer, EMBED of ids read from one.
  StepGraph g;
  const BackendHandle& be = *stages_.front().backend;
  const StepGraph::Id ids = g.buffer(nullptr, 1, 1, SL_DTYPE_I32), rows = g.buffer(nullptr, 1, config_.vocab_size);
  g.argmax(rows, ids, "argmax");
  g.embed(g.weight(embed_), ids, g.buffer(nullptr, 1, config_.hidden_size));
  const sl_graph& view = g.view();
  std::span<const sl_tensor> tensors(view.tensors, view.n_tensors);
  return be.supports(view.nodes[0], tensors) && be.supports(view.nodes[1], tensors);
}

Status Transformer::forward_greedy(const ForwardBatch& batch, sl_kv_cache* cache, int from_slot, uint32_t to_slot) {
  if (!greedy_on_device()) return make_error("forward_greedy: the backend cannot keep a greedy choice on the device");
  if (to_slot >= kGreedySlots || from_slot >= static_cast<int>(kGreedySlots) || from_slot == static_cast<int>(to_slot))
    return make_error("forward_greedy: bad slots");
  const uint32_t n = static_cast<uint32_t>(batch.tokens.size());
  if (n == 0 || batch.logit_rows.size() != n) return make_error("forward_greedy: a greedy pass picks one token for each of its rows");
  for (uint32_t i = 0; i < n; ++i)
    if (batch.logit_rows[i] != i) return make_error("forward_greedy: the logit rows must be the batch's rows in order");
  if (from_slot >= 0 && greedy_host_[from_slot].size() != n)
    return make_error("forward_greedy: the tokens from the device are the " + std::to_string(greedy_host_[from_slot].size()) +
                      " choices of the pass before");
  if (greedy_ticket_[to_slot] != 0) return make_error("forward_greedy: slot " + std::to_string(to_slot) + " is still in flight");
  Stage& st = stages_.front();
  const BackendHandle& backend = *st.backend;
  if (n > greedy_capacity_) {
    for (uint64_t t : greedy_ticket_)
      if (t != 0) return make_error("forward_greedy: a wider pass while passes are in flight");
    const uint32_t capacity = std::max(n, 2 * greedy_capacity_);
    auto b = backend.alloc(uint64_t(kGreedySlots) * capacity * sizeof(int32_t));
    if (!b) return b.error();
    greedy_ids_ = std::move(*b);
    greedy_capacity_ = capacity;
  }
  PassGraph pass;
  if (auto s = run_layers(batch, std::span<sl_kv_cache* const>(&cache, 1), from_slot, pass); !s) return s;
  build_head(st, pass, batch, n);
  StepGraph& g = pass.graph;
  const uint64_t to_offset = uint64_t(to_slot) * greedy_capacity_ * sizeof(int32_t);
  g.argmax(g.buffer(st.act.logits.get(), n, config_.vocab_size), g.buffer(greedy_ids_.get(), 1, n, SL_DTYPE_I32, to_offset), "argmax");
  if (auto s = flush(st, pass, n); !s) return s;
  greedy_host_[to_slot].assign(n, 0);
  auto ticket = backend.download_begin(greedy_ids_, to_offset, greedy_host_[to_slot].data(), n * sizeof(int32_t));
  if (!ticket) return ticket.error();
  greedy_ticket_[to_slot] = *ticket;
  return {};
}

Result<std::vector<int32_t>> Transformer::greedy_choices(uint32_t slot) {
  if (slot >= kGreedySlots || greedy_ticket_[slot] == 0) return make_error("greedy_choice: no pass in flight in slot " + std::to_string(slot));
  const BackendHandle& backend = *stages_.front().backend;
  const uint64_t ticket = greedy_ticket_[slot];
  greedy_ticket_[slot] = 0;
  if (auto s = backend.download_wait(ticket); !s) return s.error();
  return greedy_host_[slot];
}

Result<int32_t> Transformer::greedy_choice(uint32_t slot) {
  auto ids = greedy_choices(slot);
  if (!ids) return ids.error();
  if (ids->size() != 1) return make_error("greedy_choice: the pass in slot " + std::to_string(slot) + " picked " + std::to_string(ids->size()) + " tokens");
  return ids->front();
}

}  // namespace sluice
