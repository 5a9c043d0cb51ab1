#include "model/transformer.h"

#include "graph/stacked_weight.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#include "plugin/plugin_registry.h"
#include "util/vec.h"

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
  for (bool copied : {true, false})  // a copied tensor may also lie inside a wrapped span's bytes
    for (const auto& s : st.spans)
      if (s.copied == copied && s.file == t.file_index && s.begin <= t.file_offset && t.file_offset + t.bytes <= s.end) {
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
  for (sl_op op : {SL_OP_EMBED, SL_OP_MATMUL}) {
    if (!st.backend || !(op == SL_OP_EMBED ? lookup : product)) continue;
    if (!st.backend->runs_weight(op, w))
      return make_error("tensor '" + wname + "': backend '" + st.backend->name() + "' does not run " +
                        std::to_string(q.bits) + "-bit weights" + (op == SL_OP_EMBED ? " in lookups" : " in matmul"));
  }
  return w;
}

namespace {

// "layers 0-15 on opencl", for messages about a stage.
std::string stage_text(uint32_t first, uint32_t end, const BackendHandle* backend) {
  return "layers " + std::to_string(first) + "-" + std::to_string(end - 1) + " on " + (backend ? backend->name() : "?");
}

}  // namespace

namespace {

// The checkpoint's tensors bound onto one stage (Transformer::bind: its backend, its buffer spans).
class StageWeights final : public families::WeightSource {
 public:
  using BindFn = std::function<Result<sl_weight>(const std::string&, std::vector<int64_t>)>;
  using ConstantFn = std::function<Status(sl_weight&, const std::vector<float>&)>;
  StageWeights(const SafetensorsSet& tensors, BindFn bind, ConstantFn constant)
      : tensors_(tensors), bind_(std::move(bind)), constant_(std::move(constant)) {}
  Result<float> scalar(const std::string& name) override {
    const TensorInfo* t = tensors_.find(name);
    if (!t) return make_error("model is missing tensor '" + name + "'");
    int64_t values = 1;
    for (int64_t d : t->shape) values *= d;
    if (values != 1) return make_error("tensor '" + name + "' has shape " + shape_text(t->shape) + ", expected one value");
    switch (t->dtype) {
      case DType::kF32: {
        float v;
        std::memcpy(&v, t->data, 4);
        return v;
      }
      case DType::kF16: {
        uint16_t h;
        std::memcpy(&h, t->data, 2);
        return cpu::f16_to_f32(h);
      }
      case DType::kBF16: {
        uint16_t h;
        std::memcpy(&h, t->data, 2);
        return cpu::bf16_to_f32(h);
      }
      default: return make_error("tensor '" + name + "': dtype " + to_string(t->dtype) + " is not a float");
    }
  }
  Status constant(sl_weight& dst, const std::vector<float>& values) override { return constant_(dst, values); }
  Result<std::vector<float>> values(const std::string& name, std::vector<int64_t> shape) override {
    const TensorInfo* t = tensors_.find(name);
    if (!t) return make_error("model is missing tensor '" + name + "'");
    if (t->shape != shape) return make_error("tensor '" + name + "' has shape " + shape_text(t->shape) + ", expected " + shape_text(shape));
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    std::vector<float> out(n);
    for (uint64_t i = 0; i < n; ++i) {
      uint16_t h = 0;
      switch (t->dtype) {
        case DType::kF32: std::memcpy(&out[i], t->data + i * 4, 4); break;
        case DType::kF16: std::memcpy(&h, t->data + i * 2, 2); out[i] = cpu::f16_to_f32(h); break;
        case DType::kBF16: std::memcpy(&h, t->data + i * 2, 2); out[i] = cpu::bf16_to_f32(h); break;
        default: return make_error("tensor '" + name + "': dtype " + to_string(t->dtype) + " is not a float");
      }
    }
    return out;
  }
  bool has(const std::string& name) const override { return tensors_.find(name) != nullptr; }
  Status bind(sl_weight& dst, const std::string& name, std::vector<int64_t> shape) override {
    auto w = bind_(name, std::move(shape));
    if (!w) return w.error();
    dst = *w;
    return {};
  }

