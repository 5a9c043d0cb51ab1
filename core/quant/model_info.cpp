#include "quant/model_info.h"

#include "model/model_config.h"
#include "model/safetensors.h"
#include "plugin/builtin_codecs.h"
#include "plugin/plugin_registry.h"
#include "util/json.h"

namespace sluice::quant {
namespace {

// Negative sizes are read as absent: they would only feed divisions and products below.
int int_field(const rapidjson::Value& doc, const char* name, int fallback = 0) {
  const auto* v = json::member(doc, name);
  return v && v->IsInt() && v->GetInt() >= 0 ? v->GetInt() : fallback;
}

// The codec's row size for one head vector, or 0 when it cannot be made for this head_dim.
double row_bytes(const sl_kvcodec_api* api, uint32_t head_dim, sl_kv_role role, double* bits) {
  if (!api || !api->create || !api->get_format || !api->destroy) return 0;
  sl_kvcodec* codec = nullptr;
  sl_error err{};
  if (api->create(head_dim, role, "", &codec, &err) != SL_OK || !codec) return 0;
  sl_kv_format f{};
  f.struct_size = sizeof(f);
  api->get_format(codec, &f);
  api->destroy(codec);
  if (bits) *bits = f.bits_per_value;
  return f.row_bytes;
}

}  // namespace

Result<ModelInfo> inspect_model(const std::filesystem::path& dir, const PluginRegistry* registry) {
  auto doc = json::parse_file(dir / "config.json");
  if (!doc) return doc.error();
  if (!doc->IsObject()) return make_error((dir / "config.json").string() + ": not a JSON object");
  ModelInfo m;
  if (const auto* t = json::member(*doc, "model_type"); t && t->IsString()) m.architecture = t->GetString();
  m.layers = int_field(*doc, "num_hidden_layers");
  m.hidden = int_field(*doc, "hidden_size");
  m.heads = int_field(*doc, "num_attention_heads");
  m.kv_heads = int_field(*doc, "num_key_value_heads", m.heads);
  m.head_dim = int_field(*doc, "head_dim", m.heads ? m.hidden / m.heads : 0);
  m.vocab = int_field(*doc, "vocab_size");
  m.ffn = int_field(*doc, "intermediate_size");
  m.experts = int_field(*doc, "num_experts", int_field(*doc, "num_local_experts", int_field(*doc, "n_routed_experts")));  // DeepSeek: routed ones
  m.experts_per_token = int_field(*doc, "num_experts_per_tok", int_field(*doc, "top_k_experts"));  // Gemma 4 names it so
  if (const auto* t = json::member(*doc, "tie_word_embeddings"); t && t->IsBool()) m.tied = t->GetBool();

  auto cfg = ModelConfig::load(dir);  // for per-module quantization; absent for unsupported architectures
  QuantizationConfig qc;
  if (cfg) qc = cfg->quantization;
  if (cfg) m.head_dim = cfg->head_dim;  // as the host reads it (DeepSeek's config.json head_dim is only the rotary part)

  auto set = SafetensorsSet::open_dir(dir);
  if (!set) return set.error();
  m.files = static_cast<int>(set->files().size());
  const auto& all = set->tensors();
  for (const auto& [name, t] : all) {
    ++m.tensors;
    m.bytes += t.bytes;
    if (name.ends_with(".scales") || name.ends_with(".biases")) {
      const std::string module = name.substr(0, name.size() - 7);
      if (all.count(module + ".weight") && all.count(module + ".scales")) {
        m.quantized_bytes += t.bytes;
        continue;  // quantization parameters, not model parameters
      }
    }
    uint64_t n = static_cast<uint64_t>(t.numel());
    // MXFP4 (gpt-oss's experts as OpenAI ships them): `X_blocks` U8 holds two 4-bit values a byte,
    // `X_scales` U8 one exponent per 32 of them — parameters of the blocks, bytes of both.
    const std::string stem = name.ends_with("_blocks") ? name.substr(0, name.size() - 7) : name.ends_with("_scales") ? name.substr(0, name.size() - 7) : "";
    if (!stem.empty() && t.dtype == DType::kU8 && all.count(stem + "_blocks") && all.count(stem + "_scales")) {
      m.quantized_bytes += t.bytes;
      if (name.ends_with("_scales")) continue;
      n *= 2;
      m.quantized_params += n;
      ++m.forms["mxfp4"];
      m.params += n;
      if (name.find(".experts.") != std::string::npos) m.expert_params += n;
      continue;
    }
    const std::string module = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : "";
    const auto sc = module.empty() ? all.end() : all.find(module + ".scales");
    if (sc != all.end() && t.dtype == DType::kU32 && !t.shape.empty() && !sc->second.shape.empty() &&
        t.numel() > 0 && sc->second.numel() > 0) {  // sizes bounded by the file's bytes; none zero to divide by
      ModuleQuantization q = qc.for_module(module);
      const uint64_t packed = static_cast<uint64_t>(t.shape.back()), groups = static_cast<uint64_t>(sc->second.shape.back());
      if (q.bits == 0 && q.group_size > 0) q.bits = static_cast<int>(packed * 32 / (groups * q.group_size));
      if (q.bits <= 0) return make_error("tensor '" + name + "': cannot tell its bits (no quantization block)");
      const uint64_t cols = packed * 32 / static_cast<uint64_t>(q.bits);
      n = n / packed * cols;
      m.quantized_params += n;
      m.quantized_bytes += t.bytes;
      ++m.forms[std::to_string(q.bits) + "-bit g" + std::to_string(cols / groups)];
    } else if (t.shape.size() >= 2) {
      ++m.forms[to_string(t.dtype)];
    }
    m.params += n;
    if (name.find("switch_mlp") != std::string::npos || name.find(".experts.") != std::string::npos) m.expert_params += n;
  }

  // KV cache: K and V rows of every KV head of each layer as it keeps them (ModelConfig::layer_cache):
  // full attention every position, sliding attention its window's pages, linear attention a state.
  // Without a configuration this host reads, every layer is taken for full attention.
  std::vector<LayerCacheSpec> layer_specs;
  if (cfg) {
    for (int i = 0; i < cfg->num_layers; ++i)
      if (cfg->keeps_cache(i)) layer_specs.push_back(cfg->layer_cache(i));  // a KV-sharing layer keeps none
  } else {
    LayerCacheSpec full;
    full.n_kv_heads = static_cast<uint32_t>(m.kv_heads);
    full.k_head_dim = full.v_head_dim = static_cast<uint32_t>(m.head_dim);
    layer_specs.assign(static_cast<std::size_t>(std::max(0, m.layers)), full);
  }
  for (const auto& l : layer_specs) {
    if (l.type == LayerType::kSlidingAttention) {
      ++m.sliding_layers;
      m.window = std::max(m.window, static_cast<int>(l.window));
    } else if (l.type == LayerType::kLinearAttention) {
      ++m.linear_layers;
      m.state_bytes_per_sequence += l.state_bytes;
    }
  }
  constexpr uint64_t kPageTokens = 16;  // KvCache::kPageTokens; a sequence holds its window's pages, + 2 (KvCache)
  const uint64_t window_tokens = m.window > 0 ? ((uint64_t(m.window) + kPageTokens - 1) / kPageTokens + 2) * kPageTokens : 0;
  auto add_codec = [&](const std::string& name, const sl_kvcodec_api* api) {
    double bits = 0, vbits = 0, full = 0, sliding = 0;
    for (const auto& l : layer_specs) {
      if (l.type == LayerType::kLinearAttention) continue;
      const double k = row_bytes(api, l.k_head_dim, SL_KV_KEYS, &bits), v = row_bytes(api, l.v_head_dim, SL_KV_VALUES, &vbits);
      if (k <= 0 || v <= 0) return;
      (l.type == LayerType::kSlidingAttention ? sliding : full) += (k + v) * l.n_kv_heads;
    }
    m.kv.push_back({name, (bits + vbits) / 2, static_cast<uint64_t>(full), static_cast<uint64_t>(sliding) * window_tokens});
  };
  add_codec("f32", builtin_f32_codec());
  add_codec("f16", builtin_f16_codec());
  if (registry)
    for (const auto* rec : registry->loaded_of_kind(SL_PLUGIN_KVCODEC))
      add_codec(rec->name, static_cast<const sl_kvcodec_api*>(rec->descriptor->api));
  return m;
}

}  // namespace sluice::quant
