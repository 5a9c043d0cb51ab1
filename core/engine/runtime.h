#pragma once
// Everything a loaded model needs at run time, opened in order: plugins, backend, model files and
// configuration, tokenizer, forward pass, KV cache. Shared by the engine (serving, generation) and
// by tools that drive the forward pass directly (perplexity).
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/memory_budget.h"
#include "engine/placement.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "plugin/backend_handle.h"
#include "plugin/expert_store_handle.h"
#include "plugin/plugin_registry.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

// A sequence's KV pages (and state) and how many of its positions are stored.
using SequenceState = SequenceKv;

class Runtime {
 public:
  // capacity_tokens: KV positions to reserve across all sequences (0: ctx_size × parallel).
  static Result<std::unique_ptr<Runtime>> open(const EngineOptions& options, uint32_t capacity_tokens = 0);

  // Runs tokens for one sequence starting at seq.n_past, growing its pages as needed, in chunks of
  // prefill_size. all_logits: logits for every token (perplexity) or only the last.
  Status run(SequenceState& seq, std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits);
  void release(SequenceState& seq);
  // Pages (and a state slot) for positions [seq.n_past, n_positions) (KvCache::reserve).
  Status ensure_pages(SequenceState& seq, int32_t n_positions) { return kv_->reserve(seq, n_positions); }

  const EngineOptions& options() const { return options_; }
  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // The backend of the first layers (the only one unless --gpu-layers/--devices split the model).
  const BackendHandle& backend() const { return *backends_.front(); }
  // Every backend the model runs on, and which layers each runs ("cpu: ..." when not split).
  const std::vector<std::unique_ptr<BackendHandle>>& backends() const { return backends_; }
  const std::string& placement() const { return placement_; }
  // Layers on backends other than the CPU's (what --gpu-layers auto chose, or every layer on OpenCL).
  uint32_t offloaded_layers() const { return offloaded_layers_; }
  Transformer& model() { return *model_; }
  const Transformer& model() const { return *model_; }
  KvCache& kv() { return *kv_; }
  const PluginRegistry& plugins() const { return *registry_; }
  ExpertStoreHandle* expert_store() const { return store_.get(); }
  int context_size() const { return ctx_size_; }
  std::string model_name() const;
  // What the process holds, as planned at start (engine/memory_budget.h): under --mem-limit the KV
  // pool was sized to what the rest leaves; without one it describes the same parts.
  const MemoryBudget& memory_budget() const { return budget_; }
  // A draft model opened after this runtime (engine.cpp) takes draft_bytes of the limit: the KV pool
  // is made again, smaller. Only before any sequence holds pages; a no-op without --mem-limit.
  Status make_room(uint64_t draft_bytes);

 private:
  // The KV cache at the capacity the plan allows (the whole wanted capacity without --mem-limit).
  Status create_kv();

  MemoryBudget budget_;
  std::vector<KvStage> kv_stages_;
  KvCodecChoice codecs_;
  KvPoolSpec pools_;
  uint32_t wanted_capacity_ = 0;
  bool warmed_up_ = false;        // create_kv measured the process after a first pass  // positions without a limit: ctx_size × parallel (or the caller's)
  EngineOptions options_;
  std::unique_ptr<PluginRegistry> registry_;
  ModelConfig config_;
  std::unique_ptr<SafetensorsSet> tensors_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::unique_ptr<BackendHandle>> backends_;  // one per stage, in layer order
  std::string placement_;
  uint32_t offloaded_layers_ = 0;
  std::unique_ptr<ExpertStoreHandle> store_;  // MoE models only; outlives the model that uses it
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<KvCache> kv_;
  int ctx_size_ = 0;
};

// Resolves --backend: "auto", "cpu", "opencl", "opencl:0:1" (name:device) or a path to a .so.
// Opens the expert store named by --expert-store ("resident", "uring:direct=0", a plugin name).
Result<std::unique_ptr<ExpertStoreHandle>> open_expert_store(const PluginRegistry& registry, const std::string& spec,
                                                             uint64_t budget_bytes, const ExpertLayout& layout,
                                                             const std::vector<std::filesystem::path>& files);

struct BackendChoice {
  std::string name, device;
};
Result<BackendChoice> choose_backend(PluginRegistry& registry, const std::string& spec);

}  // namespace sluice