 private:
  const SafetensorsSet& tensors_;
  BindFn bind_;
  ConstantFn constant_;
};

}  // namespace

// Binds what the stage runs: the embedding (first stage), its layers (by the family's names), the
// final norm and the LM head (last stage).
Status Transformer::bind_stage(const SafetensorsSet& tensors, Stage& st) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  // Constants are made once, when binding for real on a backend (the recording pass and a footprint get none).
  auto constant = [&](sl_weight& dst, const std::vector<float>& values) -> Status {
    dst = {};
    dst.struct_size = sizeof(sl_weight);
    dst.dtype = SL_DTYPE_F32;
    dst.rows = 1;
    dst.cols = static_cast<uint32_t>(values.size());
    if (st.recording || !st.backend) return {};
    auto buf = st.backend->alloc(values.size() * 4);
    if (!buf) return buf.error();
    if (auto s = st.backend->upload(*buf, 0, values.data(), values.size() * 4); !s) return s;
    dst.data = buf->get();
    constants_.push_back(std::move(*buf));
    return {};
  };
  StageWeights src(
      tensors, [&](const std::string& name, std::vector<int64_t> shape) { return bind(tensors, st, name, std::move(shape)); }, constant);
  auto need = [&](sl_weight& dst, const std::string& name, std::vector<int64_t> shape) { return src.bind(dst, name, std::move(shape)); };
