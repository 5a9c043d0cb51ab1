#include "engine/kv_cache.h"

#include <algorithm>
#include <cstdint>

#include "model/model_config.h"
#include "model/transformer.h"  // ForwardBatch, kGreedySlots
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
  c->role_ = role;
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
                                                 uint32_t capacity_tokens, const KvPoolSpec& pools) {
  const KvStage all{&backend, static_cast<uint32_t>(config.num_layers)};
  return create(std::span<const KvStage>(&all, 1), registry, config, choice, capacity_tokens, pools);
}

Result<const KvCodec*> KvCache::codec(const PluginRegistry& registry, const KvCodecChoice& choice, uint32_t dim, sl_kv_role role) {
  const KvCodec* usual = role == SL_KV_KEYS ? k_.get() : v_.get();
  if (usual->format().head_dim == dim) return usual;
  for (const auto& c : codecs_)
    if (c->role() == role && c->format().head_dim == dim) return c.get();
  auto made = role == SL_KV_KEYS ? KvCodec::create(registry, choice.k_name, choice.k_options, dim, role)
                                 : KvCodec::create(registry, choice.v_name, choice.v_options, dim, role);
  if (!made) return made.error();
  codecs_.push_back(std::move(*made));
  return codecs_.back().get();
}

Result<std::unique_ptr<KvCache>> KvCache::create(std::span<const KvStage> stages, const PluginRegistry& registry,
                                                 const ModelConfig& config, const KvCodecChoice& choice,
                                                 uint32_t capacity_tokens, const KvPoolSpec& pools) {
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
  const uint32_t pt = kPageTokens;

  // Each layer as its stage's backend keeps it: a sliding-window layer keeps only its window's
  // pages where the backend reads them from a window table, else every position (attention alone
  // applies the window); a recurrent layer needs a backend that keeps state; a backend without
  // per-layer layouts gets none and must find every layer alike. A KV-sharing layer (Gemma 4's
  // num_kv_shared_layers) has no place: it attends its source's K/V and writes none.
  std::vector<sl_kv_layer> described;
  std::vector<uint32_t> stage_cache_layers;  // per stage: its layers that keep a cache
  bool any_state = false;
  uint32_t first = 0;
  for (const auto& st : stages) {
    const BackendHandle& be = *st.backend;
    const bool per_layer = be.has_cap(SL_CAP_KV_LAYERS);
    const bool window_pages = per_layer && be.has_cap(SL_CAP_KV_WINDOW_PAGES) && pools.window_pages;
    uint32_t kept = 0;
    for (uint32_t i = first; i < first + st.n_layers; ++i) {
      if (!config.keeps_cache(static_cast<int>(i))) continue;
      ++kept;
      const LayerCacheSpec spec = config.layer_cache(static_cast<int>(i));
      sl_kv_layer& l = described.emplace_back();
      l.struct_size = sizeof(l);
      const std::string where = "layer " + std::to_string(i) + " (" + layer_type_name(spec.type) + ")";
      if (spec.type == LayerType::kLinearAttention) {
        if (!be.keeps_state())
          return make_error(where + ": backend '" + be.name() + "' keeps no recurrent state (SL_CAP_KV_LAYERS, kv_copy_state)");
        if (spec.state_bytes == 0 || spec.state_bytes % 4 != 0)
          return make_error(where + ": a recurrent layer's state must be a positive multiple of 4 bytes, not " +
                            std::to_string(spec.state_bytes));
        l.kind = SL_KV_STATE;
        l.state_bytes = spec.state_bytes;
        kv->state_slot_bytes_ += spec.state_bytes;
        any_state = true;
      } else {
        l.kind = spec.type == LayerType::kSlidingAttention && window_pages ? SL_KV_WINDOW : SL_KV_FULL;
        l.n_kv_heads = spec.n_kv_heads;
        l.k_head_dim = spec.k_head_dim;
        l.v_head_dim = spec.v_head_dim;
        l.window = l.kind == SL_KV_WINDOW ? spec.window : 0;
        if (l.n_kv_heads == 0 || l.k_head_dim == 0 || l.v_head_dim == 0)
          return make_error(where + ": K/V heads and widths must be positive");
        auto kc = kv->codec(registry, choice, l.k_head_dim, SL_KV_KEYS);
        if (!kc) return make_error(where + ": " + kc.message());
        auto vc = kv->codec(registry, choice, l.v_head_dim, SL_KV_VALUES);
        if (!vc) return make_error(where + ": " + vc.message());
        l.k_api = (*kc)->api();
        l.k_codec = (*kc)->codec();
        l.v_api = (*vc)->api();
        l.v_codec = (*vc)->codec();
        const double row_bytes = double(l.n_kv_heads) * ((*kc)->format().row_bytes + (*vc)->format().row_bytes);
        if (l.kind == SL_KV_WINDOW) {
          kv->window_ = std::max(kv->window_, l.window);
          kv->window_page_bytes_ += static_cast<uint64_t>(row_bytes) * pt;
        } else {
          kv->bytes_per_token_ += row_bytes;
        }
        kv->recent_page_bytes_ += uint64_t(l.n_kv_heads) * pt * (l.k_head_dim + l.v_head_dim) * 2;
      }
      if (!per_layer && (l.kind != SL_KV_FULL || l.n_kv_heads != static_cast<uint32_t>(config.num_kv_heads) ||
                         l.k_head_dim != static_cast<uint32_t>(config.head_dim) || l.v_head_dim != static_cast<uint32_t>(config.head_dim)))
        return make_error(where + ": backend '" + be.name() + "' keeps one K/V geometry for every layer (no SL_CAP_KV_LAYERS); this layer's differs");
      kv->kinds_.push_back(l.kind);
    }
    stage_cache_layers.push_back(kept);
    first += st.n_layers;
  }

  sl_kv_layout layout{};
  layout.struct_size = sizeof(layout);
  layout.n_kv_heads = config.num_kv_heads;
  layout.head_dim = config.head_dim;
  layout.page_tokens = pt;
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
  if (pools.recent_tokens < -1) return make_error("--kv-recent must be -1 (auto), 0 (off) or a number of tokens");
  if (pools.recent_tokens > 0 && !backend_can)
    return make_error("--kv-recent " + std::to_string(pools.recent_tokens) + ": backend '" + cannot->name() +
                      "' cannot keep a recent window (use --kv-recent 0)");
  if (pools.recent_tokens > 0) {
    kv->recent_window_ = static_cast<uint32_t>(pools.recent_tokens);
  } else if (pools.recent_tokens < 0 && backend_can && !(exact(choice.k_name) && exact(choice.v_name))) {
    kv->recent_window_ = kAutoRecentWindow;
  }
  // One batch may touch every page of its new positions before a window moves on.
  const uint32_t batch_pages = (pools.max_batch_tokens + pt - 1) / pt + pools.max_sequences;
  if (kv->recent_window_ > 0) {
    // Each sequence holds the pages of its window (plus the partial pages at both ends).
    const uint32_t window_pages = (kv->recent_window_ + pt - 1) / pt + 1;
    kv->recent_free_capacity_ = pools.max_sequences * window_pages + batch_pages;
    for (uint32_t p = kv->recent_free_capacity_; p-- > 0;) kv->recent_free_.push_back(static_cast<int32_t>(p));
  } else {
    kv->recent_page_bytes_ = 0;
  }
  layout.recent_window = kv->recent_window_;
  layout.n_recent_pages = kv->recent_free_capacity_;
  if (kv->window_ > 0) {
    // As the recent window's pool: every sequence's window (and the steps greedy decoding keeps in
    // flight), plus one batch; never more than the main pool.
    kv->window_pages_per_sequence_ = (kv->window_ + pt - 1) / pt + 2;
    kv->window_pool_pages_wanted_ = pools.max_sequences * kv->window_pages_per_sequence_ + batch_pages;
    const uint32_t n = std::min(kv->n_pages_, kv->window_pool_pages_wanted_);
    kv->window_pool_ = std::make_unique<PagePool>(n, pt);
    layout.n_window_pages = n;
  }
  if (any_state) {
    if (pools.state_snapshots < -1) return make_error("KV cache: state_snapshots must be -1 (auto) or a count");
    const uint32_t snapshots = pools.state_snapshots < 0 ? kSnapshotsPerSequence * pools.max_sequences
                                                         : static_cast<uint32_t>(pools.state_snapshots);
    // A live state per sequence, and the snapshots taken while their block's tokens are not known
    // yet (greedy decoding's steps in flight), besides the cached ones.
    const uint32_t n = pools.max_sequences * (1 + Transformer::kGreedySlots) + snapshots;
    kv->state_pool_ = std::make_unique<PagePool>(n, pt);
    layout.n_state_slots = n;
  }
  // One storage per stage, holding its layers (the whole layout but n_layers and its share of
  // `layers`); pages are shared: page p of a sequence is page p in every stage.
  first = 0;
  for (std::size_t si = 0; si < stages.size(); ++si) {
    const KvStage& st = stages[si];
    layout.n_layers = stage_cache_layers[si];
    layout.layers = st.backend->has_cap(SL_CAP_KV_LAYERS) ? described.data() + first : nullptr;
    bool has_state = false;
    for (uint32_t i = first; i < first + layout.n_layers; ++i) has_state |= described[i].kind == SL_KV_STATE;
    sl_kv_cache* cache = nullptr;
    sl_error err{};
    if (auto s = st.backend->check(st.backend->api()->kv_create(st.backend->raw(), &layout, &cache, &err), err, "kv_create"); !s)
      return s.error();
    kv->backends_.push_back(st.backend);
    kv->caches_.push_back(cache);
    kv->stage_has_state_.push_back(has_state);
    first += layout.n_layers;
  }
  kv->pool_ = std::make_unique<PagePool>(kv->n_pages_, pt);
  return kv;
}

