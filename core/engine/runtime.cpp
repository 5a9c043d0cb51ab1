#include "engine/runtime.h"

#include "engine/layer_split.h"
#include "plugin/resident_store.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <thread>

namespace sluice {

Result<BackendChoice> choose_backend(PluginRegistry& registry, const std::string& spec) {
  if (spec.size() > 3 && spec.ends_with(".so")) {
    const auto& rec = registry.load_file(spec);
    if (!rec.loaded) return make_error("backend plugin " + spec + " " + rec.status);
    if (rec.descriptor->kind != SL_PLUGIN_BACKEND) return make_error(spec + " is a " + rec.kind + " plugin, not a backend");
    return BackendChoice{rec.name, ""};
  }
  if (spec == "auto" || spec.empty()) {
    // Prefer a backend with a GPU or accelerator (OpenCL on a CPU, e.g. PoCL, is no faster than
    // the CPU backend); the CPU otherwise.
    for (const auto* rec : registry.loaded_of_kind(SL_PLUGIN_BACKEND)) {
      if (rec->name == "cpu") continue;
      const auto* api = static_cast<const sl_backend_api*>(rec->descriptor->api);
      const uint32_t n = api->device_count ? api->device_count() : 0;
      for (uint32_t i = 0; i < n; ++i) {
        sl_device_info info{};
        info.struct_size = sizeof(info);
        sl_error err{};
        if (api->device_info && api->device_info(i, &info, &err) == SL_OK &&
            (std::string(info.kind) == "gpu" || std::string(info.kind) == "accelerator"))
          return BackendChoice{rec->name, ""};
      }
    }
    if (registry.find(SL_PLUGIN_BACKEND, "cpu")) return BackendChoice{"cpu", ""};
    return make_error("no backend plugin loaded (looked for sluice-*.so in the plugin directory; see `sluice plugins`)");
  }
  auto colon = spec.find(':');
  BackendChoice c{spec.substr(0, colon), colon == std::string::npos ? "" : spec.substr(colon + 1)};
  if (!registry.find(SL_PLUGIN_BACKEND, c.name)) {
    for (const auto& r : registry.records())
      if (r.name == c.name && !r.loaded) return make_error("backend '" + c.name + "' is not available: " + r.status);
    std::string known;
    for (const auto* r : registry.loaded_of_kind(SL_PLUGIN_BACKEND)) known += (known.empty() ? "" : ", ") + r->name;
    return make_error("unknown backend '" + c.name + "' (available: " + (known.empty() ? "none" : known) + ")");
  }
  return c;
}

Result<std::unique_ptr<ExpertStoreHandle>> open_expert_store(const PluginRegistry& registry, const std::string& spec,
                                                             uint64_t budget_bytes, const ExpertLayout& layout,
                                                             const std::vector<std::filesystem::path>& files) {
  const auto colon = spec.find(':');
  const std::string name = spec.substr(0, colon), options = colon == std::string::npos ? "" : spec.substr(colon + 1);
  const sl_expertstore_api* api = nullptr;
  if (name == "resident") {
    api = builtin_resident_store();
  } else if (const auto* rec = registry.find(SL_PLUGIN_EXPERTSTORE, name)) {
    api = static_cast<const sl_expertstore_api*>(rec->descriptor->api);
  } else {
    std::string known = "resident";
    for (const auto* r : registry.loaded_of_kind(SL_PLUGIN_EXPERTSTORE)) known += ", " + r->name;
    return make_error("unknown expert store '" + name + "' (available: " + known + ")");
  }
  std::vector<std::string> paths;
  for (const auto& f : files) paths.push_back(f.string());
  std::vector<const char*> c_paths;
  for (const auto& p : paths) c_paths.push_back(p.c_str());
  sl_expertstore_config cfg{};
  cfg.struct_size = sizeof(cfg);
  cfg.n_files = static_cast<uint32_t>(c_paths.size());
  cfg.files = c_paths.data();
  cfg.n_layers = layout.n_moe_layers();
  cfg.n_experts = layout.n_experts();
  cfg.n_parts = layout.n_parts();
  cfg.parts = layout.parts().data();
  cfg.budget_bytes = budget_bytes;
  cfg.options = options.c_str();
  return ExpertStoreHandle::open(api, name, cfg);
}

Result<std::unique_ptr<Runtime>> Runtime::open(const EngineOptions& options, uint32_t capacity_tokens) {
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->options_ = options;
  rt->registry_ = std::make_unique<PluginRegistry>();
  if (!options.plugin_dir.empty()) {
    rt->registry_->scan(options.plugin_dir);
  } else {
    for (const auto& dir : PluginRegistry::default_dirs()) rt->registry_->scan(dir);
  }

  auto config = ModelConfig::load(options.model_dir);
  if (!config) return config.error();
  rt->config_ = std::move(*config);
  auto tensors = SafetensorsSet::open_dir(options.model_dir);
  if (!tensors) return tensors.error();
  rt->tensors_ = std::make_unique<SafetensorsSet>(std::move(*tensors));
  auto tok = Tokenizer::load_from_model_dir(options.model_dir);
  if (!tok) return tok.error();
  rt->tokenizer_ = std::make_unique<Tokenizer>(std::move(*tok));

  if (options.decode_ahead != "auto" && options.decode_ahead != "on" && options.decode_ahead != "off")
    return make_error("--decode-ahead must be auto, on or off, not \"" + options.decode_ahead + "\"");
  rt->ctx_size_ = options.ctx_size > 0 ? options.ctx_size : std::min(rt->config_.max_position_embeddings, 8192);
  auto codecs = KvCodecChoice::parse(options.kv_codec);
  if (!codecs) return codecs.error();
  // Every sequence's whole context in whole pages: the engine's claims (a sequence's prompt and
  // max_tokens, rounded up to pages) then always fit --parallel sequences.
  const uint32_t ctx_pages = (static_cast<uint32_t>(rt->ctx_size_) + KvCache::kPageTokens - 1) / KvCache::kPageTokens;
  const uint32_t capacity = capacity_tokens ? capacity_tokens
                                            : ctx_pages * KvCache::kPageTokens * static_cast<uint32_t>(std::max(1, options.parallel));

  // The backends and the layers each runs (one backend unless --gpu-layers/--devices split them).
  KvSizing kv_sizing;
  kv_sizing.capacity_tokens = capacity;
  if (options.gpu_layers == "auto") {  // sizing the split needs the codecs' row bytes
    // MLA's latent cache (as the backends are expected to run it): one head of its own widths.
    const ModelConfig& c = rt->config_;
    const bool latent = c.mla.enabled() && c.mla.latent_cache;
    const int k_width = latent ? c.mla.kv_lora_rank + c.mla.qk_rope_head_dim : c.head_dim;
    const int v_width = latent ? c.mla.kv_lora_rank : c.head_dim;
    auto k = KvCodec::create(*rt->registry_, codecs->k_name, codecs->k_options, k_width, SL_KV_KEYS);
    if (!k) return k.error();
    auto v = KvCodec::create(*rt->registry_, codecs->v_name, codecs->v_options, v_width, SL_KV_VALUES);
    if (!v) return v.error();
    kv_sizing.bytes_per_token_per_layer = uint64_t(latent ? 1 : c.num_kv_heads) * ((*k)->format().row_bytes + (*v)->format().row_bytes);
  }
  auto placement = place_layers(*rt->registry_, options, rt->config_, *rt->tensors_, kv_sizing);
  if (!placement) return placement.error();
  rt->placement_ = placement->describe();
  rt->backends_ = std::move(placement->backends);
  std::vector<StageSpec> stages;
  for (std::size_t i = 0; i < rt->backends_.size(); ++i) {
    stages.push_back(StageSpec{rt->backends_[i].get(), placement->n_layers[i]});
    if (rt->backends_[i]->name() != "cpu") rt->offloaded_layers_ += placement->n_layers[i];
  }

  // The plan's first parts: the process as it is before the weights (code, libraries, plugins,
  // tokenizer, opened backends), the weights as they turn out resident (a backend may widen them),
  // one pass's activations with the host's copy of its logits, and the headroom.
  MemoryBudget& budget = rt->budget_;
  budget.limit = options.mem_limit_bytes;
  if (budget.limit) {
    malloc_trim(0);  // what was freed before (an earlier engine's heap) is not the process's need
    reset_resident_peak();  // the peak from here on is this plan's
  }
  budget.process = resident_bytes_now();
  auto model = Transformer::create(rt->config_, *rt->tensors_, stages);
  if (!model) return model.error();
  rt->model_ = std::move(*model);
  rt->config_.mla.latent_cache = rt->model_->config().mla.latent_cache;  // the model's backends chose MLA's cache form
  const bool streamed_experts = rt->model_->expert_layout() && options.expert_store != "resident";
  const uint64_t weight_bytes = streamed_experts ? rt->model_->dense_weight_bytes() : rt->model_->weight_bytes();
  budget.weights = std::max(weight_bytes, resident_bytes_now() - std::min(resident_bytes_now(), budget.process));
  // activation_bytes counts logits for every row of the batch (perplexity's case); serving asks for
  // a row per sequence and per speculative guess, on the device and again on the host.
  const uint64_t batch_tokens = static_cast<uint64_t>(std::max(1, options.prefill_size) + std::max(1, options.parallel));
  const bool drafting = !options.draft.empty() || !options.draft_model.empty();
  const uint64_t logit_rows = std::min<uint64_t>(batch_tokens, static_cast<uint64_t>(std::max(1, options.parallel)) *
                                                                   (1 + (drafting ? std::max(1, options.num_draft_tokens) : 0)));
  const uint64_t row_bytes = uint64_t(rt->config_.vocab_size) * sizeof(float);
  budget.activations = activation_bytes(rt->config_, options) - batch_tokens * row_bytes + 2 * logit_rows * row_bytes;
  budget.headroom = memory_headroom(budget.limit);
  if (budget.limit && budget.fixed() > budget.limit)
    return make_error("--mem-limit " + format_mib(budget.limit) + " is too small for this model: the process " + format_mib(budget.process) +
                      ", its weights " + format_mib(budget.weights) + ", one forward pass's activations " + format_mib(budget.activations) +
                      " and headroom " + format_mib(budget.headroom) + " need " + format_mib(budget.fixed()) + " before any KV cache");
  if (const auto& layout = rt->model_->expert_layout()) {
    uint64_t expert_budget = static_cast<uint64_t>(options.expert_cache_mb) << 20;
    if (budget.limit && streamed_experts) {
      // Streamed experts share the limit with the KV cache: at most half of what is left.
      const uint64_t most = (budget.limit - budget.fixed()) / 2;
      if (expert_budget == 0 || expert_budget > most) {
        if (expert_budget > most)
          std::fprintf(stderr, "--mem-limit: the expert cache shrinks from %s to %s to leave room for the KV cache\n",
                       format_mib(expert_budget).c_str(), format_mib(most).c_str());
        expert_budget = most;
      }
    }
    budget.expert_cache = streamed_experts ? expert_budget : 0;
    auto store = open_expert_store(*rt->registry_, options.expert_store, expert_budget, *layout, rt->tensors_->files());
    if (!store) return store.error();
    rt->store_ = std::move(*store);
    if (auto s = rt->model_->attach_expert_store(rt->store_.get()); !s) return s.error();
  }

  KvPoolSpec& pools = rt->pools_;
  pools.recent_tokens = options.kv_recent;
  pools.max_sequences = static_cast<uint32_t>(std::max(1, options.parallel));
  pools.max_batch_tokens = static_cast<uint32_t>(std::max(1, options.prefill_size) + std::max(1, options.parallel));
  pools.window_pages = options.kv_window_pages;
  for (const auto& st : stages) rt->kv_stages_.push_back(KvStage{st.backend, st.n_layers});
  rt->codecs_ = *codecs;
  rt->wanted_capacity_ = capacity;
  if (auto st = rt->create_kv(); !st) return st.error();
  if (options.decode_ahead == "on" && !rt->model_->greedy_on_device())
    return make_error("--decode-ahead on: greedy decoding a token ahead needs the whole model on one backend with ABI 1.4's argmax, "
                      "embed_device and download_begin/download_wait");
  return rt;
}

Status Runtime::create_kv() {
  MemoryBudget& budget = budget_;
  uint32_t capacity = wanted_capacity_;
  kv_.reset();  // make_room: the old pool goes before the new one is allocated
  // A one-page cache tells the bytes a position costs with these codecs and the pools that do not
  // grow with the capacity; the real pool then gets what the limit leaves.
  auto probe = KvCache::create(kv_stages_, *registry_, config_, codecs_, KvCache::kPageTokens, pools_);
  if (!probe) return probe.error();
  const double bytes_per_token = (*probe)->bytes_per_token();
  budget.kv_fixed = (*probe)->per_sequence_pool_bytes();
  if (budget.limit && !warmed_up_) {
    // What a backend sets up on first use is the process's too: kernels compiled (PoCL compiles
    // with LLVM), a pass's buffers, thread pools. One short prefill and one decode step on the
    // probe, then the process is what the resident set rose to since open() (its peak), less the
    // weights.
    kv_ = std::move(*probe);
    SequenceState seq;
    std::vector<float> logits;
    const std::vector<int32_t> tokens(KvCache::kPageTokens, 0);
    Status warm = run(seq, std::span(tokens).first(tokens.size() - 1), false, logits);
    if (warm) warm = run(seq, std::span(tokens).last(1), false, logits);
    kv_->release(seq);
    kv_.reset();
    if (!warm) return make_error("--mem-limit: a first pass to measure the process failed: " + warm.message());
    warmed_up_ = true;
    const uint64_t risen = std::max(resident_bytes_now(), resident_bytes_peak());
    budget.process = std::max(budget.process, risen - std::min(risen, budget.weights));
  }
  probe->reset();
  if (budget.limit) {
    // A device that keeps its own memory (not the CPU backend's, which is the host's) holds the pages
    // too: they must also fit what it has beside its weights.
    const BackendHandle& device = *kv_stages_.front().backend;
    if (kv_stages_.size() == 1 && device.name() != "cpu" && device.device().total_memory > 0) {
      const uint64_t usable = usable_device_bytes(device.device().total_memory, device.device().free_memory, budget.activations);
      const uint64_t taken = budget.weights + budget.kv_fixed;
      budget.device = device.description();
      budget.device_kv_budget = usable > taken ? usable - taken : 1;
    }
    auto tokens = plan_kv_tokens(budget, bytes_per_token, KvCache::kPageTokens, capacity);
    if (!tokens) return tokens.error();
    capacity = *tokens;
  }
  auto kv = KvCache::create(kv_stages_, *registry_, config_, codecs_, capacity, pools_);
  if (!kv) return kv.error();
  kv_ = std::move(*kv);
  budget.kv_tokens = kv_->n_pages() * kv_->page_tokens();
  budget.kv_pages = static_cast<uint64_t>(bytes_per_token * budget.kv_tokens);
  return {};
}

Status Runtime::make_room(uint64_t draft_bytes) {
  budget_.draft = draft_bytes;
  if (!budget_.limit) return {};
  return create_kv();
}

std::string Runtime::model_name() const {
  auto p = std::filesystem::path(options_.model_dir);
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

void Runtime::release(SequenceState& seq) { kv_->release(seq); }

Status Runtime::run(SequenceState& seq, std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
  if (tokens.empty()) return make_error("no tokens to run");
  if (seq.n_past + static_cast<int32_t>(tokens.size()) > ctx_size_)
    return make_error("context full: " + std::to_string(seq.n_past + tokens.size()) + " tokens exceed the context size " +
                      std::to_string(ctx_size_));
  const std::size_t chunk = static_cast<std::size_t>(std::max(1, options_.prefill_size));
  const std::size_t vocab = static_cast<std::size_t>(config_.vocab_size);
  logits.clear();
  std::vector<float> part;
  ForwardBatch batch;
  for (std::size_t start = 0; start < tokens.size(); start += chunk) {
    const std::size_t n = std::min(chunk, tokens.size() - start);
    const int32_t n_end = seq.n_past + static_cast<int32_t>(n);
    if (auto s = kv_->reserve(seq, n_end); !s) return s;
    if (auto s = kv_->update_recent(seq.recent, seq.first_own, seq.n_past, n_end); !s) return s;
    batch.tokens.assign(tokens.begin() + start, tokens.begin() + start + n);
    batch.positions.resize(n);
    batch.seq_slots.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i) batch.positions[i] = seq.n_past + static_cast<int32_t>(i);
    const SequenceKv* one[] = {&seq};
    kv_->fill_batch(one, batch);
    batch.logit_rows.clear();
    const bool last_chunk = start + n == tokens.size();
    if (all_logits) {
      for (uint32_t i = 0; i < n; ++i) batch.logit_rows.push_back(i);
    } else if (last_chunk) {
      batch.logit_rows.push_back(static_cast<uint32_t>(n - 1));
    }
    if (auto s = model_->forward(batch, kv_->caches(), part); !s) return s;
    seq.n_past = n_end;
    if (auto s = kv_->passed(seq, seq.n_past); !s) return s;
    kv_->trim_window(seq);
    if (all_logits)
      logits.insert(logits.end(), part.begin(), part.end());
    else if (last_chunk)
      logits.assign(part.end() - vocab, part.end());
  }
  return {};
}

}  // namespace sluice
