#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "plugin/plugin_registry.h"

namespace sluice {
namespace {

Result<sl_dtype> backend_dtype(DType d, const std::string& name) {
  switch (d) {
    case DType::kF32: return SL_DTYPE_F32;
    case DType::kF16: return SL_DTYPE_F16;
    case DType::kBF16: return SL_DTYPE_BF16;
    default: return make_error("tensor '" + name + "': dtype " + to_string(d) + " cannot be used as a weight");
  }
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

// Where tensor t lies for the stage: its span's buffer and the offset in it. While recording, notes
// that the stage needs t (and answers no buffer).
Result<sl_buffer*> Transformer::locate(Stage& st, const TensorInfo& t, uint64_t& offset) const {
  offset = 0;
  if (st.recording) {
    st.used.push_back(&t);
    return static_cast<sl_buffer*>(nullptr);
  }
  for (const auto& s : st.spans)
    if (s.file == t.file_index && s.begin <= t.file_offset && t.file_offset + t.bytes <= s.end) {
      offset = t.file_offset - s.begin;
      return s.buffer.get();
    }
  return make_error("tensor '" + t.name + "' was not among the weights wrapped for backend '" + st.backend->name() + "'");
}

Result<sl_weight> Transformer::bind(const SafetensorsSet& tensors, Stage& st, const std::string& name,
                                    std::vector<int64_t> shape) const {
  const TensorInfo* t = tensors.find(name);
  if (!t) return make_error("model is missing tensor '" + name + "'");
  const std::string module = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
  if (tensors.find(module + ".scales")) return bind_quantized(tensors, st, module, *t, shape);
  if (t->shape != shape)
    return make_error("tensor '" + name + "' has shape " + shape_text(t->shape) + ", expected " + shape_text(shape));
  auto dtype = backend_dtype(t->dtype, name);
  if (!dtype) return dtype.error();
  sl_weight w{};
  w.struct_size = sizeof(sl_weight);
  auto data = locate(st, *t, w.offset);
  if (!data) return data.error();
  w.data = *data;
  w.dtype = *dtype;
  w.rows = shape.size() == 2 ? static_cast<uint32_t>(shape[0]) : 1;
  w.cols = static_cast<uint32_t>(shape.back());
  return w;
}

// An MLX affine-quantized module: `weight` U32 [rows, cols * bits / 32], `scales` and `biases`
// [rows, cols / group_size] in f32/f16/bf16. Bits and group size come from the config's quantization
// block (per-module override first); where it has none they are read off the shapes.
Result<sl_weight> Transformer::bind_quantized(const SafetensorsSet& tensors, Stage& st, const std::string& module,
                                              const TensorInfo& t, const std::vector<int64_t>& shape) const {
  const std::string wname = module + ".weight", sname = module + ".scales", bname = module + ".biases";
  const TensorInfo* sc = tensors.find(sname);
  const TensorInfo* bi = tensors.find(bname);
  if (shape.size() != 2) return make_error("tensor '" + sname + "': a vector weight cannot be quantized");
  if (!bi) return make_error("tensor '" + sname + "' exists but '" + bname + "' is missing");
  if (t.dtype != DType::kU32)
    return make_error("tensor '" + wname + "' has scales, so it must be U32 packed words, not " + to_string(t.dtype));
  const int64_t rows = shape[0], cols = shape[1];
  if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] <= 0)
    return make_error("tensor '" + wname + "' has shape " + shape_text(t.shape) + ", expected [" + std::to_string(rows) +
                      ", cols * bits / 32] packing " + shape_text(shape));
  if (sc->shape.size() != 2 || sc->shape[0] != rows || sc->shape[1] <= 0)
    return make_error("tensor '" + sname + "' has shape " + shape_text(sc->shape) + ", expected [" +
                      std::to_string(rows) + ", groups per row]");
  ModuleQuantization q = config_.quantization.for_module(module);
  if (q.bits == 0) {  // no config entry: read the form off the shapes
    if ((t.shape[1] * 32) % cols != 0 || cols % sc->shape[1] != 0)
      return make_error("tensor '" + wname + "': shapes " + shape_text(t.shape) + " and " + shape_text(sc->shape) +
                        " do not describe a quantization of " + shape_text(shape));
    q.bits = static_cast<int>(t.shape[1] * 32 / cols);
    q.group_size = static_cast<int>(cols / sc->shape[1]);
  }
  const bool bits_ok = q.bits == 2 || q.bits == 3 || q.bits == 4 || q.bits == 5 || q.bits == 6 || q.bits == 8;
  if (!bits_ok) return make_error("tensor '" + wname + "': " + std::to_string(q.bits) + "-bit quantization is not supported (2, 3, 4, 5, 6, 8)");
  if (q.group_size <= 0 || cols % q.group_size != 0 || (int64_t(q.group_size) * q.bits) % 32 != 0)
    return make_error("tensor '" + wname + "': group size " + std::to_string(q.group_size) + " does not divide " +
                      std::to_string(cols) + " columns into whole words");
  const std::vector<int64_t> packed{rows, cols * q.bits / 32}, params{rows, cols / q.group_size};
  if (t.shape != packed)
    return make_error("tensor '" + wname + "' has shape " + shape_text(t.shape) + ", expected " + shape_text(packed) +
                      " for " + std::to_string(q.bits) + "-bit " + shape_text(shape));
  if (sc->shape != params)
    return make_error("tensor '" + sname + "' has shape " + shape_text(sc->shape) + ", expected " + shape_text(params) +
                      " for group size " + std::to_string(q.group_size));
  if (bi->shape != params)
    return make_error("tensor '" + bname + "' has shape " + shape_text(bi->shape) + ", expected " + shape_text(params));
  if (sc->dtype != bi->dtype)
    return make_error("tensor '" + bname + "' is " + to_string(bi->dtype) + " but '" + sname + "' is " + to_string(sc->dtype));
  auto sdtype = backend_dtype(sc->dtype, sname);
  if (!sdtype) return sdtype.error();
  sl_weight w{};
  w.struct_size = sizeof(sl_weight);
  auto data = locate(st, t, w.offset);
  if (!data) return data.error();
  auto scales = locate(st, *sc, w.scales_offset);
  if (!scales) return scales.error();
  auto biases = locate(st, *bi, w.biases_offset);
  if (!biases) return biases.error();
  w.data = *data;
  w.dtype = SL_DTYPE_U32;
  w.rows = static_cast<uint32_t>(rows);
  w.cols = static_cast<uint32_t>(cols);
  w.bits = static_cast<uint32_t>(q.bits);
  w.group_size = static_cast<uint32_t>(q.group_size);
  w.scale_dtype = *sdtype;
  w.scales = *scales;
  w.biases = *biases;
  // The stage's backend must run this form for every use it makes of it: lookups for the embedding
  // (first stage), products for the projections and for an embedding that doubles as the tied
  // lm_head (last stage). Sizing a plan (no backend) checks nothing.
  const bool embedding = wname == "model.embed_tokens.weight";
  const bool tied_head = embedding && (config_.tie_word_embeddings || !tensors.find("lm_head.weight"));
  const bool lookup = embedding && st.embeds, product = !embedding || (tied_head && st.has_head);
  for (uint32_t op : {uint32_t{SL_OP_EMBED}, uint32_t{SL_OP_MATMUL}}) {
    if (!st.backend || !(op == SL_OP_EMBED ? lookup : product)) continue;
    sl_op_query query{};
    query.struct_size = sizeof(query);
    query.op = op;
    query.weight_dtype = SL_DTYPE_U32;
    query.weight_bits = w.bits;
    if (!st.backend->supports(query))
      return make_error("tensor '" + wname + "': backend '" + st.backend->name() + "' does not run " +
                        std::to_string(q.bits) + "-bit weights" + (op == SL_OP_EMBED ? " in lookups" : " in matmul"));
  }
  return w;
}

namespace {

std::string router_name(const ModelConfig& c, int layer) {
  return "model.layers." + std::to_string(layer) + "." + (c.architecture == "mixtral" ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
}

// "layers 0-15 on opencl", for messages about a stage.
std::string stage_text(uint32_t first, uint32_t end, const BackendHandle* backend) {
  return "layers " + std::to_string(first) + "-" + std::to_string(end - 1) + " on " + (backend ? backend->name() : "?");
}

}  // namespace

// Binds what the stage runs: the embedding (first stage), its layers, the final norm and the LM
// head (last stage).
Status Transformer::bind_stage(const SafetensorsSet& tensors, Stage& st) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, D = c.head_dim, F = c.intermediate_size, V = c.vocab_size;
  const int64_t QD = c.num_heads * D, KD = c.num_kv_heads * D;
  auto need = [&](sl_weight& dst, const std::string& name, std::vector<int64_t> shape) -> Status {
    auto w = bind(tensors, st, name, std::move(shape));
    if (!w) return w.error();
    dst = *w;
    return {};
  };
  auto maybe = [&](sl_weight& dst, bool& present, const std::string& name, std::vector<int64_t> shape) -> Status {
    present = tensors.find(name) != nullptr;
    return present ? need(dst, name, std::move(shape)) : Status{};
  };
#define SLUICE_TRY(expr)             \
  if (auto s_ = (expr); !s_) return s_.error()