KvCache::~KvCache() {
  for (std::size_t i = 0; i < caches_.size(); ++i) backends_[i]->api()->kv_destroy(backends_[i]->raw(), caches_[i]);
}

uint64_t KvCache::capacity_bytes() const {
  uint64_t bytes = static_cast<uint64_t>(bytes_per_token_ * n_pages_ * kPageTokens);
  if (window_pool_) bytes += window_page_bytes_ * window_pool_->n_pages();
  if (state_pool_) bytes += state_slot_bytes_ * state_pool_->n_pages();
  return bytes;
}

uint64_t KvCache::per_sequence_pool_bytes() const {
  uint64_t bytes = recent_bytes() + window_page_bytes_ * window_pool_pages_wanted_;
  if (state_pool_) bytes += state_slot_bytes_ * state_pool_->n_pages();
  return bytes;
}

uint64_t KvCache::bytes_in_use() const {
  uint64_t bytes = static_cast<uint64_t>(bytes_per_token_ * pool_->pages_in_use() * kPageTokens);
  if (window_pool_) bytes += window_page_bytes_ * window_pool_->pages_in_use();
  if (state_pool_) bytes += state_slot_bytes_ * state_pool_->pages_in_use();
  return bytes;
}

int32_t KvCache::window_first_block(int32_t position) const {
  return std::max<int32_t>(0, position - static_cast<int32_t>(window_) + 1) / static_cast<int32_t>(kPageTokens);
}