#define SLUICE_TRY(expr)             \
  if (auto s_ = (expr); !s_) return s_.error()

  const families::ModelTensorNames names = family_->tensor_names();
  if (st.embeds) {
    SLUICE_TRY(need(embed_, names.embed, {V, H}));
    SLUICE_TRY(family_->bind_model(src, c, model_weights_));
  }
  if (st.has_head) {
    SLUICE_TRY(need(final_norm_, names.final_norm, {H}));
    if (src.has(names.lm_head) && !c.tie_word_embeddings) {
      SLUICE_TRY(need(lm_head_, names.lm_head, {V, H}));
    } else {
      SLUICE_TRY(need(lm_head_, names.embed, {V, H}));  // tied: the output projection reads the embedding table
    }
  }
  bool any_moe = false;
  for (int i = static_cast<int>(st.first); i < static_cast<int>(st.end); ++i) {
    Layer L;
    const bool sparse = c.moe.is_sparse(i);
    SLUICE_TRY(family_->bind_layer(src, c, i, sparse, L));
    if (sparse) {
      const std::string router = family_->router_module(c, i);
      SLUICE_TRY(need(L.router, router + ".weight", {c.moe.n_experts, H}));
      if (c.moe.router_bias) {
        SLUICE_TRY(need(L.router_bias, router + ".bias", {c.moe.n_experts}));
        L.has_router_bias = true;
      }
      L.moe_index = 0;  // set from the layout once every stage is bound
      any_moe = true;
    }
    L.window = i < static_cast<int>(c.layer_window.size()) ? static_cast<uint32_t>(c.layer_window[i]) : 0;
    layers_[static_cast<std::size_t>(i)] = L;
  }
  // The prefetch hint across the stage boundary (a plan's footprint counts each layer's own weights).
  st.has_next_router = false;
  for (int i = static_cast<int>(st.end); any_moe && st.backend && i < c.num_layers; ++i)
    if (c.moe.is_sparse(i)) {
      const std::string router = family_->router_module(c, i);
      SLUICE_TRY(need(st.next_router, router + ".weight", {c.moe.n_experts, H}));
      if (c.moe.router_bias) SLUICE_TRY(need(st.next_router_bias, router + ".bias", {c.moe.n_experts}));
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
  // Writers that do not order tensors by their values' size (MLX's, by name) can leave packed words or
  // floats at an offset that is not a multiple of their size (after a 2-byte layer_scalar, say):
  // kernels read whole values, so such a tensor gets an aligned copy of its own.
  std::vector<const TensorInfo*> misaligned;
  std::erase_if(used, [&](const TensorInfo* t) {
    const bool off = t->file_offset % std::max<std::size_t>(1, dtype_size(t->dtype)) != 0;
    if (off) misaligned.push_back(t);
    return off;
  });
  for (const TensorInfo* t : misaligned) {
    auto buf = st.backend->alloc(std::max<uint64_t>(t->bytes, 4));
    if (!buf) return buf.error();
    if (auto s = st.backend->upload(*buf, 0, t->data, t->bytes); !s) return s;
    st.spans.push_back(WeightSpan{t->file_index, t->file_offset, t->file_offset + t->bytes, std::move(*buf), true});
  }
  const std::size_t first_wrapped = st.spans.size();
  std::vector<const std::byte*> host;  // the mapping of each span's file
  for (const TensorInfo* t : used) {
    const uint64_t begin = t->file_offset / kPage * kPage, end = t->file_offset + t->bytes;
    if (st.spans.size() > first_wrapped && st.spans.back().file == t->file_index && begin <= st.spans.back().end) {
      st.spans.back().end = std::max(st.spans.back().end, end);
      continue;
    }
    st.spans.push_back(WeightSpan{t->file_index, begin, end, {}, false});
    host.push_back(t->data - t->file_offset);
  }
  for (std::size_t i = first_wrapped; i < st.spans.size(); ++i) {
    auto& s = st.spans[i];
    auto buf = st.backend->wrap_host(host[i - first_wrapped] + s.begin, s.end - s.begin);
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
  m->family_ = families::family_for(c);
  if (!m->family_) return make_error("no graph builder for architecture (model_type) '" + c.architecture + "'");
  for (int i = 0; i < c.num_layers && !m->family_->builds_linear_attention(); ++i)
    if (c.layer_type(i) == LayerType::kLinearAttention)
      return make_error("layer " + std::to_string(i) + " is a linear-attention (recurrent) layer, which the " + m->family_->name() +
                        " family does not build");
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
    // Attention sinks: the ATTENTION op reads them as float32 on the backend.
    for (uint32_t i = st.first; i < st.end; ++i) {
      Layer& L = m->layers_[i];
      if (L.sink_values.empty()) continue;
      const uint64_t bytes = L.sink_values.size() * sizeof(float);
      auto buf = st.backend->alloc(bytes);
      if (!buf) return buf.error();
      if (auto s = st.backend->upload(*buf, 0, L.sink_values.data(), bytes); !s) return s.error();
      L.sinks = buf->get();
      st.sinks.push_back(std::move(*buf));
    }
  }

  // MLA keeps its latent in the cache only where every stage's backend runs the absorbed products
  // (HEAD_MATMUL, ABI 2.4) with its kv_b weights; else every layer runs expanded per head. Decided
  // before the activations and the cache are sized (both read config().mla.latent_cache).
  if (c.mla.enabled() && c.mla.latent_cache) {
    const uint32_t NOPE = uint32_t(c.mla.qk_nope_head_dim), V = uint32_t(c.value_head_dim());
    sl_head_matmul_params uk{sizeof(sl_head_matmul_params), uint32_t(c.num_heads), NOPE + V, 0, NOPE, 1};
    sl_head_matmul_params uv{sizeof(sl_head_matmul_params), uint32_t(c.num_heads), NOPE + V, NOPE, V, 0};
    for (const auto& st : m->stages_)
      for (uint32_t i = st.first; i < st.end; ++i) {
        const sl_weight& kv_b = m->layers_[i].kv_b;
        if (!st.backend->runs_head_matmul(kv_b, uk) || !st.backend->runs_head_matmul(kv_b, uv)) m->config_.mla.latent_cache = false;
      }
  }

  if (c.moe.enabled()) {
    auto layout = ExpertLayout::find(c, tensors);
    if (!layout) return layout.error();
    m->experts_ = std::move(*layout);
    for (int i = 0; i < c.num_layers; ++i) m->layers_[i].moe_index = m->experts_->moe_layer_of(i);
    // Expert weights reach the backend as host memory wrapped per use: say so now if a backend that
    // runs MoE layers cannot run their form. MXFP4 experts stay MXFP4 on a stage whose backend
    // multiplies that form (2.3) for every layer's shapes; elsewhere they go as bf16.
    const bool mxfp4 = m->experts_->form() == ExpertLayout::Form::kFusedMxfp4;
    for (auto& st : m->stages_) {
      st.mxfp4_experts = mxfp4;
      for (uint32_t i = st.first; i < st.end; ++i) {
        const int l = m->layers_[i].moe_index;
        if (l < 0) continue;
        for (auto p : {ExpertLayout::kGate, ExpertLayout::kUp, ExpertLayout::kDown}) {
          const auto& proj = m->experts_->projection(static_cast<uint32_t>(l), p);
          if (mxfp4 && !st.backend->runs_mxfp4(proj.rows, proj.cols)) st.mxfp4_experts = false;
        }
      }
    }
    for (const auto& st : m->stages_)
      for (uint32_t i = st.first; i < st.end; ++i) {
        const int l = m->layers_[i].moe_index;
        if (l < 0 || st.mxfp4_experts) continue;
        for (auto p : {ExpertLayout::kGate, ExpertLayout::kUp, ExpertLayout::kDown}) {
          const auto& proj = m->experts_->projection(static_cast<uint32_t>(l), p);
          sl_weight form{};
          form.struct_size = sizeof(form);
          form.dtype = proj.quantized() ? static_cast<uint32_t>(SL_DTYPE_U32) : proj.dtype;
          form.rows = proj.rows;
          form.cols = proj.cols;
          form.bits = proj.bits;
          form.group_size = proj.group_size;
          form.scale_dtype = proj.scale_dtype;
          if (!st.backend->runs_weight(SL_OP_MATMUL, form))
            return make_error("backend '" + st.backend->name() + "' cannot multiply the experts' weights (" +
                              (proj.bits ? std::to_string(proj.bits) + "-bit" : std::string("this dtype")) + ")");
        }
      }
  }
  uint64_t lookup_bytes = 0;
  for (const auto& [name, t] : tensors.tensors()) {
    m->weight_bytes_ += t.bytes;
    const bool lookup = name.find("embed_tokens") != std::string::npos &&
                        !(c.tie_word_embeddings && name.find("embed_tokens_per_layer") == std::string::npos);
    if (lookup) lookup_bytes += t.bytes;
  }
  {
    const uint64_t experts = m->experts_ ? m->experts_->total_bytes() : 0;
    const uint64_t picked = c.moe.n_experts > 0 ? experts * static_cast<uint64_t>(c.moe.top_k) / c.moe.n_experts : 0;
    m->decode_bytes_per_token_ = m->weight_bytes_ - std::min(m->weight_bytes_, lookup_bytes + experts) + picked;
  }
  for (int i = 0; i < c.num_layers; ++i) {
    const RopeConfig& r = c.rope_of(i);
    m->layer_rope_.push_back({r.inverse_frequencies(c.rotary_dim_of(i)), r.attention_scaling()});
    if (r.scaling == RopeScaling::kLongRope) {
      RopeConfig past = r;
      past.short_factor = past.long_factor;
      m->layer_long_rope_.push_back({past.inverse_frequencies(c.rotary_dim_of(i)), past.attention_scaling()});
    }
  }
  // A KV-sharing layer reads its source's cache: both must run on one backend.
  for (int i = 0; i < c.num_layers; ++i)
    for (const auto& st : m->stages_)
      if (uint32_t(i) >= st.first && uint32_t(i) < st.end && uint32_t(c.kv_source_of(i)) < st.first)
        return make_error("layer " + std::to_string(i) + " attends layer " + std::to_string(c.kv_source_of(i)) +
                          "'s K/V (num_kv_shared_layers): the two must run on one backend; split the model elsewhere");
  return m;
}

