#include "model/expert_layout.h"

#include <numeric>

namespace sluice {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Result<uint32_t> value_dtype(DType d, const std::string& name) {
  switch (d) {
    case DType::kF32: return uint32_t{SL_DTYPE_F32};
    case DType::kF16: return uint32_t{SL_DTYPE_F16};
    case DType::kBF16: return uint32_t{SL_DTYPE_BF16};
    default: return make_error("tensor '" + name + "': dtype " + std::string(to_string(d)) + " cannot hold expert weights");
  }
}

// One projection of every expert of a layer: the tensors and, for each expert, its slice.
struct Source {
  std::vector<const TensorInfo*> weight, scales, biases;  // per expert (stacked: the same tensor E times)
  bool stacked = false;
  // Gate and up fused in one stacked tensor (Gemma 4's experts.gate_up_proj [E, 2F, H]): each expert's
  // slice holds `pieces` projections' rows one after another; this projection is piece `piece`.
  uint32_t pieces = 1, piece = 0;
};

// Checks a projection's tensors against its logical shape [rows, cols] and fills its description
// and every expert's parts.
Status describe(const ModelConfig& config, const std::string& module_of_expert0, const Source& src, uint32_t rows, uint32_t cols,
                uint32_t n_experts, ExpertProjection& proj, std::vector<std::array<sl_expert_part, 3>>& parts) {
  const bool quantized = !src.scales.empty();
  const TensorInfo* w0 = src.weight[0];
  const int64_t slices = src.stacked ? n_experts : 1;
  auto logical = [&](const TensorInfo* t) {
    auto s = src.stacked ? std::vector<int64_t>(t->shape.begin() + 1, t->shape.end()) : t->shape;
    if (!s.empty() && src.pieces > 1) s[0] /= src.pieces;  // one piece's rows (checked whole below)
    return s;
  };
  if (src.pieces > 1 && (w0->shape.size() < 2 || w0->shape[1] % src.pieces != 0))
    return make_error("tensor '" + w0->name + "' has shape " + shape_text(w0->shape) + ": its rows do not split into " +
                      std::to_string(src.pieces) + " projections");
  if (src.stacked && (w0->shape.empty() || w0->shape[0] != n_experts))
    return make_error("tensor '" + w0->name + "' has shape " + shape_text(w0->shape) + ", expected " + std::to_string(n_experts) + " experts first");
  proj.rows = rows;
  proj.cols = cols;
  if (!quantized) {
    auto dt = value_dtype(w0->dtype, w0->name);
    if (!dt) return dt.error();
    proj.dtype = *dt;
    if (logical(w0) != std::vector<int64_t>{rows, cols})
      return make_error("tensor '" + w0->name + "' has shape " + shape_text(w0->shape) + ", expected [" + (src.stacked ? std::to_string(n_experts) + ", " : "") +
                        std::to_string(rows) + ", " + std::to_string(cols) + "]");
  } else {
    const TensorInfo* s0 = src.scales[0];
    if (w0->dtype != DType::kU32) return make_error("tensor '" + w0->name + "' has scales, so it must be U32 packed words");
    ModuleQuantization q = config.quantization.for_module(module_of_expert0);
    const auto ws = logical(w0), ss = logical(s0);
    if (ws.size() != 2 || ss.size() != 2 || ws[0] != rows || ss[0] != rows)
      return make_error("tensor '" + w0->name + "' has shape " + shape_text(w0->shape) + ", which does not quantize [" + std::to_string(rows) + ", " +
                        std::to_string(cols) + "]");
    if (q.bits == 0) {
      q.bits = static_cast<int>(ws[1] * 32 / cols);
      q.group_size = static_cast<int>(cols / ss[1]);
    }
    if (ws[1] * 32 != static_cast<int64_t>(cols) * q.bits || ss[1] * q.group_size != cols)
      return make_error("tensor '" + w0->name + "' (" + shape_text(w0->shape) + ") and its scales (" + shape_text(s0->shape) + ") do not match " +
                        std::to_string(q.bits) + "-bit groups of " + std::to_string(q.group_size) + " over " + std::to_string(cols) + " columns");
    auto sdt = value_dtype(s0->dtype, s0->name);
    if (!sdt) return sdt.error();
    proj.dtype = SL_DTYPE_U32;
    proj.bits = static_cast<uint32_t>(q.bits);
    proj.group_size = static_cast<uint32_t>(q.group_size);
    proj.scale_dtype = *sdt;
  }
  for (uint32_t e = 0; e < n_experts; ++e) {
    const std::size_t i = src.stacked ? 0 : e;
    auto slice = [&](const TensorInfo* t) {
      const uint64_t each = t->bytes / static_cast<uint64_t>(slices), piece = each / src.pieces;
      const uint64_t index = src.stacked ? e : 0;
      return sl_expert_part{t->file_index, t->file_offset + index * each + src.piece * piece, piece};
    };
    parts[e][0] = slice(src.weight[i]);
    if (quantized) {
      parts[e][1] = slice(src.scales[i]);
      parts[e][2] = slice(src.biases[i]);
    }
  }
  return {};
}

}  // namespace