  if (st.embeds) SLUICE_TRY(need(embed_, "model.embed_tokens.weight", {V, H}));
  if (st.has_head) {
    SLUICE_TRY(need(final_norm_, "model.norm.weight", {H}));
    if (tensors.find("lm_head.weight") && !c.tie_word_embeddings) {
      SLUICE_TRY(need(lm_head_, "lm_head.weight", {V, H}));
    } else {
      SLUICE_TRY(need(lm_head_, "model.embed_tokens.weight", {V, H}));  // tied: the output projection reads the embedding table
    }
  }
  bool any_moe = false;
  for (int i = static_cast<int>(st.first); i < static_cast<int>(st.end); ++i) {
    Layer L;
    const std::string p = "model.layers." + std::to_string(i) + ".";
    SLUICE_TRY(need(L.attn_norm, p + "input_layernorm.weight", {H}));
    SLUICE_TRY(need(L.q, p + "self_attn.q_proj.weight", {QD, H}));
    SLUICE_TRY(need(L.k, p + "self_attn.k_proj.weight", {KD, H}));
    SLUICE_TRY(need(L.v, p + "self_attn.v_proj.weight", {KD, H}));
    SLUICE_TRY(need(L.o, p + "self_attn.o_proj.weight", {H, QD}));
    SLUICE_TRY(maybe(L.q_bias, L.has_q_bias, p + "self_attn.q_proj.bias", {QD}));
    SLUICE_TRY(maybe(L.k_bias, L.has_k_bias, p + "self_attn.k_proj.bias", {KD}));
    SLUICE_TRY(maybe(L.v_bias, L.has_v_bias, p + "self_attn.v_proj.bias", {KD}));
    SLUICE_TRY(maybe(L.o_bias, L.has_o_bias, p + "self_attn.o_proj.bias", {H}));
    if (c.qk_norm) {
      SLUICE_TRY(need(L.q_norm, p + "self_attn.q_norm.weight", {D}));
      SLUICE_TRY(need(L.k_norm, p + "self_attn.k_norm.weight", {D}));
      L.has_qk_norm = true;
    } else if (c.qk_norm_full) {
      SLUICE_TRY(need(L.q_norm, p + "self_attn.q_norm.weight", {QD}));
      SLUICE_TRY(need(L.k_norm, p + "self_attn.k_norm.weight", {KD}));
      L.has_qk_norm = L.qk_norm_full = true;
    }
    SLUICE_TRY(need(L.ffn_norm, p + "post_attention_layernorm.weight", {H}));
    if (c.moe.is_sparse(i)) {
      SLUICE_TRY(need(L.router, router_name(c, i), {c.moe.n_experts, H}));
      L.moe_index = 0;  // set from the layout once every stage is bound
      any_moe = true;
    } else {
      SLUICE_TRY(need(L.gate, p + "mlp.gate_proj.weight", {F, H}));
      SLUICE_TRY(need(L.up, p + "mlp.up_proj.weight", {F, H}));
      SLUICE_TRY(need(L.down, p + "mlp.down_proj.weight", {H, F}));
    }
    L.window = i < static_cast<int>(c.layer_window.size()) ? static_cast<uint32_t>(c.layer_window[i]) : 0;
    layers_[static_cast<std::size_t>(i)] = L;
  }
  // The prefetch hint across the stage boundary (a plan's footprint counts each layer's own weights).
  st.has_next_router = false;
  for (int i = static_cast<int>(st.end); any_moe && st.backend && i < c.num_layers; ++i)
    if (c.moe.is_sparse(i)) {
      SLUICE_TRY(need(st.next_router, router_name(c, i), {c.moe.n_experts, H}));
      st.has_next_router = true;
      break;
    }
#undef SLUICE_TRY
  return {};
}

// Wraps the bytes of the tensors the stage needs: tensors that lie back to back in a file become one
// buffer, from the page below the first (so every tensor keeps the alignment it has in the mapping)
// to the end of the last. Zero-copy on the CPU; on a GPU only the stage's own weights reach device
// memory (not whole files, not the routed experts).
Status Transformer::wrap_spans(Stage& st) {
  constexpr uint64_t kPage = 4096;
  auto& used = st.used;
  std::sort(used.begin(), used.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->file_index != b->file_index ? a->file_index < b->file_index : a->file_offset < b->file_offset;
  });
  used.erase(std::unique(used.begin(), used.end()), used.end());
  std::vector<const std::byte*> host;  // the mapping of each span's file
  for (const TensorInfo* t : used) {
    const uint64_t begin = t->file_offset / kPage * kPage, end = t->file_offset + t->bytes;
    if (!st.spans.empty() && st.spans.back().file == t->file_index && begin <= st.spans.back().end) {
      st.spans.back().end = std::max(st.spans.back().end, end);
      continue;
    }
    st.spans.push_back(WeightSpan{t->file_index, begin, end, {}});
    host.push_back(t->data - t->file_offset);
  }
  for (std::size_t i = 0; i < st.spans.size(); ++i) {
    auto& s = st.spans[i];
    auto buf = st.backend->wrap_host(host[i] + s.begin, s.end - s.begin);
    if (!buf) return buf.error();
    s.buffer = std::move(*buf);
  }
  used.clear();
  used.shrink_to_fit();
  st.recording = false;
  return {};
}