// The same binding, recorded instead of done: which bytes each part of the model needs.
Result<WeightFootprint> Transformer::footprint(const ModelConfig& config, const SafetensorsSet& tensors) {
  Transformer m(config);
  m.family_ = families::family_for(config);
  if (!m.family_) return make_error("no graph builder for architecture (model_type) '" + config.architecture + "'");
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
  f.tied_head = !(tensors.find(m.family_->tensor_names().lm_head) && !config.tie_word_embeddings);
  f.head_bytes = *head - (f.tied_head ? f.embed_bytes : 0);
  for (uint32_t i = 0; i < L; ++i) {
    auto layer = bytes_of(i, i + 1, false, false);
    if (!layer) return layer.error();
    f.layer_bytes.push_back(*layer);
  }
  return f;
}

bool Transformer::experts_in_mxfp4() const {
  return experts_ && experts_->form() == ExpertLayout::Form::kFusedMxfp4 &&
         std::all_of(stages_.begin(), stages_.end(), [](const Stage& st) { return st.mxfp4_experts; });
}

Status Transformer::attach_expert_store(ExpertStoreHandle* store) {
  store_ = store;
  for (Stage& st : stages_) st.bound_experts.clear();
  if (!store || !experts_ || !store->lends_stable_memory() || experts_->form() != ExpertLayout::Form::kSeparate) return {};
  const uint32_t E = experts_->n_experts();
  std::vector<uint32_t> all(E);
  std::iota(all.begin(), all.end(), 0u);
  std::vector<bool> unbound(stages_.size(), false);  // a stage whose device ran out: experts wrapped per pass there
  for (uint32_t m = 0; m < experts_->n_moe_layers(); ++m) {
    const uint32_t layer = static_cast<uint32_t>(experts_->model_layer(m));
    auto st = std::find_if(stages_.begin(), stages_.end(), [&](const Stage& s) { return layer >= s.first && layer < s.end; });
    if (st == stages_.end() || unbound[st - stages_.begin()]) continue;
    std::vector<const void*> parts;
    if (auto s = store->acquire(m, all, parts); !s) return s;
    BoundExperts bound;
    const Status bind = bind_experts(*st, m, parts, bound);
    store->release(m, all);
    if (!bind) {
      // The device cannot hold every expert beside the rest: this stage's experts go back to being
      // wrapped as each pass routes them (slow on a GPU: an upload a pass), not a failed load.
      std::fprintf(stderr, "sluice: the experts do not all fit the %s backend (%s); they are sent each pass instead "
                           "(slow: --gpu-layers with fewer layers keeps them in host memory)\n",
                   st->backend->name().c_str(), bind.message().c_str());
      unbound[st - stages_.begin()] = true;
      st->bound_experts.clear();
      continue;
    }
    st->bound_experts.emplace(m, std::move(bound));
  }
  return {};
}