Status KvCache::copy_state(uint32_t src, uint32_t dst) const {
  for (std::size_t i = 0; i < caches_.size(); ++i)
    if (stage_has_state_[i])
      if (auto s = backends_[i]->copy_state(caches_[i], src, dst); !s) return s;
  return {};
}

Status KvCache::clear_state(uint32_t slot) const {
  for (std::size_t i = 0; i < caches_.size(); ++i)
    if (stage_has_state_[i])
      if (auto s = backends_[i]->clear_state(caches_[i], slot); !s) return s;
  return {};
}

Status KvCache::reuse_prefix(SequenceKv& seq, std::span<const int32_t> tokens, std::size_t max_blocks) {
  const std::size_t bt = kPageTokens;
  max_blocks = std::min(max_blocks, tokens.size() / bt);
  // The blocks the main pool holds, in a row from the start: their hashes.
  std::vector<PagePool::BlockHash> hashes;
  PagePool::BlockHash h = PagePool::kRootHash;
  for (std::size_t b = 0; b < max_blocks; ++b) {
    h = PagePool::chain(h, tokens.subspan(b * bt, bt));
    if (!pool_->cached(h)) break;
    hashes.push_back(h);
  }
  // The longest run whose end the other pools serve too: window pages for the blocks the next
  // query's window reaches, the state snapshot at its end.
  std::size_t n = hashes.size();
  for (; n > 0; --n) {
    bool ok = true;
    if (window_pool_)
      for (std::size_t b = static_cast<std::size_t>(window_first_block(static_cast<int32_t>(n * bt))); ok && b < n; ++b)
        ok = window_pool_->cached(hashes[b]);
    if (ok && state_pool_) ok = state_pool_->cached(hashes[n - 1]);
    if (ok) break;
  }
  for (std::size_t b = 0; b < n; ++b) seq.pages.push_back(*pool_->acquire_cached(hashes[b]));
  if (window_pool_) {
    seq.window_pages.assign(n, -1);
    for (std::size_t b = static_cast<std::size_t>(window_first_block(static_cast<int32_t>(n * bt))); b < n; ++b)
      seq.window_pages[b] = *window_pool_->acquire_cached(hashes[b]);
  }
  if (state_pool_ && n > 0) {
    const int32_t snapshot = *state_pool_->acquire_cached(hashes[n - 1]);  // held: not evicted by the allocation below
    auto live = state_pool_->allocate(1);
    Status copied = live ? copy_state(static_cast<uint32_t>(snapshot), static_cast<uint32_t>(live->front())) : Status(live.error());
    const int32_t snap[] = {snapshot};
    state_pool_->release(snap);
    if (!copied) {
      if (live) state_pool_->release(*live);
      release(seq);
      return copied;
    }
    seq.state_slot = live->front();
  }
  seq.n_published = n;
  seq.last_hash = n ? hashes[n - 1] : PagePool::kRootHash;
  seq.n_past = static_cast<int32_t>(n * bt);
  seq.first_own = seq.n_past;
  return {};
}