Result<std::unique_ptr<Transformer>> Transformer::create(const ModelConfig& config, const SafetensorsSet& tensors,
                                                         const BackendHandle& backend) {
  const StageSpec all{&backend, static_cast<uint32_t>(std::max(0, config.num_layers))};
  return create(config, tensors, std::span<const StageSpec>(&all, 1));
}

Result<std::unique_ptr<Transformer>> Transformer::create(const ModelConfig& config, const SafetensorsSet& tensors,
                                                         std::span<const StageSpec> specs) {
  std::unique_ptr<Transformer> m(new Transformer(config));
  const ModelConfig& c = m->config_;
  if (specs.empty()) return make_error("no backend to run the model on");
  uint32_t placed = 0;
  for (const auto& spec : specs) {
    if (!spec.backend || spec.n_layers == 0) return make_error("a model stage needs a backend and at least one layer");
    Stage st;
    st.backend = spec.backend;
    st.first = placed;
    st.end = placed += spec.n_layers;
    m->stages_.push_back(std::move(st));
  }
  if (placed != static_cast<uint32_t>(c.num_layers))
    return make_error("the stages hold " + std::to_string(placed) + " layers; the model has " + std::to_string(c.num_layers));
  m->stages_.front().embeds = true;
  m->stages_.back().has_head = true;
  m->layers_.resize(static_cast<std::size_t>(c.num_layers));

  // Each stage: record the tensors it needs, wrap their bytes on its backend, bind them there.
  for (auto& st : m->stages_) {
    st.recording = true;
    if (auto s = m->bind_stage(tensors, st); !s) return s.error();
    if (auto s = m->wrap_spans(st); !s)
      return make_error(m->stages_.size() > 1 ? stage_text(st.first, st.end, st.backend) + ": " + s.message() : s.message());
    if (auto s = m->bind_stage(tensors, st); !s) return s.error();
  }

  if (c.moe.enabled()) {
    auto layout = ExpertLayout::find(c, tensors);
    if (!layout) return layout.error();
    m->experts_ = std::move(*layout);
    for (int i = 0; i < c.num_layers; ++i) m->layers_[i].moe_index = m->experts_->moe_layer_of(i);
    // Expert weights reach the backend as host memory wrapped per use: say so now if a backend that
    // runs MoE layers cannot run their form.
    for (const auto& st : m->stages_)
      for (uint32_t i = st.first; i < st.end; ++i) {
        const int l = m->layers_[i].moe_index;
        if (l < 0) continue;
        for (auto p : {ExpertLayout::kGate, ExpertLayout::kUp, ExpertLayout::kDown}) {
          const auto& proj = m->experts_->projection(static_cast<uint32_t>(l), p);
          sl_op_query query{};
          query.struct_size = sizeof(query);
          query.op = SL_OP_MATMUL;
          query.weight_dtype = proj.dtype;
          query.weight_bits = proj.bits;
          if (!st.backend->supports(query))
            return make_error("backend '" + st.backend->name() + "' cannot multiply the experts' weights (" +
                              (proj.bits ? std::to_string(proj.bits) + "-bit" : std::string("this dtype")) + ")");
        }
      }
  }
  for (const auto& [name, t] : tensors.tensors()) m->weight_bytes_ += t.bytes;
  m->inv_freq_ = c.rope.inverse_frequencies(c.rotary_dim());
  m->rope_factor_ = c.rope.attention_scaling();
  return m;
}