Status Transformer::bind_experts(Stage& st, uint32_t m, const std::vector<const void*>& parts, BoundExperts& out) const {
  const BackendHandle& backend = *st.backend;
  const uint32_t E = experts_->n_experts(), P = experts_->n_parts();
  auto part_ptr = [&](uint32_t e, uint32_t p) { return static_cast<const std::byte*>(parts[std::size_t(e) * P + p]); };
  // Each part of every expert one run of memory, expert e at e · stride (MLX's stacked tensors)?
  bool runs = true;
  for (uint32_t p = 0; p < P && runs; ++p) {
    const uint64_t stride = experts_->part(m, 0, p).bytes;
    for (uint32_t e = 1; e < E && runs; ++e)
      runs = experts_->part(m, e, p).bytes == stride && part_ptr(e, p) == part_ptr(0, p) + uint64_t(e) * stride;
  }
  const bool copies = !backend.has_cap(SL_CAP_UNIFIED);  // a device that keeps its own copy either way
  if (runs || copies) {
    for (uint32_t p = 0; p < P; ++p) {
      const uint64_t stride = experts_->part(m, 0, p).bytes;
      Result<Buffer> buf = runs ? backend.wrap_host(part_ptr(0, p), stride * E) : backend.alloc(stride * E);
      if (!buf) return buf.error();
      if (!runs)
        for (uint32_t e = 0; e < E; ++e) {
          if (experts_->part(m, e, p).bytes != stride) return make_error("experts of one layer differ in size");
          if (auto s = backend.upload(*buf, uint64_t(e) * stride, part_ptr(e, p), stride); !s) return s;
        }
      out.stacks.push_back(std::move(*buf));
      out.strides.push_back(stride);
    }
  } else {
    out.per_expert.resize(E);
    for (uint32_t e = 0; e < E; ++e)
      for (uint32_t p = 0; p < P; ++p) {
        auto buf = backend.wrap_host(part_ptr(e, p), experts_->part(m, e, p).bytes);
        if (!buf) return buf.error();
        out.per_expert[e].push_back(std::move(*buf));
      }
    return {};
  }
  // Chosen on the device: softmax top-k routing, every stride exactly an expert's matrix (the stacks
  // read as [E · rows, cols] weights), and a backend that runs the three ops.
  const MoeConfig& moe = config_.moe;
  if (moe.routing == MoeRouting::kSigmoidGroupLimited || !layers_[experts_->model_layer(m)].router_choice_bias.empty()) return {};
  const uint32_t per_part = P / 3;
  for (uint32_t p = 0; p < 3; ++p) {
    const ExpertProjection& proj = experts_->projection(m, static_cast<ExpertLayout::Projection>(p));
    sl_weight& w = out.stacked[p];
    w.struct_size = sizeof(sl_weight);
    w.data = out.stacks[p * per_part].get();
    w.dtype = proj.dtype;
    w.rows = proj.rows * E;
    w.cols = proj.cols;
    if (proj.quantized()) {
      w.bits = proj.bits;
      w.group_size = proj.group_size;
      w.scale_dtype = proj.scale_dtype;
      w.scales = out.stacks[p * per_part + 1].get();
      w.biases = out.stacks[p * per_part + 2].get();
    }
    const uint64_t row = graph::weight_row_bytes(w), srow = graph::weight_row_scale_bytes(w);
    if (row == 0 || out.strides[p * per_part] != row * proj.rows) return {};
    if (proj.quantized() && (srow == 0 || out.strides[p * per_part + 1] != srow * proj.rows || out.strides[p * per_part + 2] != srow * proj.rows))
      return {};
  }
  // MATMUL_ID reads a stack as one weight: each must fit one device allocation (a larger buffer is
  // chunks, which the host route still addresses expert by expert).
  const uint64_t max_alloc = backend.device().max_alloc;
  for (std::size_t p = 0; p < out.stacks.size(); ++p)
    if (max_alloc && out.strides[p] * E > max_alloc) return {};
  sl_moe_route_params route{};
  route.struct_size = sizeof(route);
  route.k = static_cast<uint32_t>(moe.top_k);
  route.kind = moe.routing == MoeRouting::kTopKSoftmax ? SL_ROUTE_TOPK_SOFTMAX : SL_ROUTE_SOFTMAX_TOPK;
  route.normalize = moe.normalize_top_k ? 1 : 0;
  if (!backend.runs_device_routing(E, route, out.stacked)) return {};
  const std::vector<float>& scale = layers_[experts_->model_layer(m)].expert_scale;
  if (!scale.empty()) {
    if (scale.size() != E) return {};
    auto buf = backend.alloc(uint64_t(E) * 4);
    if (!buf) return buf.error();
    if (auto s = backend.upload(*buf, 0, scale.data(), uint64_t(E) * 4); !s) return s;
    out.factors_buffer = std::move(*buf);
    out.factors.struct_size = sizeof(sl_weight);
    out.factors.data = out.factors_buffer.get();
    out.factors.dtype = SL_DTYPE_F32;
    out.factors.rows = 1;
    out.factors.cols = E;
  }
  out.device_routing = true;
  return {};
}