Status KvCache::reserve(SequenceKv& seq, int32_t n_end) {
  const uint32_t pt = kPageTokens;
  const std::size_t need = (static_cast<uint32_t>(n_end) + pt - 1) / pt;
  if (need > seq.pages.size()) {
    auto fresh = pool_->allocate(static_cast<uint32_t>(need - seq.pages.size()));
    if (!fresh) return fresh.error();
    seq.pages.insert(seq.pages.end(), fresh->begin(), fresh->end());
  }
  if (window_pool_) {
    if (seq.window_pages.size() < need) seq.window_pages.resize(need, -1);
    // Pages back to the first the pass's first query reaches: blocks of positions computed before
    // must still be held (a missing one would be read as garbage).
    const std::size_t from = static_cast<std::size_t>(window_first_block(seq.n_past));
    uint32_t missing = 0;
    for (std::size_t b = from; b < need; ++b) {
      if (seq.window_pages[b] >= 0) continue;
      if (static_cast<int32_t>((b + 1) * pt) <= seq.n_past)
        return make_error("KV cache: block " + std::to_string(b) + " of a sliding window was released while a query still reads it");
      ++missing;
    }
    if (missing) {
      auto fresh = window_pool_->allocate(missing);
      if (!fresh) return make_error("sliding-window pages: " + fresh.message());
      std::size_t i = 0;
      for (std::size_t b = from; b < need; ++b)
        if (seq.window_pages[b] < 0) seq.window_pages[b] = (*fresh)[i++];
    }
  }
  if (state_pool_ && seq.state_slot < 0) {
    auto slot = state_pool_->allocate(1);
    if (!slot) return make_error("recurrent state: " + slot.message());
    if (auto s = clear_state(static_cast<uint32_t>(slot->front())); !s) {
      state_pool_->release(*slot);
      return s;
    }
    seq.state_slot = slot->front();
  }
  return {};
}

void KvCache::drop_snapshots(SequenceKv& seq, std::size_t below_block) {
  for (auto it = seq.snapshots.begin(); it != seq.snapshots.end();) {
    if (it->first < below_block) {
      const int32_t slot[] = {it->second};
      state_pool_->release(slot);
      it = seq.snapshots.erase(it);
    } else {
      ++it;
    }
  }
}

Status KvCache::passed(SequenceKv& seq, int32_t n_end) {
  trim_recent(seq.recent, n_end);
  if (!state_pool_ || n_end <= 0 || n_end % static_cast<int32_t>(kPageTokens) != 0 || seq.state_slot < 0) return {};
  const std::size_t block = static_cast<std::size_t>(n_end) / kPageTokens - 1;
  // A snapshot taken for this block before (by a step later dropped) gives way to this one.
  for (auto it = seq.snapshots.begin(); it != seq.snapshots.end(); ++it)
    if (it->first == block) {
      const int32_t slot[] = {it->second};
      state_pool_->release(slot);
      seq.snapshots.erase(it);
      break;
    }
  auto slot = state_pool_->allocate(1);
  if (!slot) return {};  // every slot is live: no snapshot here (a later request recomputes this prefix)
  if (auto s = copy_state(static_cast<uint32_t>(seq.state_slot), static_cast<uint32_t>(slot->front())); !s) {
    state_pool_->release(*slot);
    return s;
  }
  seq.snapshots.emplace_back(block, slot->front());
  return {};
}