int ExpertLayout::moe_layer_of(int model_layer) const {
  return model_layer >= 0 && model_layer < static_cast<int>(moe_index_.size()) ? moe_index_[model_layer] : -1;
}

uint64_t ExpertLayout::total_bytes() const {
  return std::accumulate(parts_.begin(), parts_.end(), uint64_t{0}, [](uint64_t a, const sl_expert_part& p) { return a + p.bytes; });
}

uint64_t ExpertLayout::expert_bytes(uint32_t moe_layer) const {
  uint64_t total = 0;
  for (uint32_t p = 0; p < n_parts_; ++p) total += part(moe_layer, 0, p).bytes;
  return total;
}

// gpt-oss in MXFP4: per layer, blocks and scales of gate_up and down, and the two biases, stacked.
// The projections are described as bf16 (every MXFP4 value is exact in it): the form they reach a
// backend without MXFP4 in; one with it takes them as MXFP4 (expert_arrange.h).
Status ExpertLayout::add_mxfp4_layer(ExpertLayout& layout, const ModelConfig& config, const SafetensorsSet& tensors, int L, bool first) {
  const int64_t E = config.moe.n_experts, H = config.hidden_size, F = config.moe.expert_intermediate;
  if (H % 32 != 0 || F % 32 != 0)
    return make_error("MXFP4 experts need hidden_size and intermediate_size in multiples of 32 (got " + std::to_string(H) + " and " +
                      std::to_string(F) + ")");
  const std::string prefix = "model.layers." + std::to_string(L) + ".mlp.experts.";
  struct Want {
    const char* name;
    std::vector<int64_t> shape;
    bool codes;  // U8 blocks or scales
  };
  const Want wants[6] = {{"gate_up_proj_blocks", {E, 2 * F, H / 32, 16}, true}, {"gate_up_proj_scales", {E, 2 * F, H / 32}, true},
                         {"down_proj_blocks", {E, H, F / 32, 16}, true},        {"down_proj_scales", {E, H, F / 32}, true},
                         {"gate_up_proj_bias", {E, 2 * F}, false},              {"down_proj_bias", {E, H}, false}};
  const TensorInfo* t[6];
  for (int i = 0; i < 6; ++i) {
    const std::string name = prefix + wants[i].name;
    t[i] = tensors.find(name);
    if (!t[i]) return make_error("model is missing tensor '" + name + "'");
    if (t[i]->shape != wants[i].shape)
      return make_error("tensor '" + name + "' has shape " + shape_text(t[i]->shape) + ", expected " + shape_text(wants[i].shape));
    if (wants[i].codes && t[i]->dtype != DType::kU8) return make_error("tensor '" + name + "' must be U8 (MXFP4 codes or exponents)");
  }
  auto bias_dt = value_dtype(t[4]->dtype, t[4]->name);
  if (!bias_dt) return bias_dt.error();
  auto down_bias_dt = value_dtype(t[5]->dtype, t[5]->name);
  if (!down_bias_dt) return down_bias_dt.error();
  if (*down_bias_dt != *bias_dt) return make_error("tensor '" + t[5]->name + "' differs in dtype from '" + t[4]->name + "'");
  if (!first && (layout.form_ != Form::kFusedMxfp4 || *bias_dt != layout.bias_dtype_))
    return make_error("layer " + std::to_string(L) + ": experts stored in other forms or dtypes than earlier layers'");
  layout.form_ = Form::kFusedMxfp4;
  layout.n_parts_ = 6;
  layout.bias_dtype_ = *bias_dt;
  std::array<ExpertProjection, 3> projections;
  const uint32_t rows[3] = {uint32_t(F), uint32_t(F), uint32_t(H)}, cols[3] = {uint32_t(H), uint32_t(H), uint32_t(F)};
  for (int p = 0; p < 3; ++p) {
    projections[p].rows = rows[p];
    projections[p].cols = cols[p];
    projections[p].dtype = SL_DTYPE_BF16;
  }
  layout.moe_index_[L] = static_cast<int>(layout.model_layer_.size());
  layout.model_layer_.push_back(L);
  layout.projections_.push_back(projections);
  for (uint32_t e = 0; e < static_cast<uint32_t>(E); ++e)
    for (const TensorInfo* ti : t) {
      const uint64_t each = ti->bytes / static_cast<uint64_t>(E);
      layout.parts_.push_back(sl_expert_part{ti->file_index, ti->file_offset + e * each, each});
    }
  return {};
}