// The same binding, recorded instead of done: which bytes each part of the model needs.
Result<WeightFootprint> Transformer::footprint(const ModelConfig& config, const SafetensorsSet& tensors) {
  Transformer m(config);
  m.layers_.resize(static_cast<std::size_t>(std::max(0, config.num_layers)));
  auto bytes_of = [&](uint32_t first, uint32_t end, bool embeds, bool head) -> Result<uint64_t> {
    Stage st;
    st.first = first;
    st.end = end;
    st.embeds = embeds;
    st.has_head = head;
    st.recording = true;
    if (auto s = m.bind_stage(tensors, st); !s) return s.error();
    std::sort(st.used.begin(), st.used.end());
    st.used.erase(std::unique(st.used.begin(), st.used.end()), st.used.end());
    uint64_t bytes = 0;
    for (const TensorInfo* t : st.used) bytes += t->bytes;
    return bytes;
  };
  WeightFootprint f;
  const uint32_t L = static_cast<uint32_t>(m.layers_.size());
  auto embed = bytes_of(0, 0, true, false);
  if (!embed) return embed.error();
  auto head = bytes_of(L, L, false, true);
  if (!head) return head.error();
  f.embed_bytes = *embed;
  f.tied_head = !(tensors.find("lm_head.weight") && !config.tie_word_embeddings);
  f.head_bytes = *head - (f.tied_head ? f.embed_bytes : 0);
  for (uint32_t i = 0; i < L; ++i) {
    auto layer = bytes_of(i, i + 1, false, false);
    if (!layer) return layer.error();
    f.layer_bytes.push_back(*layer);
  }
  return f;
}

std::vector<StageSpec> Transformer::stages() const {
  std::vector<StageSpec> out;
  for (const auto& st : stages_) out.push_back(StageSpec{st.backend, st.end - st.first});
  return out;
}

Status Transformer::ensure_activations(Stage& st, uint32_t n, uint32_t n_logit_rows) {
  const ModelConfig& c = config_;
  const BackendHandle& backend = *st.backend;
  Activations& a = st.act;
  auto grow = [&](Buffer& b, uint64_t floats) -> Status {
    if (b && b.bytes() >= floats * 4) return {};
    auto nb = backend.alloc(floats * 4);
    if (!nb) return nb.error();
    b = std::move(*nb);
    return {};
  };
  if (n > a.capacity_tokens) {
    const uint64_t H = c.hidden_size, QD = uint64_t(c.num_heads) * c.head_dim, KD = uint64_t(c.num_kv_heads) * c.head_dim;
    const uint64_t ffn = std::max<uint64_t>(c.intermediate_size, c.moe.expert_intermediate);
    for (auto [buf, size] : {std::pair{&a.x, H}, {&a.h, H}, {&a.q, QD}, {&a.k, KD}, {&a.v, KD}, {&a.attn, QD}, {&a.o, H},
                             {&a.gate, ffn}, {&a.up, ffn}, {&a.act, ffn}, {&a.expert_in, H}, {&a.expert_out, H}, {&a.zeros, H},
                             {&a.router_logits, uint64_t(std::max(1, c.moe.n_experts))}}) {
      if (auto s = grow(*buf, size * n); !s) return s;
    }
    a.capacity_tokens = n;
    // The MoE output starts from zero rows copied from here.
    std::vector<float> zero(uint64_t(c.hidden_size) * n, 0.0f);
    if (auto s = backend.upload(a.zeros, 0, zero.data(), zero.size() * 4); !s) return s;
  }
  if (n_logit_rows > a.capacity_logit_rows) {
    if (auto s = grow(a.last, uint64_t(c.hidden_size) * n_logit_rows); !s) return s;
    if (auto s = grow(a.last_norm, uint64_t(c.hidden_size) * n_logit_rows); !s) return s;
    if (auto s = grow(a.logits, uint64_t(c.vocab_size) * n_logit_rows); !s) return s;
    a.capacity_logit_rows = n_logit_rows;
  }
  return {};
}

// The products of one input (q/k/v, gate/up): one matmul_multi where the backend has it (ABI 1.3),
// else a matmul each.
Status Transformer::multiply(const BackendHandle& backend, const Buffer& in, uint32_t n, std::span<const Product> products,
                             const char* what) {
  const sl_backend_api* api = backend.api();
  sl_error err{};
  if (table_has(api, &sl_backend_api::matmul_multi) && products.size() <= SL_MATMUL_MULTI_MAX) {
    const sl_weight* ws[SL_MATMUL_MULTI_MAX];
    const sl_weight* biases[SL_MATMUL_MULTI_MAX];
    sl_buffer* outs[SL_MATMUL_MULTI_MAX];
    for (std::size_t i = 0; i < products.size(); ++i) {
      ws[i] = products[i].weight;
      biases[i] = products[i].bias;
      outs[i] = products[i].out;
    }
    return backend.check(api->matmul_multi(backend.raw(), in.get(), n, static_cast<uint32_t>(products.size()), ws, biases, outs, &err), err,
                          what);
  }
  for (const Product& p : products)
    if (auto s = backend.check(api->matmul(backend.raw(), in.get(), n, p.weight, p.bias, p.out, &err), err, p.what); !s) return s;
  return {};
}

// The residual step before a norm: a.x += a.o, then a.h = rms_norm(a.x) — one add_rms_norm where
// the backend has it (ABI 1.3), else add then rms_norm.
Status Transformer::add_then_norm(Stage& st, const sl_weight& norm, uint32_t n) {
  const BackendHandle& backend = *st.backend;
  const sl_backend_api* api = backend.api();
  Activations& a = st.act;
  const uint32_t H = config_.hidden_size;
  sl_error err{};
  if (table_has(api, &sl_backend_api::add_rms_norm))
    return backend.check(api->add_rms_norm(backend.raw(), a.x.get(), a.o.get(), &norm, 0.0f, a.h.get(), n, H, config_.norm_eps, &err), err,
                          "residual + rms_norm");
  if (auto s = backend.check(api->add(backend.raw(), a.x.get(), a.o.get(), a.x.get(), uint64_t(n) * H, &err), err, "residual"); !s) return s;
  return backend.check(api->rms_norm(backend.raw(), a.x.get(), &norm, 0.0f, a.h.get(), n, H, config_.norm_eps, &err), err, "rms_norm");
}

