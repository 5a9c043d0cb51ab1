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
                                                 uint32_t capacity_tokens, const RecentWindowSpec& recent) {
  const KvStage all{&backend, static_cast<uint32_t>(config.num_layers)};
  return create(std::span<const KvStage>(&all, 1), registry, config, choice, capacity_tokens, recent);
}

Result<std::unique_ptr<KvCache>> KvCache::create(std::span<const KvStage> stages, const PluginRegistry& registry,
                                                 const ModelConfig& config, const KvCodecChoice& choice,
                                                 uint32_t capacity_tokens, const RecentWindowSpec& recent) {
  std::unique_ptr<KvCache> kv(new KvCache());
  uint32_t layers = 0;
  for (const auto& st : stages) layers += st.backend ? st.n_layers : 0;
  if (stages.empty() || layers != static_cast<uint32_t>(config.num_layers))
    return make_error("KV cache: the backends' stages hold " + std::to_string(layers) + " layers; the model has " +
                      std::to_string(config.num_layers));
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

  // The recent window: automatic only where it buys quality (a compressing codec) and the backend
  // keeps one; asked for explicitly on a backend without it, an error.
  auto exact = [](const std::string& name) { return name == "f16" || name == "f32"; };
  // Split across backends (--gpu-layers), every one of them must keep it.
  const BackendHandle* cannot = nullptr;
  for (const auto& st : stages)
    if (!cannot && !st.backend->has_cap(SL_CAP_KV_RECENT_WINDOW)) cannot = st.backend;
  const bool backend_can = cannot == nullptr;
  if (recent.tokens < -1) return make_error("--kv-recent must be -1 (auto), 0 (off) or a number of tokens");
  if (recent.tokens > 0 && !backend_can)
    return make_error("--kv-recent " + std::to_string(recent.tokens) + ": backend '" + cannot->name() +
                      "' cannot keep a recent window (use --kv-recent 0)");
  if (recent.tokens > 0) {
    kv->recent_window_ = static_cast<uint32_t>(recent.tokens);
  } else if (recent.tokens < 0 && backend_can && !(exact(choice.k_name) && exact(choice.v_name))) {
    kv->recent_window_ = kAutoRecentWindow;
  }
  if (kv->recent_window_ > 0) {
    // Each sequence holds the pages of its window (plus the partial pages at both ends), and one
    // batch may touch every page of its new positions before the window moves on.
    const uint32_t window_pages = (kv->recent_window_ + kPageTokens - 1) / kPageTokens + 1;
    const uint32_t batch_pages = (recent.max_batch_tokens + kPageTokens - 1) / kPageTokens + recent.max_sequences;
    kv->recent_free_capacity_ = recent.max_sequences * window_pages + batch_pages;
    for (uint32_t p = kv->recent_free_capacity_; p-- > 0;) kv->recent_free_.push_back(static_cast<int32_t>(p));
    kv->recent_page_bytes_ = uint64_t(config.num_layers) * config.num_kv_heads * kPageTokens * config.head_dim * 2 * 2;
  }
  layout.recent_window = kv->recent_window_;
  layout.n_recent_pages = kv->recent_free_capacity_;
  // One storage per stage, holding its layers (the whole layout but n_layers); pages are shared:
  // page p of a sequence is page p in every stage.
  for (const auto& st : stages) {
    layout.n_layers = st.n_layers;
    sl_kv_cache* cache = nullptr;
    sl_error err{};
    if (auto s = st.backend->check(st.backend->api()->kv_create(st.backend->raw(), &layout, &cache, &err), err, "kv_create"); !s)
      return s.error();
    kv->backends_.push_back(st.backend);
    kv->caches_.push_back(cache);
  }
  kv->bytes_per_token_ = static_cast<double>(config.num_layers) * config.num_kv_heads *
                         (kv->k_->format().row_bytes + kv->v_->format().row_bytes);
  kv->pool_ = std::make_unique<PagePool>(kv->n_pages_, kPageTokens);
  return kv;
}

KvCache::~KvCache() {
  for (std::size_t i = 0; i < caches_.size(); ++i) backends_[i]->api()->kv_destroy(backends_[i]->raw(), caches_[i]);
}

Status KvCache::update_recent(std::vector<int32_t>& recent, int32_t first_own, int32_t n_past, int32_t n_end) {
  if (recent_window_ == 0) return {};
  const int32_t pt = static_cast<int32_t>(kPageTokens);
  const std::size_t pages = static_cast<std::size_t>((n_end + pt - 1) / pt);
  if (recent.size() < pages) recent.resize(pages, -1);
  trim_recent(recent, n_past);
  for (int32_t p = std::max(n_past, first_own) / pt; p * pt < n_end; ++p) {
    if (recent[static_cast<std::size_t>(p)] >= 0) continue;
    if (recent_free_.empty()) return make_error("recent window: no free recent page (pool of " + std::to_string(recent_free_capacity_) + ")");
    recent[static_cast<std::size_t>(p)] = recent_free_.back();
    recent_free_.pop_back();
  }
  return {};
}

void KvCache::trim_recent(std::vector<int32_t>& recent, int32_t n_past) {
  if (recent_window_ == 0) return;
  // A query at position >= n_past reads keys down to n_past - window + 1 exactly.
  const int32_t oldest_needed = n_past - static_cast<int32_t>(recent_window_) + 1;
  const int32_t pt = static_cast<int32_t>(kPageTokens);
  for (std::size_t p = 0; p < recent.size(); ++p) {
    if (recent[p] >= 0 && static_cast<int32_t>(p + 1) * pt - 1 < oldest_needed) {
      recent_free_.push_back(recent[p]);
      recent[p] = -1;
    }
  }
}

void KvCache::write_recent_row(const std::vector<int32_t>& recent, std::span<int32_t> row) {
  std::fill(row.begin(), row.end(), -1);
  std::copy_n(recent.begin(), std::min(recent.size(), row.size()), row.begin());
}

void KvCache::release_recent(std::vector<int32_t>& recent) {
  for (int32_t page : recent)
    if (page >= 0) recent_free_.push_back(page);
  recent.clear();
}

std::string KvCache::codec_description() const {
  if (k_->name() == v_->name()) return k_->name();
  return "k=" + k_->name() + ",v=" + v_->name();
}

}  // namespace sluice
