#include "engine/kv_cache.h"

#include <algorithm>

#include "model/model_config.h"
#include "plugin/builtin_codecs.h"

namespace sluice {
namespace {

std::pair<std::string, std::string> split_options(const std::string& s) {
  auto colon = s.find(':');
  if (colon == std::string::npos) return {s, ""};
  return {s.substr(0, colon), s.substr(colon + 1)};
}

}  // namespace

Result<KvCodecChoice> KvCodecChoice::parse(const std::string& spec) {
  KvCodecChoice c;
  if (spec.empty()) return make_error("empty --kv-codec");
  // "k=A,v=B" names each side; anything else is one codec for both, whose options may contain '='
  // ("turbo4:rot=4").
  if (!spec.starts_with("k=") && !spec.starts_with("v=")) {
    std::tie(c.k_name, c.k_options) = split_options(spec);
    if (c.k_name.find_first_of("=,") != std::string::npos)
      return make_error("--kv-codec '" + spec + "': expected NAME[:options] or k=NAME,v=NAME");
    c.v_name = c.k_name;
    c.v_options = c.k_options;
    return c;
  }
  std::size_t start = 0;
  while (start <= spec.size()) {
    auto comma = spec.find(',', start);
    std::string part = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto eq = part.find('=');
    if (eq == std::string::npos) return make_error("--kv-codec '" + spec + "': expected k=NAME,v=NAME");
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    if (key == "k")
      std::tie(c.k_name, c.k_options) = split_options(value);
    else if (key == "v")
      std::tie(c.v_name, c.v_options) = split_options(value);
    else
      return make_error("--kv-codec '" + spec + "': unknown part '" + key + "' (use k= and v=)");
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (c.k_name.empty() || c.v_name.empty()) return make_error("--kv-codec '" + spec + "': give both k= and v=");
  return c;
}

std::string KvCodecChoice::describe() const {
  if (k_name == v_name && k_options == v_options) return k_name;
  return "k=" + k_name + ",v=" + v_name;
}

Result<std::unique_ptr<KvCodec>> KvCodec::create(const PluginRegistry& registry, const std::string& name,
                                                 const std::string& options, uint32_t head_dim, sl_kv_role role) {
  const sl_kvcodec_api* api = nullptr;
  if (name == "f32") {
    api = builtin_f32_codec();
  } else if (name == "f16") {
    api = builtin_f16_codec();
  } else if (const auto* rec = registry.find(SL_PLUGIN_KVCODEC, name)) {
    api = static_cast<const sl_kvcodec_api*>(rec->descriptor->api);
  } else {
    std::string known = "f32, f16";
    for (const auto* r : registry.loaded_of_kind(SL_PLUGIN_KVCODEC)) known += ", " + r->name;
    return make_error("unknown KV codec '" + name + "' (available: " + known + ")");
  }
  std::unique_ptr<KvCodec> c(new KvCodec());
  c->api_ = api;
  c->name_ = name;
  sl_error err{};
  if (api->create(head_dim, role, options.c_str(), &c->codec_, &err) != SL_OK || !c->codec_)
    return make_error("KV codec '" + name + "': " + err.message);
  c->format_.struct_size = sizeof(sl_kv_format);
  api->get_format(c->codec_, &c->format_);
  return c;
}

KvCodec::~KvCodec() {
  if (codec_) api_->destroy(codec_);
}

Result<std::unique_ptr<KvCache>> KvCache::create(const BackendHandle& backend, const PluginRegistry& registry,
                                                 const ModelConfig& config, const KvCodecChoice& choice,
                                                 uint32_t capacity_tokens) {
  std::unique_ptr<KvCache> kv(new KvCache(backend));
  auto k = KvCodec::create(registry, choice.k_name, choice.k_options, config.head_dim, SL_KV_KEYS);
  if (!k) return k.error();
  auto v = KvCodec::create(registry, choice.v_name, choice.v_options, config.head_dim, SL_KV_VALUES);
  if (!v) return v.error();
  kv->k_ = std::move(*k);
  kv->v_ = std::move(*v);
  kv->n_pages_ = std::max(1u, (capacity_tokens + kPageTokens - 1) / kPageTokens);

  sl_kv_layout layout{};
  layout.struct_size = sizeof(layout);
  layout.n_layers = config.num_layers;
  layout.n_kv_heads = config.num_kv_heads;
  layout.head_dim = config.head_dim;
  layout.page_tokens = kPageTokens;
  layout.n_pages = kv->n_pages_;
  layout.k_api = kv->k_->api();
  layout.k_codec = kv->k_->codec();
  layout.v_api = kv->v_->api();
  layout.v_codec = kv->v_->codec();
  sl_error err{};
  if (auto s = backend.check(backend.api()->kv_create(backend.raw(), &layout, &kv->cache_, &err), err, "kv_create"); !s)
    return s.error();
  kv->bytes_per_token_ = static_cast<double>(config.num_layers) * config.num_kv_heads *
                         (kv->k_->format().row_bytes + kv->v_->format().row_bytes);
  kv->pool_ = std::make_unique<PagePool>(kv->n_pages_, kPageTokens);
  return kv;
}

KvCache::~KvCache() {
  if (cache_) backend_.api()->kv_destroy(backend_.raw(), cache_);
}

std::string KvCache::codec_description() const {
  if (k_->name() == v_->name()) return k_->name();
  return "k=" + k_->name() + ",v=" + v_->name();
}

}  // namespace sluice