// gpt-oss: per layer, four stacked tensors, expert e at slice e of each.
Result<ExpertLayout> ExpertLayout::find_fused(const ModelConfig& config, const SafetensorsSet& tensors) {
  ExpertLayout layout;
  const auto& moe = config.moe;
  const uint32_t E = static_cast<uint32_t>(moe.n_experts);
  const int64_t H = config.hidden_size, F = moe.expert_intermediate;
  layout.n_experts_ = E;
  layout.n_parts_ = 4;
  layout.form_ = Form::kFusedInputMajor;
  layout.moe_index_.assign(config.num_layers, -1);
  bool first = true;
  for (int L = 0; L < config.num_layers; ++L) {
    if (!moe.is_sparse(L)) continue;
    const std::string prefix = "model.layers." + std::to_string(L) + ".mlp.experts.";
    struct Want {
      const char* name;
      std::vector<int64_t> shape;
    };
    const Want wants[4] = {{"gate_up_proj", {E, H, 2 * F}}, {"down_proj", {E, F, H}}, {"gate_up_proj_bias", {E, 2 * F}}, {"down_proj_bias", {E, H}}};
    const TensorInfo* t[4];
    if (tensors.find(prefix + "gate_up_proj_blocks")) {
      if (auto s = add_mxfp4_layer(layout, config, tensors, L, first); !s) return s.error();
      first = false;
      continue;
    }
    for (int i = 0; i < 4; ++i) {
      const std::string name = prefix + wants[i].name;
      t[i] = tensors.find(name);
      if (!t[i]) return make_error("model is missing tensor '" + name + "'");
      if (t[i]->shape != wants[i].shape)
        return make_error("tensor '" + name + "' has shape " + shape_text(t[i]->shape) + ", expected " + shape_text(wants[i].shape));
    }
    auto dt = value_dtype(t[0]->dtype, t[0]->name);
    if (!dt) return dt.error();
    auto down_dt = value_dtype(t[1]->dtype, t[1]->name);
    if (!down_dt) return down_dt.error();
    if (*down_dt != *dt) return make_error("tensor '" + t[1]->name + "' differs in dtype from '" + t[0]->name + "'");
    auto bias_dt = value_dtype(t[2]->dtype, t[2]->name);
    if (!bias_dt) return bias_dt.error();
    auto down_bias_dt = value_dtype(t[3]->dtype, t[3]->name);
    if (!down_bias_dt) return down_bias_dt.error();
    if (*down_bias_dt != *bias_dt) return make_error("tensor '" + t[3]->name + "' differs in dtype from '" + t[2]->name + "'");
    if (!first && (layout.form_ != Form::kFusedInputMajor || *dt != layout.projections_.front()[0].dtype || *bias_dt != layout.bias_dtype_))
      return make_error("layer " + std::to_string(L) + ": experts stored in other forms or dtypes than earlier layers'");
    first = false;
    layout.bias_dtype_ = *bias_dt;
    std::array<ExpertProjection, 3> projections;
    const uint32_t rows[3] = {uint32_t(F), uint32_t(F), uint32_t(H)}, cols[3] = {uint32_t(H), uint32_t(H), uint32_t(F)};
    for (int p = 0; p < 3; ++p) {
      projections[p].rows = rows[p];
      projections[p].cols = cols[p];
      projections[p].dtype = *dt;
    }
    layout.moe_index_[L] = static_cast<int>(layout.model_layer_.size());
    layout.model_layer_.push_back(L);
    layout.projections_.push_back(projections);
    for (uint32_t e = 0; e < E; ++e)
      for (const TensorInfo* ti : t) {
        const uint64_t each = ti->bytes / E;
        layout.parts_.push_back(sl_expert_part{ti->file_index, ti->file_offset + e * each, each});
      }
  }
  return layout;
}