// One layer. residual_pending: the previous layer left its MLP output in a.o, not yet added to a.x
// (this layer's attn_norm adds it, fused); on return, whether this layer left its own there — it
// does when the next layer runs on the same stage and the backend fuses the add with the norm.
Status Transformer::run_layer(Stage& st, const Layer& L, uint32_t index, uint32_t n, sl_kv_cache* cache, bool& residual_pending) {
  const ModelConfig& c = config_;
  const BackendHandle& backend = *st.backend;
  Activations& a = st.act;
  const sl_backend_api* api = backend.api();
  sl_backend* be = backend.raw();
  sl_error err{};
  const uint32_t H = c.hidden_size, D = c.head_dim, NH = c.num_heads, NKV = c.num_kv_heads;
#define SLUICE_CALL(what, call)                                                   \
  if (auto s_ = backend.check((call), err, what); !s_) return s_
#define SLUICE_STEP(call) \
  if (auto s_ = (call); !s_) return s_

  if (residual_pending) {
    SLUICE_STEP(add_then_norm(st, L.attn_norm, n));
  } else {
    SLUICE_CALL("rms_norm", api->rms_norm(be, a.x.get(), &L.attn_norm, 0.0f, a.h.get(), n, H, c.norm_eps, &err));
  }
  residual_pending = false;
  const Product qkv[] = {{"matmul q", &L.q, L.has_q_bias ? &L.q_bias : nullptr, a.q.get()},
                         {"matmul k", &L.k, L.has_k_bias ? &L.k_bias : nullptr, a.k.get()},
                         {"matmul v", &L.v, L.has_v_bias ? &L.v_bias : nullptr, a.v.get()}};
  SLUICE_STEP(multiply(backend, a.h, n, qkv, "matmul q/k/v"));
  if (L.qk_norm_full) {
    SLUICE_CALL("q_norm", api->rms_norm(be, a.q.get(), &L.q_norm, 0.0f, a.q.get(), n, NH * D, c.norm_eps, &err));
    SLUICE_CALL("k_norm", api->rms_norm(be, a.k.get(), &L.k_norm, 0.0f, a.k.get(), n, NKV * D, c.norm_eps, &err));
  } else if (L.has_qk_norm) {
    SLUICE_CALL("q_norm", api->rms_norm(be, a.q.get(), &L.q_norm, 0.0f, a.q.get(), n * NH, D, c.norm_eps, &err));
    SLUICE_CALL("k_norm", api->rms_norm(be, a.k.get(), &L.k_norm, 0.0f, a.k.get(), n * NKV, D, c.norm_eps, &err));
  }
  const uint32_t rot = static_cast<uint32_t>(c.rotary_dim());
  SLUICE_CALL("rope q", api->rope(be, a.q.get(), NH, D, rot, inv_freq_.data(), rope_factor_, SL_ROPE_NEOX, &err));
  SLUICE_CALL("rope k", api->rope(be, a.k.get(), NKV, D, rot, inv_freq_.data(), rope_factor_, SL_ROPE_NEOX, &err));
  SLUICE_CALL("kv_write", api->kv_write(be, cache, index, a.k.get(), a.v.get(), &err));
  sl_attention_params ap{};
  ap.struct_size = sizeof(ap);
  ap.n_heads = NH;
  ap.n_kv_heads = NKV;
  ap.head_dim = D;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(D));
  ap.window = L.window;
  SLUICE_CALL("attention", api->attention(be, cache, index, a.q.get(), &ap, a.attn.get(), &err));
  SLUICE_CALL("matmul o", api->matmul(be, a.attn.get(), n, &L.o, L.has_o_bias ? &L.o_bias : nullptr, a.o.get(), &err));
  SLUICE_STEP(add_then_norm(st, L.ffn_norm, n));

  if (L.moe_index >= 0) {
    SLUICE_STEP(run_moe(st, L, n));
  } else {
    const Product gate_up[] = {{"matmul gate", &L.gate, nullptr, a.gate.get()}, {"matmul up", &L.up, nullptr, a.up.get()}};
    SLUICE_STEP(multiply(backend, a.h, n, gate_up, "matmul gate/up"));
    const uint32_t act = c.hidden_act == "gelu_pytorch_tanh" || c.hidden_act == "gelu_tanh" ? SL_ACT_GELU_TANH
                         : c.hidden_act == "gelu" ? SL_ACT_GELU : SL_ACT_SILU;
    SLUICE_CALL("activation", api->gated_activation(be, act, a.gate.get(), a.up.get(), a.act.get(), uint64_t(n) * c.intermediate_size, &err));
    SLUICE_CALL("matmul down", api->matmul(be, a.act.get(), n, &L.down, nullptr, a.o.get(), &err));
  }
  // The MLP output (a.o) joins the residual stream now, unless the next layer runs here too and the
  // backend fuses the add with that layer's attn_norm — or, after the last layer, with the final norm,
  // when the head reads every row in order (st.head_takes_residual: decode). Otherwise a stage's last
  // layer adds: the final norm (on copied rows) or the next stage reads a.x.
  const bool last_of_stage = index + 1 == st.end - st.first;
  residual_pending = (!last_of_stage || st.head_takes_residual) && table_has(api, &sl_backend_api::add_rms_norm);
  if (!residual_pending) SLUICE_CALL("residual", api->add(be, a.x.get(), a.o.get(), a.x.get(), uint64_t(n) * H, &err));
#undef SLUICE_STEP
#undef SLUICE_CALL
  return {};
}

