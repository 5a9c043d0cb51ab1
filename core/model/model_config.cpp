#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <tuple>

#include "util/json.h"

namespace sluice {
namespace {

// Plausible bounds, far above any real model (the largest have vocabularies of ~262K, widths of
// ~16K, 128 layers and heads, 512 experts, contexts of 10M): a value past one is a corrupt or
// hostile file, refused before anything is sized by it.
constexpr long long kMaxVocab = 1LL << 24;
constexpr long long kMaxWidth = 1LL << 17;
constexpr long long kMaxFfnWidth = 1LL << 20;
constexpr long long kMaxLayers = 1LL << 12;
constexpr long long kMaxHeads = 1LL << 12;
constexpr long long kMaxHeadDim = 1LL << 12;
constexpr long long kMaxPositions = 1LL << 28;
constexpr long long kMaxExperts = 1LL << 12;
constexpr std::size_t kMaxEosIds = 1024;
// A float-typed field from a double: positive and finite also once narrowed (1e-60 becomes 0).
bool positive_float(double x) {
  const auto f = static_cast<float>(x);
  return std::isfinite(x) && x > 0 && std::isfinite(f) && f > 0;
}

// yarn's magnitude correction for a context stretched by `scale` (DeepSeek's yarn_get_mscale).
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// Typed reads that tell "absent/null" (use the default) from "present with the wrong type" (an error).
class Fields {
 public:
  Fields(const rapidjson::Value& object, std::string where) : object_(object), where_(std::move(where)) {}

  Result<std::optional<long long>> integer(const char* name) const {
    const auto* v = json::member(object_, name);
    if (!v) return std::optional<long long>{};
    if (v->IsInt64()) return std::optional<long long>{v->GetInt64()};
    // 4096.0 is an integer written by a float-minded tool; 4096.5 is not.
    if (v->IsDouble() && std::floor(v->GetDouble()) == v->GetDouble() && std::abs(v->GetDouble()) < 9e15)
      return std::optional<long long>{static_cast<long long>(v->GetDouble())};
    return wrong(name, "an integer");
  }
  Result<std::optional<double>> number(const char* name) const {
    const auto* v = json::member(object_, name);
    if (!v) return std::optional<double>{};
    if (v->IsNumber()) return std::optional<double>{v->GetDouble()};
    return wrong(name, "a number");
  }
  Result<std::optional<bool>> boolean(const char* name) const {
    const auto* v = json::member(object_, name);
    if (!v) return std::optional<bool>{};
    if (v->IsBool()) return std::optional<bool>{v->GetBool()};
    return wrong(name, "a boolean");
  }
  Result<std::optional<std::string>> string(const char* name) const {
    const auto* v = json::member(object_, name);
    if (!v) return std::optional<std::string>{};
    if (v->IsString()) return std::optional<std::string>{std::string(v->GetString(), v->GetStringLength())};
    return wrong(name, "a string");
  }
  const std::string& where() const { return where_; }