void KvCache::publish(SequenceKv& seq, std::span<const int32_t> tokens) {
  const std::size_t bt = kPageTokens;
  while ((seq.n_published + 1) * bt <= static_cast<std::size_t>(seq.n_past) && (seq.n_published + 1) * bt <= tokens.size()) {
    const std::size_t b = seq.n_published;
    seq.last_hash = PagePool::chain(seq.last_hash, tokens.subspan(b * bt, bt));
    pool_->publish(seq.last_hash, seq.pages[b]);
    if (window_pool_ && b < seq.window_pages.size() && seq.window_pages[b] >= 0) window_pool_->publish(seq.last_hash, seq.window_pages[b]);
    if (state_pool_)
      for (auto it = seq.snapshots.begin(); it != seq.snapshots.end(); ++it)
        if (it->first == b) {
          state_pool_->publish(seq.last_hash, it->second);  // the cache's reference; the sequence's goes
          const int32_t slot[] = {it->second};
          state_pool_->release(slot);
          seq.snapshots.erase(it);
          break;
        }
    ++seq.n_published;
  }
  if (state_pool_) drop_snapshots(seq, seq.n_published);  // blocks the prefix cache held already
  trim_window(seq);
}

void KvCache::trim_window(SequenceKv& seq) {
  if (!window_pool_) return;
  // A query at a position >= n_past reads blocks from window_first_block(n_past) on.
  const std::size_t keep_from = static_cast<std::size_t>(window_first_block(seq.n_past));
  for (std::size_t b = 0; b < std::min(keep_from, seq.window_pages.size()); ++b)
    if (seq.window_pages[b] >= 0) {
      const int32_t page[] = {seq.window_pages[b]};
      window_pool_->release(page);
      seq.window_pages[b] = -1;
    }
}

void KvCache::release(SequenceKv& seq) {
  release_recent(seq.recent);
  pool_->release(seq.pages);
  seq.pages.clear();
  if (window_pool_) window_pool_->release(seq.window_pages);
  seq.window_pages.clear();
  if (state_pool_) {
    drop_snapshots(seq, SIZE_MAX);
    if (seq.state_slot >= 0) {
      const int32_t slot[] = {seq.state_slot};
      state_pool_->release(slot);
    }
  }
  seq.snapshots.clear();
  seq.state_slot = -1;
  seq.n_past = 0;
  seq.first_own = 0;
  seq.n_published = 0;
  seq.last_hash = PagePool::kRootHash;
}

Status KvCache::rollback(SequenceKv& seq, int32_t n_end) {
  if (n_end >= seq.n_past) return {};
  if (n_end < 0 || static_cast<std::size_t>(n_end) < seq.n_published * kPageTokens || n_end < seq.first_own)
    return make_error("KV cache: cannot roll back to position " + std::to_string(n_end) + ", inside blocks shared with the prefix cache");
  const std::size_t keep = (static_cast<std::size_t>(n_end) + kPageTokens - 1) / kPageTokens;
  if (seq.pages.size() > keep) {
    pool_->release(std::span<const int32_t>(seq.pages).subspan(keep));
    seq.pages.resize(keep);
  }
  if (window_pool_ && seq.window_pages.size() > keep) {
    for (std::size_t b = keep; b < seq.window_pages.size(); ++b)
      if (seq.window_pages[b] >= 0) {
        const int32_t page[] = {seq.window_pages[b]};
        window_pool_->release(page);
      }
    seq.window_pages.resize(keep);
  }
  if (seq.recent.size() > keep) {
    for (std::size_t p = keep; p < seq.recent.size(); ++p)
      if (seq.recent[p] >= 0) recent_free_.push_back(seq.recent[p]);
    seq.recent.resize(keep);
  }
  seq.n_past = n_end;
  return {};
}