// Routing on the host (the expert ids are needed here anyway, to ask the store for them): softmax
// over the experts' logits, the top k (ties to the lower index, as torch.topk), renormalised when
// the architecture says so. Returns, per token, its (expert, weight) pairs.
Result<std::vector<std::vector<std::pair<uint32_t, float>>>> Transformer::route(Stage& st, const sl_weight& router, uint32_t n) {
  const auto& moe = config_.moe;
  const BackendHandle& backend = *st.backend;
  Activations& a = st.act;
  const uint32_t E = static_cast<uint32_t>(moe.n_experts), K = static_cast<uint32_t>(moe.top_k);
  sl_error err{};
  if (auto s = backend.check(backend.api()->matmul(backend.raw(), a.h.get(), n, &router, nullptr, a.router_logits.get(), &err), err,
                              "router");
      !s)
    return s.error();
  std::vector<float> logits(static_cast<std::size_t>(n) * E);
  if (auto s = backend.download(a.router_logits, 0, logits.data(), logits.size() * 4); !s) return s.error();
  std::vector<std::vector<std::pair<uint32_t, float>>> routes(n);
  std::vector<uint32_t> order(E);
  std::vector<float> p(E);
  for (uint32_t t = 0; t < n; ++t) {
    const float* row = logits.data() + static_cast<std::size_t>(t) * E;
    const float m = *std::max_element(row, row + E);
    float sum = 0.0f;
    for (uint32_t e = 0; e < E; ++e) sum += (p[e] = std::exp(row[e] - m));
    for (uint32_t e = 0; e < E; ++e) p[e] /= sum;
    std::iota(order.begin(), order.end(), 0u);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](uint32_t a, uint32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float top_sum = 0.0f;
    for (uint32_t i = 0; i < K; ++i) top_sum += p[order[i]];
    for (uint32_t i = 0; i < K; ++i)
      routes[t].emplace_back(order[i], moe.normalize_top_k ? p[order[i]] / top_sum : p[order[i]]);
  }
  return routes;
}

Status Transformer::gather_rows(const BackendHandle& backend, const Buffer& src, const std::vector<int32_t>& rows, uint32_t dim, const Buffer& dst) {
  const sl_backend_api* api = backend.api();
  sl_error err{};
  if (table_has(api, &sl_backend_api::gather_rows))
    return backend.check(api->gather_rows(backend.raw(), src.get(), rows.data(), static_cast<uint32_t>(rows.size()), dim, dst.get(), &err),
                          err, "gather_rows");
  for (std::size_t i = 0; i < rows.size(); ++i)  // a backend without the op: one copy per row
    if (auto s = backend.check(api->copy(backend.raw(), src.get(), uint64_t(rows[i]) * dim, dst.get(), uint64_t(i) * dim, dim, &err), err, "copy");
        !s)
      return s;
  return {};
}

Status Transformer::scatter_add_rows(const BackendHandle& backend, const Buffer& src, const std::vector<int32_t>& rows, const std::vector<float>& weights,
                                     uint32_t dim, const Buffer& dst) {
  const sl_backend_api* api = backend.api();
  sl_error err{};
  if (table_has(api, &sl_backend_api::scatter_add_rows))
    return backend.check(api->scatter_add_rows(backend.raw(), src.get(), rows.data(), weights.data(), static_cast<uint32_t>(rows.size()), dim,
                                                dst.get(), &err),
                          err, "scatter_add_rows");
  // A backend without the op: through host memory.
  std::vector<float> s(rows.size() * dim), d(dst.bytes() / 4);
  if (auto st = backend.download(src, 0, s.data(), s.size() * 4); !st) return st;
  if (auto st = backend.download(dst, 0, d.data(), d.size() * 4); !st) return st;
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (uint32_t j = 0; j < dim; ++j) d[std::size_t(rows[i]) * dim + j] += weights[i] * s[i * dim + j];
  return backend.upload(dst, 0, d.data(), d.size() * 4);
}