bool Transformer::routes_on_device(uint32_t moe_layer) const {
  if (!experts_ || moe_layer >= experts_->n_moe_layers()) return false;
  const uint32_t layer = static_cast<uint32_t>(experts_->model_layer(moe_layer));
  for (const Stage& st : stages_)
    if (layer >= st.first && layer < st.end) {
      auto it = st.bound_experts.find(moe_layer);
      return device_routing_allowed_ && it != st.bound_experts.end() && it->second.device_routing;
    }
  return false;
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
    // Sized for the widest layer (Gemma 4's full layers have wider heads).
    const uint64_t H = c.hidden_size, QD = uint64_t(c.num_heads) * std::max(c.max_head_dim(), c.value_head_dim());
    const uint64_t KD = uint64_t(c.max_kv_width()), VD = KD, OD = QD;
    const uint64_t ffn = std::max<uint64_t>({uint64_t(std::max(0, c.intermediate_size)) * (c.double_wide_shared_mlp ? 2 : 1),
                                             uint64_t(c.moe.expert_intermediate), uint64_t(c.moe.shared_intermediate)});
    for (auto [buf, size] : {std::pair{&a.x, H}, {&a.h, H}, {&a.q, QD}, {&a.k, KD}, {&a.v, VD}, {&a.attn, OD}, {&a.o, H},
                             {&a.gate, ffn}, {&a.up, ffn}, {&a.act, ffn}, {&a.expert_in, H}, {&a.expert_out, H}, {&a.zeros, H},
                             {&a.router_logits, uint64_t(std::max(1, c.moe.n_experts))},
                             {&a.next_router_logits, uint64_t(std::max(1, c.moe.n_experts))}}) {
      if (auto s = grow(*buf, size * n); !s) return s;
    }
    if (c.moe.dense_beside)
      for (Buffer* buf : {&a.dense_out, &a.router_in})
        if (auto s = grow(*buf, H * n); !s) return s;
    if (c.mla.enabled()) {
      const uint64_t NH = uint64_t(c.num_heads), KL = uint64_t(c.mla.kv_lora_rank), R = uint64_t(c.mla.qk_rope_head_dim);
      for (auto [buf, size] : {std::pair{&a.mla_q_latent, uint64_t(std::max(1, c.mla.q_lora_rank))}, {&a.mla_q, NH * c.head_dim},
                               {&a.mla_kv_latent, KL + R}, {&a.mla_kv_normed, KL},
                               {&a.mla_kv, NH * uint64_t(c.mla.qk_nope_head_dim + c.value_head_dim())}})
        if (auto s = grow(*buf, size * n); !s) return s;
      if (c.mla.latent_cache) {
        const uint64_t NOPE = uint64_t(c.mla.qk_nope_head_dim);
        for (auto [buf, size] : {std::pair{&a.mla_q_nope, NH * NOPE}, {&a.mla_q_pe, NH * R}, {&a.mla_q_lat, NH * KL},
                                 {&a.mla_query, NH * (KL + R)}, {&a.mla_k_pe, R}, {&a.mla_k, KL + R}, {&a.mla_o_lat, NH * KL}})
          if (auto s = grow(*buf, size * n); !s) return s;
      }
    }
    if (c.per_layer_input_width > 0) {
      const uint64_t P = uint64_t(c.per_layer_input_width);
      for (auto [buf, size] : {std::pair{&a.per_layer_all, P * c.num_layers}, {&a.per_layer_tokens, P * c.num_layers},
                               {&a.per_layer, P}, {&a.per_layer_gate, P}})
        if (auto s = grow(*buf, size * n); !s) return s;
    }
    // Only the models that have them: gated attention's queries and gates, Gated DeltaNet's activations.
    const LinearAttentionConfig& l = c.linear;
    std::vector<std::pair<Buffer*, uint64_t>> extra;
    if (c.moe.shared_intermediate > 0 && c.moe.shared_gated) extra.push_back({&a.shared_gate_logits, 1});
    if (c.attention_output_gate) {  // two push_backs: GCC 12 misreads an initializer list's copy here (-Warray-bounds)
      extra.emplace_back(&a.q_gate, 2 * QD);
      extra.emplace_back(&a.attn_gate, OD);
    }
    if (l.conv_kernel > 0)
      extra.insert(extra.end(), {{&a.lin_qkv, uint64_t(l.conv_dim())}, {&a.lin_conv, uint64_t(l.conv_dim())},
                                 {&a.lin_z, uint64_t(l.value_dim())}, {&a.lin_a, uint64_t(l.n_v_heads)},
                                 {&a.lin_b, uint64_t(l.n_v_heads)}, {&a.lin_core, uint64_t(l.value_dim())}});
    for (auto [buf, size] : extra)
      if (auto s = grow(*buf, size * n); !s) return s;
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

}  // namespace sluice