Result<ExpertLayout> ExpertLayout::find(const ModelConfig& config, const SafetensorsSet& tensors) {
  // The fused form where the first MoE layer has it (bf16 or MXFP4 — the latter refused by name there).
  for (int L = 0; L < config.num_layers; ++L)
    if (config.moe.is_sparse(L)) {
      const std::string fused = "model.layers." + std::to_string(L) + ".mlp.experts.gate_up_proj";
      if (tensors.find(fused) || tensors.find(fused + "_blocks")) return find_fused(config, tensors);
      break;
    }
  ExpertLayout layout;
  const auto& moe = config.moe;
  layout.n_experts_ = static_cast<uint32_t>(moe.n_experts);
  layout.moe_index_.assign(config.num_layers, -1);
  const uint32_t H = static_cast<uint32_t>(config.hidden_size), F = static_cast<uint32_t>(moe.expert_intermediate);
  const bool mixtral = config.architecture == "mixtral";
  bool first = true;
  for (int L = 0; L < config.num_layers; ++L) {
    if (!moe.is_sparse(L)) continue;
    const std::string prefix = "model.layers." + std::to_string(L) + ".";
    const std::string stacked_base = prefix + "mlp.switch_mlp.";
    std::array<Source, 3> sources;
    std::array<std::string, 3> expert0_module;
    const char* hf_names[3] = {mixtral ? "w1" : "gate_proj", mixtral ? "w3" : "up_proj", mixtral ? "w2" : "down_proj"};
    const char* mlx_names[3] = {"gate_proj", "up_proj", "down_proj"};
    // Gemma 4: experts.gate_up_proj [E, 2F, H] (gate rows, then up rows) and experts.down_proj [E, H, F],
    // named without ".weight" as transformers stores them, or with it (quantized).
    const std::string fused_base = prefix + "experts.";
    auto fused = [&](const std::string& name) -> const TensorInfo* {
      if (const TensorInfo* t = tensors.find(fused_base + name)) return t;
      return tensors.find(fused_base + name + ".weight");
    };
    if (config.architecture == "gemma4_text") {
      for (int p = 0; p < 3; ++p) {
        Source& s = sources[p];
        const std::string name = p == 2 ? "down_proj" : "gate_up_proj";
        const TensorInfo* w = fused(name);
        if (!w) return make_error("model is missing tensor '" + fused_base + name + "'");
        s.stacked = true;
        s.weight.push_back(w);
        if (p < 2) {
          s.pieces = 2;
          s.piece = static_cast<uint32_t>(p);
        }
        if (const TensorInfo* sc = tensors.find(fused_base + name + ".scales")) {
          const TensorInfo* bi = tensors.find(fused_base + name + ".biases");
          if (!bi) return make_error("tensor '" + fused_base + name + ".scales' exists but its biases are missing");
          s.scales.push_back(sc);
          s.biases.push_back(bi);
        }
        expert0_module[p] = fused_base + name;
      }
    }
    for (int p = 0; p < 3 && config.architecture != "gemma4_text"; ++p) {
      Source& s = sources[p];
      const std::string stacked = stacked_base + mlx_names[p];
      if (const TensorInfo* w = tensors.find(stacked + ".weight")) {
        s.stacked = true;
        s.weight.push_back(w);
        if (const TensorInfo* sc = tensors.find(stacked + ".scales")) {
          const TensorInfo* bi = tensors.find(stacked + ".biases");
          if (!bi) return make_error("tensor '" + stacked + ".scales' exists but '" + stacked + ".biases' is missing");
          s.scales.push_back(sc);
          s.biases.push_back(bi);
        }
        expert0_module[p] = stacked;
        continue;
      }
      for (uint32_t e = 0; e < layout.n_experts_; ++e) {
        const std::string module = prefix + (mixtral ? "block_sparse_moe.experts." : "mlp.experts.") + std::to_string(e) + "." + hf_names[p];
        const TensorInfo* w = tensors.find(module + ".weight");
        if (!w) return make_error("model is missing tensor '" + module + ".weight' (and has no stacked '" + stacked + ".weight')");
        s.weight.push_back(w);
        if (const TensorInfo* sc = tensors.find(module + ".scales")) {
          const TensorInfo* bi = tensors.find(module + ".biases");
          if (!bi) return make_error("tensor '" + module + ".scales' exists but '" + module + ".biases' is missing");
          s.scales.push_back(sc);
          s.biases.push_back(bi);
        } else if (!s.scales.empty()) {
          return make_error("tensor '" + module + ".weight' has no scales while expert 0's has");
        }
        if (e == 0) expert0_module[p] = module;
      }
    }
    const bool quantized = !sources[0].scales.empty();
    if (quantized != !sources[1].scales.empty() || quantized != !sources[2].scales.empty())
      return make_error("layer " + std::to_string(L) + ": experts' gate, up and down must all be quantized or none");
    const uint32_t n_parts = quantized ? 9 : 3;
    if (first) layout.n_parts_ = n_parts;
    else if (n_parts != layout.n_parts_) return make_error("layer " + std::to_string(L) + ": experts quantized unlike other layers'");
    first = false;

    std::array<ExpertProjection, 3> projections;
    std::array<std::vector<std::array<sl_expert_part, 3>>, 3> parts;
    const uint32_t rows[3] = {F, F, H}, cols[3] = {H, H, F};
    for (int p = 0; p < 3; ++p) {
      parts[p].resize(layout.n_experts_);
      if (auto s = describe(config, expert0_module[p], sources[p], rows[p], cols[p], layout.n_experts_, projections[p], parts[p]); !s) return s.error();
    }
    layout.moe_index_[L] = static_cast<int>(layout.model_layer_.size());
    layout.model_layer_.push_back(L);
    layout.projections_.push_back(projections);
    for (uint32_t e = 0; e < layout.n_experts_; ++e)
      for (int p = 0; p < 3; ++p)
        for (uint32_t k = 0; k < n_parts / 3; ++k) layout.parts_.push_back(parts[p][e][k]);
  }
  return layout;
}

}  // namespace sluice