// A MoE block: route every token, fetch the routed experts from the store (hinting the next MoE
// layer's likely experts first, so their reads overlap this layer's compute), then for each expert
// run its gated MLP on the rows routed to it and add the weighted result into a.o.
Status Transformer::run_moe(Stage& st, const Layer& L, uint32_t n) {
  if (!store_) return make_error("a Mixture-of-Experts model needs an expert store");
  const ModelConfig& c = config_;
  const BackendHandle& backend = *st.backend;
  Activations& a = st.act;
  const uint32_t H = c.hidden_size, F = c.moe.expert_intermediate;
  const uint32_t moe_layer = static_cast<uint32_t>(L.moe_index);
  auto routes = route(st, L.router, n);
  if (!routes) return routes.error();

  // Tokens per expert, experts in ascending order.
  std::vector<std::vector<int32_t>> rows(c.moe.n_experts);
  std::vector<std::vector<float>> weights(c.moe.n_experts);
  for (uint32_t t = 0; t < n; ++t)
    for (auto [e, w] : (*routes)[t]) {
      rows[e].push_back(static_cast<int32_t>(t));
      weights[e].push_back(w);
    }
  std::vector<uint32_t> used;
  for (uint32_t e = 0; e < rows.size(); ++e)
    if (!rows[e].empty()) used.push_back(e);

  // Prefetch: the next MoE layer's router on this layer's input predicts its experts (its copy on
  // this stage's backend when that layer runs on a later stage).
  const sl_weight* next_router = nullptr;
  if (moe_layer + 1 < experts_->n_moe_layers()) {
    const auto next = static_cast<uint32_t>(experts_->model_layer(moe_layer + 1));
    next_router = next < st.end ? &layers_[next].router : st.has_next_router ? &st.next_router : nullptr;
  }
  if (next_router) {
    if (auto guess = route(st, *next_router, n); guess) {
      std::vector<bool> want(c.moe.n_experts, false);
      for (const auto& r : *guess)
        for (auto [e, w] : r) want[e] = true;
      std::vector<uint32_t> hint;
      for (uint32_t e = 0; e < want.size(); ++e)
        if (want[e]) hint.push_back(e);
      store_->prefetch(moe_layer + 1, hint);
    }
  }

  std::vector<const void*> parts;
  if (auto s = store_->acquire(moe_layer, used, parts); !s) return s;
  struct Release {
    ExpertStoreHandle* store;
    uint32_t layer;
    const std::vector<uint32_t>& experts;
    ~Release() { store->release(layer, experts); }
  } release{store_, moe_layer, used};

  sl_error err{};
  const sl_backend_api* api = backend.api();
  sl_backend* be = backend.raw();
  if (auto s = backend.check(api->copy(be, a.zeros.get(), 0, a.o.get(), 0, uint64_t(n) * H, &err), err, "copy"); !s) return s;
  const uint32_t per_part = experts_->n_parts() / 3;
  for (std::size_t i = 0; i < used.size(); ++i) {
    const uint32_t e = used[i];
    const uint32_t m = static_cast<uint32_t>(rows[e].size());
    // Wrap the expert's parts for the backend (zero-copy on the CPU; an upload on a device).
    std::vector<Buffer> buffers;
    sl_weight w[3]{};
    for (uint32_t p = 0; p < 3; ++p) {
      const auto& proj = experts_->projection(moe_layer, static_cast<ExpertLayout::Projection>(p));
      for (uint32_t k = 0; k < per_part; ++k) {
        const uint32_t index = p * per_part + k;
        auto buf = backend.wrap_host(parts[i * experts_->n_parts() + index], experts_->part(moe_layer, e, index).bytes);
        if (!buf) return buf.error();
        buffers.push_back(std::move(*buf));
      }
      sl_weight& wp = w[p];
      wp.struct_size = sizeof(sl_weight);
      wp.data = buffers[p * per_part].get();
      wp.dtype = proj.dtype;
      wp.rows = proj.rows;
      wp.cols = proj.cols;
      if (proj.quantized()) {
        wp.bits = proj.bits;
        wp.group_size = proj.group_size;
        wp.scale_dtype = proj.scale_dtype;
        wp.scales = buffers[p * per_part + 1].get();
        wp.biases = buffers[p * per_part + 2].get();
      }
    }
    if (auto s = gather_rows(backend, a.h, rows[e], H, a.expert_in); !s) return s;
    if (auto s = backend.check(api->matmul(be, a.expert_in.get(), m, &w[0], nullptr, a.gate.get(), &err), err, "expert gate"); !s) return s;
    if (auto s = backend.check(api->matmul(be, a.expert_in.get(), m, &w[1], nullptr, a.up.get(), &err), err, "expert up"); !s) return s;
    if (auto s = backend.check(api->gated_activation(be, SL_ACT_SILU, a.gate.get(), a.up.get(), a.act.get(), uint64_t(m) * F, &err), err,
                                "expert activation");
        !s)
      return s;
    if (auto s = backend.check(api->matmul(be, a.act.get(), m, &w[2], nullptr, a.expert_out.get(), &err), err, "expert down"); !s) return s;
    if (auto s = scatter_add_rows(backend, a.expert_out, rows[e], weights[e], H, a.o); !s) return s;
    // The wrapped parts must outlive the ops that read them (asynchronous backends).
    if (auto s = backend.synchronize(); !s) return s;
  }
  return {};
}

Status Transformer::forward(const ForwardBatch& batch, sl_kv_cache* cache, std::vector<float>& logits) {
  return forward(batch, std::span<sl_kv_cache* const>(&cache, 1), logits);
}

Status Transformer::forward(const ForwardBatch& batch, std::span<sl_kv_cache* const> caches, std::vector<float>& logits) {
  if (auto s = run_layers(batch, caches, -1); !s) return s;
  if (batch.logit_rows.empty()) {
    logits.clear();
    for (const auto& st : stages_)
      if (auto s = st.backend->synchronize(); !s) return s;
    return {};
  }
  if (auto s = run_head(stages_.back(), batch); !s) return s;
  const Stage& st = stages_.back();
  logits.resize(batch.logit_rows.size() * config_.vocab_size);
  return st.backend->download(st.act.logits, 0, logits.data(), logits.size() * 4);
}

bool Transformer::greedy_on_device() const {
  if (stages_.size() != 1) return false;  // the choice would have to cross devices
  const sl_backend_api* api = stages_.front().backend->api();
  return table_has(api, &sl_backend_api::argmax) && table_has(api, &sl_backend_api::embed_device) &&
         table_has(api, &sl_backend_api::download_begin) && table_has(api, &sl_backend_api::download_wait);
}

Status Transformer::forward_greedy(const ForwardBatch& batch, sl_kv_cache* cache, int from_slot, uint32_t to_slot) {
  if (!greedy_on_device()) return make_error("forward_greedy: the backend cannot keep a greedy choice on the device (ABI 1.4)");
  if (to_slot >= kGreedySlots || from_slot >= static_cast<int>(kGreedySlots) || from_slot == static_cast<int>(to_slot))
    return make_error("forward_greedy: bad slots");
  if (batch.logit_rows.size() != 1) return make_error("forward_greedy: a greedy pass picks one token (one logit row)");
  if (from_slot >= 0 && batch.tokens.size() != 1) return make_error("forward_greedy: a token from the device is one token");
  if (greedy_ticket_[to_slot] != 0) return make_error("forward_greedy: slot " + std::to_string(to_slot) + " is still in flight");
  Stage& st = stages_.front();
  const BackendHandle& backend = *st.backend;
  if (!greedy_ids_) {
    auto b = backend.alloc(kGreedySlots * sizeof(int32_t));
    if (!b) return b.error();
    greedy_ids_ = std::move(*b);
  }
  if (auto s = run_layers(batch, std::span<sl_kv_cache* const>(&cache, 1), from_slot); !s) return s;
  if (auto s = run_head(st, batch); !s) return s;
  sl_error err{};
  const sl_backend_api* api = backend.api();
  if (auto s = backend.check(api->argmax(backend.raw(), st.act.logits.get(), 1, config_.vocab_size, greedy_ids_.get(), to_slot, &err), err,
                             "argmax");
      !s)
    return s;
  uint64_t ticket = 0;
  if (auto s = backend.check(api->download_begin(backend.raw(), greedy_ids_.get(), uint64_t(to_slot) * sizeof(int32_t),
                                                 &greedy_host_[to_slot], sizeof(int32_t), &ticket, &err),
                             err, "download_begin");
      !s)
    return s;
  greedy_ticket_[to_slot] = ticket;
  return {};
}