Status KvCache::fork(const SequenceKv& from, SequenceKv& to) {
  if (!can_fork()) return make_error("KV cache: a sequence with sliding-window pages or a recent window cannot be forked");
  if (!to.pages.empty() || to.state_slot >= 0 || to.n_past != 0) return make_error("KV cache: fork into a sequence that holds pages");
  const std::size_t full = static_cast<std::size_t>(from.n_past) / kPageTokens;
  const bool partial = static_cast<std::size_t>(from.n_past) % kPageTokens != 0;
  if (from.pages.size() < full + (partial ? 1 : 0)) return make_error("KV cache: fork of a sequence missing pages");
  to.pages.assign(from.pages.begin(), from.pages.begin() + static_cast<std::ptrdiff_t>(full));
  pool_->retain(to.pages);
  if (partial) {
    auto fresh = pool_->allocate(1);
    if (!fresh) {
      release(to);
      return fresh.error();
    }
    to.pages.push_back(fresh->front());
    for (std::size_t i = 0; i < caches_.size(); ++i)
      if (auto st = backends_[i]->copy_page(caches_[i], static_cast<uint32_t>(from.pages[full]), static_cast<uint32_t>(fresh->front())); !st) {
        release(to);
        return st;
      }
  }
  if (state_pool_ && from.state_slot >= 0) {
    auto slot = state_pool_->allocate(1);
    if (!slot) {
      release(to);
      return make_error("recurrent state: " + slot.message());
    }
    to.state_slot = slot->front();
    if (auto st = copy_state(static_cast<uint32_t>(from.state_slot), static_cast<uint32_t>(to.state_slot)); !st) {
      release(to);
      return st;
    }
  }
  to.n_past = from.n_past;
  to.first_own = from.n_past;  // computed by another sequence (no recent window here to keep in step)
  // The shared blocks were published by `from` (or found published): `to` publishes from there on.
  to.n_published = from.n_published;  // never past `full`: only whole blocks are published
  to.last_hash = from.last_hash;
  return {};
}

Result<int32_t> KvCache::save_state(const SequenceKv& seq) {
  if (!state_pool_ || seq.state_slot < 0) return -1;
  auto slot = state_pool_->allocate(1);
  if (!slot) return make_error("recurrent state: no slot to keep the state before speculative guesses: " + slot.message());
  if (auto s = copy_state(static_cast<uint32_t>(seq.state_slot), static_cast<uint32_t>(slot->front())); !s) {
    state_pool_->release(*slot);
    return s.error();
  }
  return slot->front();
}

Status KvCache::restore_state(SequenceKv& seq, int32_t saved) {
  if (saved < 0) return {};
  Status copied = copy_state(static_cast<uint32_t>(saved), static_cast<uint32_t>(seq.state_slot));
  drop_state(saved);
  return copied;
}

void KvCache::drop_state(int32_t saved) {
  if (saved < 0 || !state_pool_) return;
  const int32_t slot[] = {saved};
  state_pool_->release(slot);
}

void KvCache::fill_batch(std::span<const SequenceKv* const> seqs, ForwardBatch& batch) const {
  batch.n_seqs = static_cast<uint32_t>(seqs.size());
  batch.max_pages = 0;
  for (const SequenceKv* s : seqs) batch.max_pages = std::max<uint32_t>(batch.max_pages, static_cast<uint32_t>(s->pages.size()));
  const std::size_t cols = batch.max_pages;
  batch.page_table.assign(seqs.size() * cols, -1);
  for (std::size_t i = 0; i < seqs.size(); ++i) std::copy(seqs[i]->pages.begin(), seqs[i]->pages.end(), batch.page_table.begin() + i * cols);
  batch.recent_table.clear();
  if (recent_window_ > 0) {
    batch.recent_table.resize(batch.page_table.size());
    for (std::size_t i = 0; i < seqs.size(); ++i)
      write_recent_row(seqs[i]->recent, std::span(batch.recent_table).subspan(i * cols, cols));
  }
  batch.window_table.clear();
  if (window_pool_) {
    batch.window_table.assign(batch.page_table.size(), -1);
    for (std::size_t i = 0; i < seqs.size(); ++i)
      std::copy_n(seqs[i]->window_pages.begin(), std::min(seqs[i]->window_pages.size(), cols), batch.window_table.begin() + i * cols);
  }
  batch.state_slots.clear();
  if (state_pool_)
    for (const SequenceKv* s : seqs) batch.state_slots.push_back(s->state_slot);
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