 private:
  Error wrong(const char* name, const char* what) const {
    return make_error(where_ + ": '" + name + "' must be " + what);
  }
  const rapidjson::Value& object_;
  std::string where_;
};

#define SLUICE_TRY_ASSIGN(lhs, expr)        \
  auto lhs##_result = (expr);               \
  if (!lhs##_result) return lhs##_result.error(); \
  auto lhs = std::move(*lhs##_result)

// eos_token_id: an int or a list of ints; appended to `out` without duplicates.
Status collect_eos(const rapidjson::Value& doc, const std::string& where, std::vector<int32_t>& out) {
  const auto* v = json::member(doc, "eos_token_id");
  if (!v) return {};
  auto add = [&](const rapidjson::Value& id) -> Status {
    if (!id.IsInt()) return make_error(where + ": 'eos_token_id' must be an integer or a list of integers");
    if (std::find(out.begin(), out.end(), id.GetInt()) == out.end()) out.push_back(id.GetInt());
    return {};
  };
  if (v->IsArray()) {
    // Checked against every id kept so far, so the list is bounded (real ones hold a handful).
    if (v->Size() > kMaxEosIds)
      return make_error(where + ": 'eos_token_id' lists " + std::to_string(v->Size()) + " ids, more than " +
                        std::to_string(kMaxEosIds));
    for (const auto& id : v->GetArray()) {
      auto s = add(id);
      if (!s) return s;
    }
    return {};
  }
  return add(*v);
}

// MLX's quantization block: defaults plus per-module overrides (an object, or false = not quantized).
Status parse_quantization(const rapidjson::Value& q, const std::string& where, QuantizationConfig& out) {
  if (!q.IsObject()) return make_error(where + " must be an object");
  auto read = [](const rapidjson::Value& v, const std::string& at, bool need_bits) -> Result<ModuleQuantization> {
    Fields f(v, at);
    SLUICE_TRY_ASSIGN(bits, f.integer("bits"));
    SLUICE_TRY_ASSIGN(group, f.integer("group_size"));
    SLUICE_TRY_ASSIGN(mode, f.string("mode"));
    if (mode && *mode != "affine")
      return make_error(at + ": mode '" + *mode + "' is not supported (only MLX affine quantization)");
    if ((need_bits || bits) && (!bits || !(*bits == 2 || *bits == 3 || *bits == 4 || *bits == 5 || *bits == 6 || *bits == 8)))
      return make_error(at + ": 'bits' must be one of 2, 3, 4, 5, 6, 8");
    if (group && (*group <= 0 || *group > 1024 || *group % 32 != 0))
      return make_error(at + ": 'group_size' must be a multiple of 32 (MLX uses 32, 64 or 128)");
    ModuleQuantization m;
    m.bits = bits ? static_cast<int>(*bits) : 0;
    if (group) m.group_size = static_cast<int>(*group);
    return m;
  };
  auto defaults = read(q, where, true);
  if (!defaults) return defaults.error();
  out.bits = defaults->bits;
  out.group_size = defaults->group_size;
  for (auto it = q.MemberBegin(); it != q.MemberEnd(); ++it) {
    const std::string key(it->name.GetString(), it->name.GetStringLength());
    if (key == "bits" || key == "group_size" || key == "mode") continue;
    if (it->value.IsBool() && !it->value.GetBool()) {
      out.overrides[key] = ModuleQuantization{0, out.group_size};
    } else if (it->value.IsObject()) {
      auto m = read(it->value, where + ": '" + key + "'", false);
      if (!m) return m.error();
      if (!json::member(it->value, "bits")) m->bits = out.bits;
      if (!json::member(it->value, "group_size")) m->group_size = out.group_size;
      out.overrides[key] = *m;
    } else {
      return make_error(where + ": '" + key + "' must be an object {bits, group_size} or false");
    }
  }
  return {};
}

Result<RopeScaling> parse_rope_type(const std::string& type, const std::string& where) {
  if (type == "default" || type.empty()) return RopeScaling::kNone;
  if (type == "linear") return RopeScaling::kLinear;
  if (type == "llama3") return RopeScaling::kLlama3;
  if (type == "yarn") return RopeScaling::kYarn;
  if (type == "dynamic") return RopeScaling::kDynamic;
  if (type == "longrope" || type == "su") return RopeScaling::kLongRope;
  if (type == "proportional") return RopeScaling::kProportional;
  return make_error(where + ": unsupported rope type '" + type +
                    "' (supported: default, linear, llama3, yarn, dynamic, longrope, proportional)");
}

Status parse_rope_object(const rapidjson::Value& params, const std::string& params_where, RopeConfig& rope);

// rope_theta at top level + optional rope_scaling (transformers 4.x), or one rope_parameters object (5.x).
Status parse_rope(const rapidjson::Value& doc, const std::string& where, int max_position, RopeConfig& rope) {
  Fields top(doc, where);
  SLUICE_TRY_ASSIGN(theta, top.number("rope_theta"));
  SLUICE_TRY_ASSIGN(partial, top.number("partial_rotary_factor"));
  if (theta) rope.theta = *theta;
  if (partial) rope.partial_rotary_factor = *partial;
  rope.original_max_position = max_position;
  // Phi-3 keeps the trained context at top level; its longrope factor is how far max_position reaches past it.
  SLUICE_TRY_ASSIGN(top_original, top.integer("original_max_position_embeddings"));
  if (top_original) {
    if (*top_original <= 0 || *top_original > kMaxPositions)
      return make_error(where + ": 'original_max_position_embeddings' must be a positive integer at most " + std::to_string(kMaxPositions));
    rope.original_max_position = static_cast<int>(*top_original);
  }

  const rapidjson::Value* params = json::member(doc, "rope_scaling");
  std::string params_where = where + ": rope_scaling";
  if (!params) {
    params = json::member(doc, "rope_parameters");
    params_where = where + ": rope_parameters";
  }
  if (!params) return {};
  if (!params->IsObject()) return make_error(params_where + " must be an object");
  Fields p(*params, params_where);
  if (const auto* rp = json::member(doc, "rope_parameters"); rp && rp->IsObject()) {
    // rope_parameters carries theta (and in 5.x partial_rotary_factor) even when rope_scaling is also given.
    Fields rpf(*rp, where + ": rope_parameters");
    SLUICE_TRY_ASSIGN(t, rpf.number("rope_theta"));
    SLUICE_TRY_ASSIGN(prf, rpf.number("partial_rotary_factor"));
    if (t) rope.theta = *t;
    if (prf) rope.partial_rotary_factor = *prf;
  }
  SLUICE_TRY_ASSIGN(rope_type, p.string("rope_type"));
  SLUICE_TRY_ASSIGN(legacy_type, p.string("type"));
  if (!rope_type && !legacy_type && json::member(*params, "full_attention")) {
    // Per layer type (Gemma 3, transformers 5.x): the full-attention layers' parameters here, the
    // sliding layers' read by parse_sliding_rope.
    params = json::member(*params, "full_attention");
    params_where += ": full_attention";
    if (!params->IsObject()) return make_error(params_where + " must be an object");
  }
  if (auto s = parse_rope_object(*params, params_where, rope); !s) return s;
  if (top_original && rope.scaling == RopeScaling::kLongRope)  // transformers' rule for Phi-3
    rope.factor = static_cast<double>(max_position) / static_cast<double>(*top_original);
  return {};
}

// Gemma 3's sliding layers rotate with their own parameters: rope_parameters.sliding_attention
// (transformers 5.x) or rope_local_base_freq (4.x; default 10 000), unscaled.
Status parse_sliding_rope(const rapidjson::Value& doc, const std::string& where, ModelConfig& c) {
  RopeConfig local;  // every dimension of the head turns unless the sliding parameters say otherwise
  local.original_max_position = c.rope.original_max_position;
  const auto* rp = json::member(doc, "rope_parameters");
  if (const auto* s = rp ? json::member(*rp, "sliding_attention") : nullptr) {
    if (!s->IsObject()) return make_error(where + ": rope_parameters: sliding_attention must be an object");
    if (auto st = parse_rope_object(*s, where + ": rope_parameters: sliding_attention", local); !st) return st;
  } else {
    Fields f(doc, where);
    SLUICE_TRY_ASSIGN(base, f.number("rope_local_base_freq"));
    local.theta = base.value_or(10000.0);
  }
  if (!(std::isfinite(local.theta) && local.theta > 1)) return make_error(where + ": the sliding layers' rope_theta must be greater than 1 and finite");
  c.sliding_rope = local;
  return {};
}

// One rope parameters object: its theta and rotated fraction where it has them, its scaling kind
// and that kind's values.
Status parse_rope_object(const rapidjson::Value& params, const std::string& params_where, RopeConfig& rope) {
  Fields p(params, params_where);
  SLUICE_TRY_ASSIGN(own_theta, p.number("rope_theta"));
  SLUICE_TRY_ASSIGN(own_partial, p.number("partial_rotary_factor"));
  if (own_theta) rope.theta = *own_theta;
  if (own_partial) rope.partial_rotary_factor = *own_partial;
  SLUICE_TRY_ASSIGN(rope_type, p.string("rope_type"));
  SLUICE_TRY_ASSIGN(legacy_type, p.string("type"));
  auto scaling = parse_rope_type(rope_type ? *rope_type : legacy_type.value_or("default"), params_where);
  if (!scaling) return scaling.error();
  rope.scaling = *scaling;

  SLUICE_TRY_ASSIGN(factor, p.number("factor"));
  SLUICE_TRY_ASSIGN(low, p.number("low_freq_factor"));
  SLUICE_TRY_ASSIGN(high, p.number("high_freq_factor"));
  SLUICE_TRY_ASSIGN(original, p.integer("original_max_position_embeddings"));
  SLUICE_TRY_ASSIGN(beta_fast, p.number("beta_fast"));
  SLUICE_TRY_ASSIGN(beta_slow, p.number("beta_slow"));
  SLUICE_TRY_ASSIGN(attention_factor, p.number("attention_factor"));
  SLUICE_TRY_ASSIGN(truncate, p.boolean("truncate"));
  if (truncate) rope.truncate = *truncate;
  SLUICE_TRY_ASSIGN(mscale, p.number("mscale"));
  SLUICE_TRY_ASSIGN(mscale_all_dim, p.number("mscale_all_dim"));
  for (auto m : {mscale, mscale_all_dim})
    if (m && !(std::isfinite(*m) && *m >= 0)) return make_error(params_where + ": 'mscale' and 'mscale_all_dim' must be finite and >= 0");
  rope.mscale = mscale;
  rope.mscale_all_dim = mscale_all_dim;
  if (original && (*original <= 0 || *original > kMaxPositions))
    return make_error(params_where + ": original_max_position_embeddings must be a positive integer at most " +
                      std::to_string(kMaxPositions));
  if (factor) rope.factor = *factor;
  if (low) rope.low_freq_factor = *low;
  if (high) rope.high_freq_factor = *high;
  if (original) rope.original_max_position = static_cast<int>(*original);
  if (beta_fast) rope.beta_fast = *beta_fast;
  if (beta_slow) rope.beta_slow = *beta_slow;
  if (attention_factor) rope.attention_factor = *attention_factor;

  // Every value below feeds the frequency table: NaN or infinity there would be NaN logits, not an error.
  if (rope.scaling != RopeScaling::kNone && !(std::isfinite(rope.factor) && rope.factor > 0))
    return make_error(params_where + ": 'factor' must be positive");
  for (double x : {rope.low_freq_factor, rope.high_freq_factor, rope.beta_fast, rope.beta_slow})
    if (!(std::isfinite(x) && x > 0))
      return make_error(params_where + ": low_freq_factor, high_freq_factor, beta_fast and beta_slow must be positive");
  if (rope.attention_factor && !std::isfinite(*rope.attention_factor))
    return make_error(params_where + ": 'attention_factor' must be finite");
  if (rope.scaling == RopeScaling::kLlama3 && !(rope.high_freq_factor > rope.low_freq_factor))
    return make_error(params_where + ": llama3 needs high_freq_factor > low_freq_factor");
  if (rope.scaling == RopeScaling::kLongRope) {
    auto read = [&](const char* name, std::vector<double>& out) -> Status {
      const auto* v = json::member(params, name);
      if (!v || !v->IsArray()) return make_error(params_where + ": longrope needs '" + name + "', a list of numbers");
      if (v->Size() > kMaxHeadDim) return make_error(params_where + ": '" + name + "' is longer than any head");
      out.clear();
      for (const auto& x : v->GetArray()) {
        if (!x.IsNumber() || !(std::isfinite(x.GetDouble()) && x.GetDouble() > 0))
          return make_error(params_where + ": '" + name + "' entries must be positive numbers");
        out.push_back(x.GetDouble());
      }
      return {};
    };
    if (auto s = read("short_factor", rope.short_factor); !s) return s;
    if (auto s = read("long_factor", rope.long_factor); !s) return s;
    if (rope.short_factor.size() != rope.long_factor.size())
      return make_error(params_where + ": short_factor and long_factor differ in length");
  }
  return {};
}

// layer_types as transformers names its entries; anything else is refused by name.
Result<std::vector<LayerType>> parse_layer_types(const rapidjson::Value& doc, const std::string& where, int num_layers) {
  std::vector<LayerType> out;
  const auto* types = json::member(doc, "layer_types");
  if (!types) return out;
  if (!types->IsArray()) return make_error(where + ": 'layer_types' must be a list");
  if (static_cast<int>(types->Size()) != num_layers)
    return make_error(where + ": 'layer_types' has " + std::to_string(types->Size()) + " entries for " + std::to_string(num_layers) +
                      " layers");
  for (int i = 0; i < num_layers; ++i) {
    const auto& t = (*types)[i];
    if (!t.IsString()) return make_error(where + ": 'layer_types' entries must be strings");
    const std::string_view name(t.GetString(), t.GetStringLength());
    if (name == "full_attention") {
      out.push_back(LayerType::kFullAttention);
    } else if (name == "sliding_attention") {
      out.push_back(LayerType::kSlidingAttention);
    } else if (name == "linear_attention") {
      out.push_back(LayerType::kLinearAttention);
    } else {
      return make_error(where + ": layer " + std::to_string(i) + " has layer type '" + std::string(name) +
                        "' (supported: full_attention, sliding_attention, linear_attention)");
    }
  }
  return out;
}

// The window sizes (layer_window) by each architecture's transformers rules; types: layer_types, or empty.
Status parse_window_sizes(const rapidjson::Value& doc, const std::string& where, const std::vector<LayerType>& types, ModelConfig& c) {
  Fields f(doc, where);
  // Absent → transformers' default of 4096; null → no window.
  const bool window_absent = !doc.HasMember("sliding_window");
  SLUICE_TRY_ASSIGN(window_opt, f.integer("sliding_window"));
  const bool gpt_oss = c.architecture == "gpt_oss";
  const long long window = window_opt.value_or(window_absent ? (gpt_oss ? 128 : 4096) : 0);
  if (window < 0 || window > INT32_MAX) return make_error(where + ": 'sliding_window' out of range");

  if (c.architecture == "mistral" || c.architecture == "mixtral") {
    std::fill(c.layer_window.begin(), c.layer_window.end(), static_cast<int>(window));
    return {};
  }
  if (c.architecture == "phi3") {  // every layer when set; transformers' Phi3Config has none by default
    if (!window_absent) std::fill(c.layer_window.begin(), c.layer_window.end(), static_cast<int>(window));
    return {};
  }
  if (gpt_oss) {  // layer_types, else transformers' default: sliding and full layers alternate, sliding first
    for (int i = 0; i < c.num_layers; ++i) {
      const bool sliding = !types.empty() ? types[i] == LayerType::kSlidingAttention : (i + 1) % 2 != 0;
      if (sliding) c.layer_window[i] = static_cast<int>(window);
    }
    return {};
  }
  if (c.architecture == "gemma2" || c.architecture == "gemma3_text" || c.architecture == "gemma4_text") {
    // layer_types, else transformers' default pattern: every `pattern`-th layer full, the rest sliding
    // (Gemma 2 alternates; Gemma 3 and 4 read sliding_window_pattern, default 6; Gemma 4 makes the
    // last layer full whatever the pattern).
    SLUICE_TRY_ASSIGN(pattern_opt, f.integer("sliding_window_pattern"));
    const long long pattern = c.architecture == "gemma2" ? 2 : pattern_opt.value_or(6);
    if (pattern <= 0) return make_error(where + ": 'sliding_window_pattern' must be positive");
    for (int i = 0; i < c.num_layers; ++i) {
      bool sliding = !types.empty() ? types[i] == LayerType::kSlidingAttention : (i + 1) % pattern != 0;
      if (c.architecture == "gemma4_text" && i + 1 == c.num_layers) sliding = false;
      if (sliding) c.layer_window[i] = static_cast<int>(window);
    }
    return {};
  }
  if (c.architecture != "qwen2" && c.architecture != "qwen3") return {};

  SLUICE_TRY_ASSIGN(use_sliding, f.boolean("use_sliding_window"));
  SLUICE_TRY_ASSIGN(max_window_layers, f.integer("max_window_layers"));
  const bool enabled = use_sliding.value_or(false) && window > 0;

  std::vector<bool> sliding(c.num_layers, false);
  if (!types.empty()) {
    for (int i = 0; i < c.num_layers; ++i) sliding[i] = types[i] == LayerType::kSlidingAttention;
  } else {
    const long long first = max_window_layers.value_or(28);
    for (int i = 0; i < c.num_layers; ++i) sliding[i] = i >= first;
  }
  if (!enabled) return {};
  for (int i = 0; i < c.num_layers; ++i)
    if (sliding[i]) c.layer_window[i] = static_cast<int>(window);
  return {};
}

// Sliding window per layer, following transformers: mistral windows every layer when sliding_window is set;
// qwen2/qwen3 only when use_sliding_window, on layers whose layer_types entry is "sliding_attention"
// (layer_types defaults to sliding for layers >= max_window_layers). Other architectures keep no window
// (their transformers attention has none). Then layer_types: linear attention where config.json says
// so, sliding where a window applies, full elsewhere.
Status parse_windows(const rapidjson::Value& doc, const std::string& where, ModelConfig& c) {
  auto types = parse_layer_types(doc, where, c.num_layers);
  if (!types) return types.error();
  c.layer_window.assign(c.num_layers, 0);
  c.layer_types.assign(c.num_layers, LayerType::kFullAttention);
  for (int i = 0; i < c.num_layers && !types->empty(); ++i)
    if ((*types)[i] == LayerType::kLinearAttention) c.layer_types[i] = LayerType::kLinearAttention;
  auto status = parse_window_sizes(doc, where, *types, c);
  if (!status) return status;
  for (int i = 0; i < c.num_layers; ++i) {
    if (c.layer_types[i] == LayerType::kLinearAttention)
      c.layer_window[i] = 0;  // a recurrent layer attends nothing
    else if (c.layer_window[i] > 0)
      c.layer_types[i] = LayerType::kSlidingAttention;
  }
  return {};
}

// Gemma 2 and 3 (transformers' Gemma2Config / Gemma3TextConfig defaults where a field is absent; null
// turns a soft-cap off): the embedding scaled by sqrt(hidden), norms of (1 + weight), attention scaled
// by query_pre_attn_scalar^-1/2, soft-capped scores and logits (Gemma 2), per-head q/k norms (Gemma 3).
Status parse_gemma(const rapidjson::Value& doc, const std::string& where, bool has_hidden_act, ModelConfig& c) {
  Fields f(doc, where);
  const bool gemma2 = c.architecture == "gemma2";
  SLUICE_TRY_ASSIGN(activation, f.string("hidden_activation"));
  if (activation) c.hidden_act = *activation;
  else if (!has_hidden_act) c.hidden_act = "gelu_pytorch_tanh";
  c.embed_scale = std::sqrt(static_cast<float>(c.hidden_size));
  c.norm_weight_offset = 1.0f;
  SLUICE_TRY_ASSIGN(scalar, f.number("query_pre_attn_scalar"));
  const double q = scalar.value_or(256.0);
  if (!(std::isfinite(q) && q > 0)) return make_error(where + ": 'query_pre_attn_scalar' must be positive");
  c.attention_scale = static_cast<float>(1.0 / std::sqrt(q));
  auto softcap = [&](const char* name, double fallback, float& out) -> Status {
    SLUICE_TRY_ASSIGN(v, f.number(name));
    const double cap = v ? *v : doc.HasMember(name) ? 0.0 : fallback;  // present but null: none
    if (!(std::isfinite(cap) && cap >= 0 && cap < 1e30)) return make_error(where + ": '" + name + "' must be a positive number or null");
    out = static_cast<float>(cap);
    return {};
  };
  if (auto s = softcap("attn_logit_softcapping", gemma2 ? 50.0 : 0.0, c.attention_softcap); !s) return s;
  if (auto s = softcap("final_logit_softcapping", gemma2 ? 30.0 : 0.0, c.final_logit_softcap); !s) return s;
  c.qk_norm = !gemma2;
  if (c.architecture == "gemma4_text") {
    // Gemma 4 (transformers' Gemma4TextConfig): plain norm weights, scores unscaled (q/k norms carry
    // the scale), V normed without a weight, the final logits capped at 30 unless null.
    c.norm_weight_offset = 0.0f;
    c.attention_scale = 1.0f;
    c.attention_softcap = 0.0f;
    if (auto s = softcap("final_logit_softcapping", 30.0, c.final_logit_softcap); !s) return s;
    c.value_norm = true;
  }
  return {};
}

// Gemma 4's per-layer geometry and inputs: per_layer_config {"<layer>": {head_dim, num_key_value_heads}}
// (transformers >= 5.15) or global_head_dim / num_global_key_value_heads for the full layers (older);
// attention_k_eq_v (full layers' V is their K projection), num_kv_shared_layers, the per-layer inputs
// (hidden_size_per_layer_input, vocab_size_per_layer_input), use_double_wide_mlp.
Status parse_gemma4_layers(const rapidjson::Value& doc, const std::string& where, ModelConfig& c) {
  Fields f(doc, where);
  SLUICE_TRY_ASSIGN(k_eq_v, f.boolean("attention_k_eq_v"));
  c.full_k_eq_v = k_eq_v.value_or(false);
  c.layer_head_dim.assign(c.num_layers, c.head_dim);
  c.layer_kv_heads.assign(c.num_layers, c.num_kv_heads);
  auto set_geometry = [&](int layer, std::optional<long long> dim, std::optional<long long> kv, const std::string& at) -> Status {
    if (dim) {
      if (*dim <= 0 || *dim % 2 || *dim > kMaxHeadDim) return make_error(at + ": head_dim must be positive, even and at most " + std::to_string(kMaxHeadDim));
      c.layer_head_dim[layer] = static_cast<int>(*dim);
    }
    if (kv) {
      if (*kv <= 0 || *kv > c.num_heads || c.num_heads % *kv)
        return make_error(at + ": num_key_value_heads must divide num_attention_heads (" + std::to_string(c.num_heads) + ")");
      c.layer_kv_heads[layer] = static_cast<int>(*kv);
    }
    return {};
  };
  if (const auto* per = json::member(doc, "per_layer_config")) {
    if (!per->IsObject()) return make_error(where + ": 'per_layer_config' must be an object");
    for (auto it = per->MemberBegin(); it != per->MemberEnd(); ++it) {
      const std::string key(it->name.GetString(), it->name.GetStringLength());
      const std::string at = where + ": per_layer_config['" + key + "']";
      char* end = nullptr;
      const long layer = std::strtol(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || layer < 0 || layer >= c.num_layers) return make_error(at + ": not a layer index below num_hidden_layers");
      if (!it->value.IsObject()) return make_error(at + " must be an object");
      Fields l(it->value, at);
      SLUICE_TRY_ASSIGN(heads, l.integer("num_attention_heads"));
      if (heads && *heads != c.num_heads) return make_error(at + ": a layer with its own num_attention_heads is not supported");
      SLUICE_TRY_ASSIGN(dim, l.integer("head_dim"));
      SLUICE_TRY_ASSIGN(kv, l.integer("num_key_value_heads"));
      if (auto s = set_geometry(static_cast<int>(layer), dim, kv, at); !s) return s;
    }
  } else {
    SLUICE_TRY_ASSIGN(global_dim, f.integer("global_head_dim"));
    SLUICE_TRY_ASSIGN(global_kv, f.integer("num_global_key_value_heads"));
    for (int i = 0; i < c.num_layers; ++i)
      if (c.layer_types[i] == LayerType::kFullAttention)
        if (auto s = set_geometry(i, global_dim, c.full_k_eq_v ? global_kv : std::nullopt, where); !s) return s;
  }
  SLUICE_TRY_ASSIGN(shared, f.integer("num_kv_shared_layers"));
  if (shared && (*shared < 0 || *shared >= c.num_layers)) return make_error(where + ": 'num_kv_shared_layers' must be below num_hidden_layers");
  if (shared && *shared > 0) {
    c.kv_shared_from = c.num_layers - static_cast<int>(*shared);
    for (int i = c.kv_shared_from; i < c.num_layers; ++i)
      if (c.kv_source_of(i) == i) return make_error(where + ": KV-sharing layer " + std::to_string(i) + " has no earlier layer of its type to share");
  }
  SLUICE_TRY_ASSIGN(ple, f.integer("hidden_size_per_layer_input"));
  SLUICE_TRY_ASSIGN(ple_vocab, f.integer("vocab_size_per_layer_input"));
  if (ple && (*ple < 0 || *ple > kMaxWidth)) return make_error(where + ": 'hidden_size_per_layer_input' out of range");
  if (ple_vocab && (*ple_vocab <= 0 || *ple_vocab > kMaxVocab)) return make_error(where + ": 'vocab_size_per_layer_input' out of range");
  c.per_layer_input_width = static_cast<int>(ple.value_or(0));
  c.per_layer_vocab = static_cast<int>(ple_vocab.value_or(c.vocab_size));
  if (uint64_t(c.per_layer_input_width) * c.num_layers > uint64_t(kMaxFfnWidth))
    return make_error(where + ": per-layer inputs of " + std::to_string(c.per_layer_input_width) + " values for each of " +
                      std::to_string(c.num_layers) + " layers are too wide");
  SLUICE_TRY_ASSIGN(wide, f.boolean("use_double_wide_mlp"));
  c.double_wide_shared_mlp = wide.value_or(false);
  if (c.rotary_dim_of(c.num_layers - 1) % 2) return make_error(where + ": an odd rotary dimension");
  return {};
}

// Qwen3.5 (transformers' Qwen3_5TextConfig / Qwen3_5MoeTextConfig defaults where a field is absent):
// Gated DeltaNet linear-attention layers (layer_types, else every full_attention_interval-th layer
// full), their sizes and state, gated full attention with per-head q/k norms, (1 + w) norms.
Status parse_qwen3_5(const rapidjson::Value& doc, const std::string& where, ModelConfig& c) {
  Fields f(doc, where);
  LinearAttentionConfig& l = c.linear;
  struct Field {
    const char* name;
    long long fallback, max;
    int* out;
  };
  for (const Field& x : {Field{"linear_conv_kernel_dim", 4, 64, &l.conv_kernel}, Field{"linear_num_key_heads", 16, kMaxHeads, &l.n_k_heads},
                         Field{"linear_num_value_heads", 32, kMaxHeads, &l.n_v_heads},
                         Field{"linear_key_head_dim", 128, kMaxHeadDim, &l.k_head_dim},
                         Field{"linear_value_head_dim", 128, kMaxHeadDim, &l.v_head_dim}}) {
    SLUICE_TRY_ASSIGN(v, f.integer(x.name));
    const long long value = v.value_or(x.fallback);
    const long long low = std::string_view(x.name) == "linear_conv_kernel_dim" ? 2 : 1;
    if (value < low || value > x.max)
      return make_error(where + ": '" + x.name + "' must be an integer in " + std::to_string(low) + ".." + std::to_string(x.max) + ", got " +
                        std::to_string(value));
    *x.out = static_cast<int>(value);
  }
  if (l.n_v_heads % l.n_k_heads != 0)
    return make_error(where + ": linear_num_value_heads " + std::to_string(l.n_v_heads) + " is not a multiple of linear_num_key_heads " +
                      std::to_string(l.n_k_heads));
  const uint64_t state_bytes = (l.conv_state_floats() + l.recurrent_state_floats()) * 4;
  if (state_bytes > (1ull << 30))
    return make_error(where + ": a linear-attention layer's state of " + std::to_string(state_bytes) + " bytes a sequence is past 1 GiB");
  c.linear_state_bytes = state_bytes;
  if (!json::member(doc, "layer_types")) {  // transformers' default pattern
    SLUICE_TRY_ASSIGN(interval, f.integer("full_attention_interval"));
    const long long every = interval.value_or(4);
    if (every <= 0 || every > kMaxLayers) return make_error(where + ": 'full_attention_interval' must be a positive integer");
    for (int i = 0; i < c.num_layers; ++i)
      if ((i + 1) % every != 0) c.layer_types[i] = LayerType::kLinearAttention;
  }
  c.norm_weight_offset = 1.0f;
  c.qk_norm = true;
  c.attention_output_gate = true;
  return {};
}

// DeepSeek-V3's MoE layers (from first_k_dense_replace on): n_routed_experts routed by sigmoid scores
// in groups, and shared experts beside them.
Status parse_deepseek_moe(const rapidjson::Value& doc, const std::string& where, ModelConfig& c) {
  Fields f(doc, where);
  SLUICE_TRY_ASSIGN(experts, f.integer("n_routed_experts"));
  SLUICE_TRY_ASSIGN(top_k, f.integer("num_experts_per_tok"));
  SLUICE_TRY_ASSIGN(moe_ffn, f.integer("moe_intermediate_size"));
  SLUICE_TRY_ASSIGN(shared, f.integer("n_shared_experts"));
  SLUICE_TRY_ASSIGN(n_group, f.integer("n_group"));
  SLUICE_TRY_ASSIGN(topk_group, f.integer("topk_group"));
  SLUICE_TRY_ASSIGN(norm, f.boolean("norm_topk_prob"));
  SLUICE_TRY_ASSIGN(scaling, f.number("routed_scaling_factor"));
  SLUICE_TRY_ASSIGN(first_dense, f.integer("first_k_dense_replace"));
  if (!experts) return {};  // no routed experts: every layer dense
  const long long E = *experts, k = top_k.value_or(0), ffn = moe_ffn.value_or(0), groups = n_group.value_or(1), kept = topk_group.value_or(1);
  if (E <= 0 || E > kMaxExperts) return make_error(where + ": 'n_routed_experts' must be in 1.." + std::to_string(kMaxExperts));
  if (ffn <= 0 || ffn > kMaxFfnWidth) return make_error(where + ": 'moe_intermediate_size' must be a positive integer at most " + std::to_string(kMaxFfnWidth));
  if (groups <= 0 || E % groups != 0 || E / groups < 2)
    return make_error(where + ": 'n_group' must divide n_routed_experts (" + std::to_string(E) + ") into groups of at least 2");
  if (kept <= 0 || kept > groups) return make_error(where + ": 'topk_group' must be in 1..n_group (" + std::to_string(groups) + ")");
  if (k <= 0 || k > kept * (E / groups))
    return make_error(where + ": 'num_experts_per_tok' must be positive and at most the experts of topk_group groups (" +
                      std::to_string(kept * (E / groups)) + ")");
  const long long n_shared = shared.value_or(0);
  if (n_shared < 0 || n_shared * ffn > kMaxFfnWidth) return make_error(where + ": 'n_shared_experts' out of range");
  const double factor = scaling.value_or(1.0);
  if (!positive_float(factor)) return make_error(where + ": 'routed_scaling_factor' must be positive and fit a float");
  const long long dense = first_dense.value_or(0);
  if (dense < 0) return make_error(where + ": 'first_k_dense_replace' must be >= 0");
  MoeConfig& m = c.moe;
  m.n_experts = static_cast<int>(E);
  m.top_k = static_cast<int>(k);
  m.expert_intermediate = static_cast<int>(ffn);
  m.normalize_top_k = norm.value_or(true);
  m.routing = MoeRouting::kSigmoidGroupLimited;
  m.n_group = static_cast<int>(groups);
  m.topk_group = static_cast<int>(kept);
  m.routed_scaling = static_cast<float>(factor);
  m.shared_intermediate = static_cast<int>(n_shared * ffn);
  m.sparse_layer.assign(c.num_layers, false);
  for (int i = 0; i < c.num_layers; ++i) m.sparse_layer[i] = i >= dense;
  return {};
}

// Multi-head latent attention's widths (DeepSeek-V3), after the rope: K and Q heads of
// qk_nope_head_dim + qk_rope_head_dim values (the last qk_rope_head_dim rotated, in adjacent pairs
// with rope_interleave), V heads of v_head_dim; scores scaled by qk_head_dim^-1/2, times yarn's
// mscale(factor, mscale_all_dim)² where the rope says so.
Status parse_mla(const rapidjson::Value& doc, const std::string& where, ModelConfig& c) {
  Fields f(doc, where);
  SLUICE_TRY_ASSIGN(q_rank, f.integer("q_lora_rank"));
  SLUICE_TRY_ASSIGN(kv_rank, f.integer("kv_lora_rank"));
  SLUICE_TRY_ASSIGN(nope, f.integer("qk_nope_head_dim"));
  SLUICE_TRY_ASSIGN(rope, f.integer("qk_rope_head_dim"));
  SLUICE_TRY_ASSIGN(v_dim, f.integer("v_head_dim"));
  SLUICE_TRY_ASSIGN(interleave, f.boolean("rope_interleave"));
  auto width = [&](const std::optional<long long>& v, const char* name, long long def, long long min, long long max, int& out) -> Status {
    const long long x = v.value_or(def);
    if (x < min || x > max)
      return make_error(where + ": '" + name + "' must be an integer in " + std::to_string(min) + ".." + std::to_string(max) + ", got " +
                        std::to_string(x));
    out = static_cast<int>(x);
    return {};
  };
  ModelConfig::Mla& m = c.mla;
  // transformers' defaults (DeepseekV3Config): 1536, 512, 128, 64, 128; q_lora_rank null = a plain q_proj.
  const bool q_null = doc.HasMember("q_lora_rank") && doc["q_lora_rank"].IsNull();
  if (auto s = width(q_null ? std::optional<long long>(0) : q_rank, "q_lora_rank", 1536, 0, kMaxWidth, m.q_lora_rank); !s) return s;
  if (auto s = width(kv_rank, "kv_lora_rank", 512, 1, kMaxWidth, m.kv_lora_rank); !s) return s;
  if (auto s = width(nope, "qk_nope_head_dim", 128, 0, kMaxHeadDim, m.qk_nope_head_dim); !s) return s;
  if (auto s = width(rope, "qk_rope_head_dim", 64, 2, kMaxHeadDim, m.qk_rope_head_dim); !s) return s;
  if (auto s = width(v_dim, "v_head_dim", 128, 1, kMaxHeadDim, c.v_head_dim); !s) return s;
  if (m.qk_rope_head_dim % 2) return make_error(where + ": 'qk_rope_head_dim' must be even");
  if (m.qk_nope_head_dim + m.qk_rope_head_dim > kMaxHeadDim) return make_error(where + ": qk_nope_head_dim + qk_rope_head_dim is too wide");
  // Every other family's query/key heads are even (the attention kernels read them in pairs); so are
  // DeepSeek's released ones (128 + 64).
  if (m.qk_nope_head_dim % 2) return make_error(where + ": 'qk_nope_head_dim' must be even");
  c.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
  c.num_kv_heads = c.num_heads;  // the heads' K and V in the expanded form (layer_cache says what the cache keeps)
  m.latent_cache = m.qk_nope_head_dim > 0;
  c.rope_dims = m.qk_rope_head_dim;
  c.rope_interleaved = interleave.value_or(true);
  double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  if (c.rope.scaling != RopeScaling::kNone && c.rope.mscale_all_dim && *c.rope.mscale_all_dim != 0) {
    const double mscale = yarn_mscale(c.rope.factor, *c.rope.mscale_all_dim);
    scale *= mscale * mscale;
  }
  c.attention_scale = static_cast<float>(scale);
  return {};
}

// Mixture-of-Experts fields, named as each architecture's transformers config names them.
Status parse_moe(const rapidjson::Value& doc, const std::string& where, ModelConfig& c) {
  const bool mixtral = c.architecture == "mixtral", qwen3_moe = c.architecture == "qwen3_moe", olmoe = c.architecture == "olmoe";
  const bool gpt_oss = c.architecture == "gpt_oss";
  const bool qwen3_5_moe = c.architecture == "qwen3_5_moe_text";
  Fields f(doc, where);
  if (c.architecture == "gemma4_text") {  // the MoE block beside every layer's MLP (26B-A4B)
    SLUICE_TRY_ASSIGN(enabled, f.boolean("enable_moe_block"));
    if (!enabled.value_or(false)) return {};
    SLUICE_TRY_ASSIGN(experts, f.integer("num_experts"));
    SLUICE_TRY_ASSIGN(top_k, f.integer("top_k_experts"));
    SLUICE_TRY_ASSIGN(moe_ffn, f.integer("moe_intermediate_size"));
    const long long n_experts = experts.value_or(0), k = top_k.value_or(0), ffn = moe_ffn.value_or(0);
    if (n_experts <= 0 || n_experts > kMaxExperts || k <= 0 || k > n_experts || ffn <= 0 || ffn > kMaxFfnWidth)
      return make_error(where + ": a Gemma 4 MoE block needs num_experts in 1.." + std::to_string(kMaxExperts) +
                        ", 0 < top_k_experts <= it and a positive moe_intermediate_size");
    c.moe.n_experts = static_cast<int>(n_experts);
    c.moe.top_k = static_cast<int>(k);
    c.moe.expert_intermediate = static_cast<int>(ffn);
    c.moe.normalize_top_k = true;
    c.moe.dense_beside = true;
    c.moe.sparse_layer.assign(c.num_layers, true);
    return {};
  }
  if (c.architecture == "deepseek_v3") return parse_deepseek_moe(doc, where, c);
  if (!mixtral && !qwen3_moe && !olmoe && !gpt_oss && !qwen3_5_moe) return {};
  SLUICE_TRY_ASSIGN(local_experts, f.integer("num_local_experts"));
  SLUICE_TRY_ASSIGN(experts, f.integer("num_experts"));
  SLUICE_TRY_ASSIGN(top_k, f.integer("num_experts_per_tok"));
  SLUICE_TRY_ASSIGN(moe_ffn, f.integer("moe_intermediate_size"));
  SLUICE_TRY_ASSIGN(norm, f.boolean("norm_topk_prob"));
  SLUICE_TRY_ASSIGN(sparse_step, f.integer("decoder_sparse_step"));
  SLUICE_TRY_ASSIGN(shared_ffn, f.integer("shared_expert_intermediate_size"));
  MoeConfig& m = c.moe;
  // Defaults where a field is absent: gpt-oss's GptOssConfig (gpt-oss-120b's 128 experts, 4 a token);
  // Qwen3_5MoeTextConfig (256 experts, 8 a token, widths of 512).
  const long long n_experts = experts.value_or(local_experts.value_or(gpt_oss ? 128 : qwen3_5_moe ? 256 : 0));
  const long long k = top_k.value_or(gpt_oss ? 4 : qwen3_5_moe ? 8 : 0);
  if (qwen3_5_moe && !moe_ffn) moe_ffn = 512;
  if (n_experts <= 0 || n_experts > kMaxExperts || k <= 0 || k > n_experts)
    return make_error(where + ": a " + c.architecture + " model needs num_experts (or num_local_experts) in 1.." +
                      std::to_string(kMaxExperts) + " and 0 < num_experts_per_tok <= it");
  m.n_experts = static_cast<int>(n_experts);
  m.top_k = static_cast<int>(k);
  const long long expert_ffn = qwen3_moe || qwen3_5_moe ? moe_ffn.value_or(0) : c.intermediate_size;
  if (expert_ffn <= 0 || expert_ffn > kMaxFfnWidth)
    return make_error(where + ": 'moe_intermediate_size' must be a positive integer at most " +
                      std::to_string(kMaxFfnWidth));
  m.expert_intermediate = static_cast<int>(expert_ffn);
  // Qwen3.5-MoE's router always divides the top k by their sum (its config has no norm_topk_prob).
  m.normalize_top_k = mixtral || qwen3_5_moe ? true : norm.value_or(false);
  m.sparse_layer.assign(c.num_layers, true);
  if (gpt_oss) {  // every layer MoE; a biased router, softmax over its top k; biased experts, clamped SwiGLU
    SLUICE_TRY_ASSIGN(alpha, f.number("swiglu_alpha"));
    SLUICE_TRY_ASSIGN(limit, f.number("swiglu_limit"));
    const double a = alpha.value_or(1.702), l = limit.value_or(7.0);
    if (!positive_float(a) || a > 1e6) return make_error(where + ": 'swiglu_alpha' must be a positive number");
    if (!positive_float(l) || l > 1e6) return make_error(where + ": 'swiglu_limit' must be a positive number");
    m.swiglu_alpha = static_cast<float>(a);
    m.swiglu_limit = static_cast<float>(l);
    m.routing = MoeRouting::kTopKSoftmax;
    m.router_bias = m.expert_bias = true;
  }
  if (qwen3_5_moe) {  // every layer a MoE block with a shared expert
    const long long shared = shared_ffn.value_or(512);
    if (shared <= 0 || shared > kMaxFfnWidth)
      return make_error(where + ": 'shared_expert_intermediate_size' must be a positive integer at most " + std::to_string(kMaxFfnWidth));
    m.shared_intermediate = static_cast<int>(shared);
    m.shared_gated = true;
  }
  if (qwen3_moe) {
    const long long step = sparse_step.value_or(1);
    if (step <= 0) return make_error(where + ": 'decoder_sparse_step' must be positive");
    std::vector<bool> dense_only(c.num_layers, false);  // indexed, not searched: the list may be long
    if (const auto* mlp_only = json::member(doc, "mlp_only_layers")) {
      if (!mlp_only->IsArray()) return make_error(where + ": 'mlp_only_layers' must be a list");
      for (const auto& v : mlp_only->GetArray()) {
        if (!v.IsInt64()) return make_error(where + ": 'mlp_only_layers' entries must be integers");
        if (v.GetInt64() >= 0 && v.GetInt64() < c.num_layers) dense_only[static_cast<std::size_t>(v.GetInt64())] = true;
      }
    }
    for (int i = 0; i < c.num_layers; ++i) m.sparse_layer[i] = !dense_only[i] && (i + 1) % step == 0;
  }
  if (olmoe) {
    if (const auto* clip = json::member(doc, "clip_qkv"))
      return make_error(where + ": 'clip_qkv' (" + std::to_string(clip->IsNumber() ? clip->GetDouble() : 0) + ") is not supported");
  }
  return {};
}

}  // namespace

const std::vector<std::string>& ModelConfig::supported_architectures() {
  static const std::vector<std::string> kArchitectures = {
      "deepseek_v3", "gemma2", "gemma3_text", "gemma4_text", "gpt_oss", "llama",        "mistral",          "mixtral",
      "olmoe",       "phi3",   "qwen2",       "qwen3",       "qwen3_5_text", "qwen3_5_moe_text", "qwen3_moe"};
  return kArchitectures;
}

Result<ModelConfig> ModelConfig::load(const std::filesystem::path& model_dir) {
  const auto config_path = model_dir / "config.json";
  const std::string where = config_path.string();
  auto parsed = json::parse_file(config_path);
  if (!parsed) return parsed.error();
  const rapidjson::Document& doc = *parsed;
  if (!doc.IsObject()) return make_error(where + ": not a JSON object");
  Fields f(doc, where);
  ModelConfig c;

  SLUICE_TRY_ASSIGN(model_type, f.string("model_type"));
  const auto& supported = supported_architectures();
  if (!model_type || std::find(supported.begin(), supported.end(), *model_type) == supported.end()) {
    std::string list;
    for (const auto& a : supported) list += (list.empty() ? "" : ", ") + a;
    return make_error(where + ": " +
                      (model_type ? "unsupported architecture (model_type) '" + *model_type + "'"
                                  : std::string("'model_type' missing")) +
                      "; supported: " + list);
  }
  c.architecture = *model_type;

  auto required_int = [&](const char* name, long long max, int& out) -> Status {
    auto v = f.integer(name);
    if (!v) return v.error();
    if (!*v) return make_error(where + ": '" + name + "' missing");
    if (**v <= 0 || **v > max)
      return make_error(where + ": '" + name + "' must be a positive integer at most " + std::to_string(max) + ", got " +
                        std::to_string(**v));
    out = static_cast<int>(**v);
    return {};
  };
  struct Required {
    const char* name;
    long long max;
    int* out;
  };
  const bool qwen3_5 = c.architecture == "qwen3_5_text" || c.architecture == "qwen3_5_moe_text";
  for (const Required& r : {Required{"vocab_size", kMaxVocab, &c.vocab_size},
                            Required{"hidden_size", kMaxWidth, &c.hidden_size},
                            Required{"intermediate_size", kMaxFfnWidth, &c.intermediate_size},
                            Required{"num_hidden_layers", kMaxLayers, &c.num_layers},
                            Required{"num_attention_heads", kMaxHeads, &c.num_heads}}) {
    // Qwen3.5-MoE has no dense MLP: its config may leave intermediate_size out.
    if (c.architecture == "qwen3_5_moe_text" && std::string_view(r.name) == "intermediate_size" && !json::member(doc, r.name)) continue;
    auto s = required_int(r.name, r.max, *r.out);
    if (!s) return s.error();
  }

  SLUICE_TRY_ASSIGN(kv_heads, f.integer("num_key_value_heads"));
  if (kv_heads && (*kv_heads <= 0 || *kv_heads > c.num_heads))
    return make_error(where + ": 'num_key_value_heads' must be between 1 and num_attention_heads (" +
                      std::to_string(c.num_heads) + "), got " + std::to_string(*kv_heads));
  c.num_kv_heads = static_cast<int>(kv_heads.value_or(c.num_heads));
  if (c.num_heads % c.num_kv_heads != 0)
    return make_error(where + ": num_attention_heads " + std::to_string(c.num_heads) +
                      " is not divisible by num_key_value_heads " + std::to_string(c.num_kv_heads));

  SLUICE_TRY_ASSIGN(head_dim, f.integer("head_dim"));
  // transformers' Qwen3Config defaults head_dim to 128 rather than hidden/heads.
  const bool gemma = c.architecture == "gemma2" || c.architecture == "gemma3_text" || c.architecture == "gemma4_text";
  const bool gpt_oss = c.architecture == "gpt_oss";
  const long long default_head_dim = c.architecture == "qwen3" ? 128 : gemma ? 256 : gpt_oss ? 64 : qwen3_5 ? 256 : c.hidden_size / c.num_heads;
  const long long hd = head_dim.value_or(default_head_dim);
  if (hd <= 0 || hd % 2 != 0 || hd > kMaxHeadDim)
    return make_error(where + ": head_dim must be positive and even (at most " + std::to_string(kMaxHeadDim) +
                      "), got " + std::to_string(hd));
  c.head_dim = static_cast<int>(hd);

  SLUICE_TRY_ASSIGN(max_pos, f.integer("max_position_embeddings"));
  if (max_pos) {
    if (*max_pos <= 0 || *max_pos > kMaxPositions)
      return make_error(where + ": 'max_position_embeddings' must be a positive integer at most " +
                        std::to_string(kMaxPositions) + ", got " + std::to_string(*max_pos));
    c.max_position_embeddings = static_cast<int>(*max_pos);
  }
  SLUICE_TRY_ASSIGN(eps, f.number("rms_norm_eps"));
  if (gpt_oss) c.norm_eps = 1e-5f;  // GptOssConfig's default
  if (eps) {
    if (!positive_float(*eps)) return make_error(where + ": 'rms_norm_eps' must be positive and fit a float");
    c.norm_eps = static_cast<float>(*eps);
  }
  SLUICE_TRY_ASSIGN(tie, f.boolean("tie_word_embeddings"));
  c.tie_word_embeddings = tie.value_or(false);
  SLUICE_TRY_ASSIGN(act, f.string("hidden_act"));
  if (act) c.hidden_act = *act;

  SLUICE_TRY_ASSIGN(attention_bias, f.boolean("attention_bias"));
  SLUICE_TRY_ASSIGN(mlp_bias, f.boolean("mlp_bias"));
  if (c.architecture == "qwen2") {  // q/k/v always biased, o_proj never
    c.attention_bias = true;
    c.attention_out_bias = false;
  } else {
    c.attention_bias = attention_bias.value_or(gpt_oss);  // gpt-oss: q/k/v/o biased unless it says otherwise
    c.attention_out_bias = c.attention_bias;
  }
  c.mlp_bias = mlp_bias.value_or(false);
  c.qk_norm = c.architecture == "qwen3" || c.architecture == "qwen3_moe";
  c.qk_norm_full = c.architecture == "olmoe";
  if (gemma)
    if (auto s = parse_gemma(doc, where, act.has_value(), c); !s) return s.error();
  if (auto s = parse_moe(doc, where, c); !s) return s.error();

  if (gpt_oss) c.rope.theta = 150000.0;  // GptOssConfig's default_theta
  if (qwen3_5) c.rope.partial_rotary_factor = 0.25;  // Qwen3_5TextConfig's default; the file's value, if any, wins
  if (auto s = parse_rope(doc, where, c.max_position_embeddings, c.rope); !s) return s.error();
  if (gpt_oss && !json::member(doc, "rope_scaling") && !json::member(doc, "rope_parameters")) {
    // GptOssConfig's default: yarn 32× over a trained context of 4096, the ramp not rounded.
    c.rope.scaling = RopeScaling::kYarn;
    c.rope.factor = 32.0;
    c.rope.beta_fast = 32.0;
    c.rope.beta_slow = 1.0;
    c.rope.truncate = false;
    c.rope.original_max_position = 4096;
  }
  if (c.architecture == "deepseek_v3")
    if (auto s = parse_mla(doc, where, c); !s) return s.error();
  if (!(std::isfinite(c.rope.theta) && c.rope.theta > 1)) return make_error(where + ": rope_theta must be greater than 1 and finite");
  if (!(c.rope.partial_rotary_factor > 0 && c.rope.partial_rotary_factor <= 1))
    return make_error(where + ": partial_rotary_factor must be in (0, 1]");
  if (c.rotary_dim() <= 0 || c.rotary_dim() % 2 != 0)
    return make_error(where + ": rotary dimension " + std::to_string(c.rotary_dim()) + " must be positive and even");
  if (c.rope.scaling == RopeScaling::kLongRope && c.rope.short_factor.size() != static_cast<std::size_t>(c.rotary_dim() / 2))
    return make_error(where + ": longrope's short_factor and long_factor need " + std::to_string(c.rotary_dim() / 2) +
                      " entries (half the rotary dimension), got " + std::to_string(c.rope.short_factor.size()));
  if (c.architecture == "gemma3_text" || c.architecture == "gemma4_text")
    if (auto s = parse_sliding_rope(doc, where, c); !s) return s.error();
  if (auto s = parse_windows(doc, where, c); !s) return s.error();
  if (c.architecture == "gemma4_text")
    if (auto s = parse_gemma4_layers(doc, where, c); !s) return s.error();
  if (qwen3_5)
    if (auto s = parse_qwen3_5(doc, where, c); !s) return s.error();

  // The rotation tables the forward pass builds from these numbers: a theta or factor so large that a
  // frequency underflows float (rope_theta 1e126 passes "finite and > 1") would leave dimensions that
  // never turn. Proportional rope keeps its trailing frequencies at 0 by design.
  for (int l = 0; l < c.num_layers; ++l) {
    const RopeConfig& r = c.rope_of(l);
    const bool zeros_allowed = r.scaling == RopeScaling::kProportional;
    for (float freq : r.inverse_frequencies(c.rotary_dim_of(l)))
      if (!(std::isfinite(freq) && (std::isnormal(freq) || (zeros_allowed && freq == 0.0f))))
        return make_error(where + ": layer " + std::to_string(l) + "'s rope parameters (rope_theta " + std::to_string(r.theta) +
                          ") give a rotation frequency of " + std::to_string(freq) + ", outside float's range");
    if (!std::isfinite(r.attention_scaling())) return make_error(where + ": layer " + std::to_string(l) + "'s rope attention scaling is not finite");
  }

  if (const auto* q = json::member(doc, "quantization")) {
    if (auto s = parse_quantization(*q, where + ": quantization", c.quantization); !s) return s.error();
  }

  if (auto s = collect_eos(doc, where, c.eos_token_ids); !s) return s.error();
  SLUICE_TRY_ASSIGN(bos, f.integer("bos_token_id"));
  if (bos && (*bos < 0 || *bos > INT32_MAX)) return make_error(where + ": 'bos_token_id' out of range");
  if (bos) c.bos_token_id = static_cast<int32_t>(*bos);

  const auto gen_path = model_dir / "generation_config.json";
  std::error_code ec;
  if (std::filesystem::exists(gen_path, ec)) {
    auto gen = json::parse_file(gen_path);
    if (!gen) return gen.error();
    if (!gen->IsObject()) return make_error(gen_path.string() + ": not a JSON object");
    if (auto s = collect_eos(*gen, gen_path.string(), c.eos_token_ids); !s) return s.error();
    if (!c.bos_token_id) {
      Fields g(*gen, gen_path.string());
      SLUICE_TRY_ASSIGN(gen_bos, g.integer("bos_token_id"));
      if (gen_bos && (*gen_bos < 0 || *gen_bos > INT32_MAX))
        return make_error(gen_path.string() + ": 'bos_token_id' out of range");
      if (gen_bos) c.bos_token_id = static_cast<int32_t>(*gen_bos);
    }
  }
  return c;
}

std::vector<float> RopeConfig::inverse_frequencies(int rotary_dim) const {
  const int half = rotary_dim / 2;
  std::vector<float> out(half > 0 ? half : 0);
  const double two_pi = 2.0 * std::numbers::pi;

  // yarn: dimensions whose wavelength fits in the original context more than beta_fast times keep their
  // frequency (extrapolate), fewer than beta_slow times are divided by factor (interpolate), ramp between.
  double ramp_low = 0, ramp_high = 0;
  if (scaling == RopeScaling::kYarn) {
    auto correction_dim = [&](double rotations) {
      return rotary_dim * std::log(original_max_position / (rotations * two_pi)) / (2.0 * std::log(theta));
    };
    // truncate (transformers' default) rounds the ramp out to whole dimensions; gpt-oss keeps it exact.
    const double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
    ramp_low = std::max(truncate ? std::floor(low) : low, 0.0);
    ramp_high = std::min(truncate ? std::ceil(high) : high, static_cast<double>(rotary_dim - 1));
    if (ramp_low == ramp_high) ramp_high += 0.001;
  }

  for (int i = 0; i < half; ++i) {
    const double base = 1.0 / std::pow(theta, (2.0 * i) / rotary_dim);
    double f = base;
    switch (scaling) {
      case RopeScaling::kNone:
      case RopeScaling::kDynamic:  // identical to default within the original context
        break;
      case RopeScaling::kLinear:
        f = base / factor;
        break;
      case RopeScaling::kProportional: {
        // transformers: int(partial_rotary_factor * head_dim // 2) angles turn, the rest stay still.
        const int turning = static_cast<int>(std::floor(partial_rotary_factor * rotary_dim / 2));
        f = i < turning ? base / factor : 0.0;
        break;
      }
      case RopeScaling::kLongRope:
        // Within the trained context transformers divides by the short factors (it switches the whole
        // table to the long ones only once a sequence passes original_max_position).
        f = static_cast<std::size_t>(i) < short_factor.size() ? base / short_factor[static_cast<std::size_t>(i)] : base;
        break;
      case RopeScaling::kLlama3: {
        const double wavelen = two_pi / base;
        const double low_freq_wavelen = original_max_position / low_freq_factor;
        const double high_freq_wavelen = original_max_position / high_freq_factor;
        if (wavelen > low_freq_wavelen) {
          f = base / factor;
        } else if (wavelen < high_freq_wavelen) {
          f = base;
        } else {
          const double smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
          f = (1.0 - smooth) * base / factor + smooth * base;
        }
        break;
      }
      case RopeScaling::kYarn: {
        const double ramp = std::clamp((i - ramp_low) / (ramp_high - ramp_low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;  // weight of the unscaled frequency
        f = (base / factor) * (1.0 - extrapolation) + base * extrapolation;
        break;
      }
    }
    out[i] = static_cast<float>(f);
  }
  return out;
}

const char* layer_type_name(LayerType type) {
  switch (type) {
    case LayerType::kFullAttention: return "full_attention";
    case LayerType::kSlidingAttention: return "sliding_attention";
    case LayerType::kLinearAttention: return "linear_attention";
  }
  return "full_attention";
}

LayerType ModelConfig::layer_type(int layer) const {
  if (layer >= 0 && layer < static_cast<int>(layer_types.size()) && layer_types[layer] == LayerType::kLinearAttention)
    return LayerType::kLinearAttention;
  if (layer >= 0 && layer < static_cast<int>(layer_window.size()) && layer_window[layer] > 0) return LayerType::kSlidingAttention;
  return LayerType::kFullAttention;
}

int ModelConfig::max_head_dim() const {
  int m = head_dim;
  for (int d : layer_head_dim) m = std::max(m, d);
  return m;
}

int ModelConfig::max_kv_width() const {
  int m = num_kv_heads * std::max(head_dim, value_head_dim());
  for (int i = 0; i < num_layers; ++i) m = std::max(m, kv_heads_of(i) * head_dim_of(i));
  return m;
}

int ModelConfig::rotary_dim_of(int layer) const {
  if (rope_dims > 0) return rope_dims;
  const RopeConfig& r = rope_of(layer);
  if (r.scaling == RopeScaling::kProportional) return head_dim_of(layer);
  return static_cast<int>(head_dim_of(layer) * r.partial_rotary_factor);
}

int ModelConfig::kv_source_of(int layer) const {
  if (kv_shared_from < 0 || layer < kv_shared_from) return layer;
  for (int i = kv_shared_from - 1; i >= 0; --i)
    if (layer_type(i) == layer_type(layer)) return i;
  return layer;
}

int ModelConfig::cache_index(int layer) const {
  if (kv_shared_from < 0 || layer <= kv_shared_from) return layer;  // every layer before keeps one
  int index = kv_shared_from;
  for (int i = kv_shared_from; i < layer; ++i) index += keeps_cache(i) ? 1 : 0;
  return index;
}

LayerCacheSpec ModelConfig::layer_cache(int layer) const {
  LayerCacheSpec s;
  s.type = layer_type(layer);
  if (s.type == LayerType::kLinearAttention) {
    s.state_bytes = linear_state_bytes;
    return s;
  }
  if (mla.enabled() && mla.latent_cache) {  // one latent "head" every query head attends
    s.n_kv_heads = 1;
    s.k_head_dim = static_cast<uint32_t>(mla.kv_lora_rank + mla.qk_rope_head_dim);
    s.v_head_dim = static_cast<uint32_t>(mla.kv_lora_rank);
    return s;
  }
  s.n_kv_heads = static_cast<uint32_t>(kv_heads_of(layer));
  s.k_head_dim = static_cast<uint32_t>(head_dim_of(layer));
  s.v_head_dim = static_cast<uint32_t>(layer_head_dim.empty() ? value_head_dim() : head_dim_of(layer));
  if (s.type == LayerType::kSlidingAttention) s.window = static_cast<uint32_t>(layer_window[layer]);
  return s;
}

float RopeConfig::attention_scaling() const {
  if (scaling != RopeScaling::kYarn && scaling != RopeScaling::kLongRope) return 1.0f;
  if (attention_factor) return static_cast<float>(*attention_factor);
  if (factor <= 1.0) return 1.0f;
  if (scaling == RopeScaling::kYarn && mscale && mscale_all_dim && *mscale != 0 && *mscale_all_dim != 0)
    return static_cast<float>(yarn_mscale(factor, *mscale) / yarn_mscale(factor, *mscale_all_dim));
  if (scaling == RopeScaling::kLongRope)
    return static_cast<float>(std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(original_max_position))));
  return static_cast<float>(0.1 * std::log(factor) + 1.0);
}

}  // namespace sluice