Result<int32_t> Transformer::greedy_choice(uint32_t slot) {
  if (slot >= kGreedySlots || greedy_ticket_[slot] == 0) return make_error("greedy_choice: no pass in flight in slot " + std::to_string(slot));
  const BackendHandle& backend = *stages_.front().backend;
  sl_error err{};
  const uint64_t ticket = greedy_ticket_[slot];
  greedy_ticket_[slot] = 0;
  if (auto s = backend.check(backend.api()->download_wait(backend.raw(), ticket, &err), err, "download_wait"); !s) return s.error();
  return greedy_host_[slot];
}

// Everything of a pass before the head: the batch announced to every stage, the tokens embedded
// (from the host, or from_slot's greedy choice on the device), and every layer, stage by stage.
Status Transformer::run_layers(const ForwardBatch& batch, std::span<sl_kv_cache* const> caches, int from_slot) {
  const uint32_t n = static_cast<uint32_t>(batch.tokens.size());
  if (n == 0) return make_error("forward: empty batch");
  if (batch.positions.size() != n || batch.seq_slots.size() != n)
    return make_error("forward: tokens, positions and sequence slots differ in length");
  for (uint32_t r : batch.logit_rows)
    if (r >= n) return make_error("forward: logit row out of range");
  if (caches.size() != stages_.size())
    return make_error("forward: the model runs on " + std::to_string(stages_.size()) + " backends and needs one KV cache for each, got " +
                      std::to_string(caches.size()));
  const uint32_t n_logits = static_cast<uint32_t>(batch.logit_rows.size());
  for (auto& st : stages_)
    if (auto s = ensure_activations(st, n, st.has_head ? std::max(1u, n_logits) : 0); !s) return s;

  sl_error err{};
  sl_batch b{};
  b.struct_size = sizeof(b);
  b.n_tokens = n;
  b.positions = batch.positions.data();
  b.seq_slots = batch.seq_slots.data();
  b.n_seqs = batch.n_seqs;
  b.max_pages = batch.max_pages;
  b.page_table = batch.page_table.data();
  if (!batch.recent_table.empty() && batch.recent_table.size() != batch.page_table.size())
    return make_error("forward: recent table and page table differ in size");
  b.recent_table = batch.recent_table.empty() ? nullptr : batch.recent_table.data();
  for (auto& st : stages_)
    if (auto s = st.backend->check(st.backend->api()->begin_batch(st.backend->raw(), &b, &err), err, "begin_batch"); !s) return s;
  {
    const Stage& first = stages_.front();
    const sl_backend_api* api = first.backend->api();
    const sl_status embedded = from_slot < 0 ? api->embed(first.backend->raw(), &embed_, batch.tokens.data(), n, first.act.x.get(), &err)
                                             : api->embed_device(first.backend->raw(), &embed_, greedy_ids_.get(),
                                                                 static_cast<uint64_t>(from_slot), n, first.act.x.get(), &err);
    if (auto s = first.backend->check(embedded, err, "embed"); !s) return s;
  }

  const uint64_t hidden_bytes = uint64_t(n) * config_.hidden_size * 4;
  for (std::size_t s = 0; s < stages_.size(); ++s) {
    Stage& st = stages_[s];
    if (s > 0) {  // the hidden state moves to the next backend through host memory
      hidden_.resize(hidden_bytes / 4);
      if (auto r = stages_[s - 1].backend->download(stages_[s - 1].act.x, 0, hidden_.data(), hidden_bytes); !r) return r;
      if (auto r = st.backend->upload(st.act.x, 0, hidden_.data(), hidden_bytes); !r) return r;
    }
    // The head can take the last MLP output with its final norm (one add_rms_norm, no copy) when
    // it reads every row of the batch in order — a decode step's one row.
    bool every_row = st.has_head && batch.logit_rows.size() == n;
    for (uint32_t i = 0; every_row && i < n; ++i) every_row = batch.logit_rows[i] == i;
    st.head_takes_residual = every_row && st.first < st.end;
    bool residual_pending = false;  // a layer's MLP output waiting in a.o for the next one's norm
    for (uint32_t i = st.first; i < st.end; ++i)
      if (auto r = run_layer(st, layers_[i], i - st.first, n, caches[s], residual_pending); !r) return r;
    st.residual_pending = residual_pending;
  }
  return {};
}

// The final norm and the LM head over the rows that need logits, on the last stage, into a.logits.
Status Transformer::run_head(Stage& st, const ForwardBatch& batch) {
  const BackendHandle& backend = *st.backend;
  const sl_backend_api* api = backend.api();
  sl_backend* be = backend.raw();
  Activations& a = st.act;
  sl_error err{};
  const uint32_t n_logits = static_cast<uint32_t>(batch.logit_rows.size());
  const uint32_t H = config_.hidden_size;
  if (st.residual_pending) {  // every row, in order: the last residual step and the final norm at once
    st.residual_pending = false;
    if (auto s = backend.check(api->add_rms_norm(be, a.x.get(), a.o.get(), &final_norm_, 0.0f, a.last_norm.get(), n_logits, H,
                                                 config_.norm_eps, &err),
                               err, "residual + final norm");
        !s)
      return s;
    return backend.check(api->matmul(be, a.last_norm.get(), n_logits, &lm_head_, nullptr, a.logits.get(), &err), err, "lm_head");
  }
  for (uint32_t i = 0; i < n_logits; ++i) {
    if (auto s = backend.check(api->copy(be, a.x.get(), uint64_t(batch.logit_rows[i]) * H, a.last.get(), uint64_t(i) * H, H, &err),
                                err, "copy");
        !s)
      return s;
  }
  if (auto s = backend.check(api->rms_norm(be, a.last.get(), &final_norm_, 0.0f, a.last_norm.get(), n_logits, H, config_.norm_eps, &err),
                              err, "final norm");
      !s)
    return s;
  return backend.check(api->matmul(be, a.last_norm.get(), n_logits, &lm_head_, nullptr, a.logits.get(), &err), err, "lm_head");
}

}  // namespace sluice
