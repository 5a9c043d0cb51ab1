#pragma once
// The KV cache as the host sees it: the codecs for K and V (chosen by --kv-codec), the backend's
// paged storage, and a page allocator. Sequences own lists of pages (their page tables).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/page_pool.h"
#include "plugin/backend_handle.h"
#include "plugin/plugin_registry.h"
#include "sluice/backend.h"
#include "util/result.h"

namespace sluice {

struct ModelConfig;

// A --kv-codec value: "f16", "q8", "k=turbo4,v=turbo3". Names may carry options after ':'.
struct KvCodecChoice {
  std::string k_name, k_options, v_name, v_options;
  static Result<KvCodecChoice> parse(const std::string& spec);
  std::string describe() const;  // "f16" or "k=turbo4,v=turbo3"
};

// One created codec (a K or V instance) with the table it came from.
class KvCodec {
 public:
  static Result<std::unique_ptr<KvCodec>> create(const PluginRegistry& registry, const std::string& name,
                                                 const std::string& options, uint32_t head_dim, sl_kv_role role);
  ~KvCodec();
  const sl_kvcodec_api* api() const { return api_; }
  const sl_kvcodec* codec() const { return codec_; }
  const sl_kv_format& format() const { return format_; }
  const std::string& name() const { return name_; }

 private:
  KvCodec() = default;
  const sl_kvcodec_api* api_ = nullptr;
  sl_kvcodec* codec_ = nullptr;
  sl_kv_format format_{};
  std::string name_;
};

// The recent window (--kv-recent): the newest `tokens` keys before each query are attended from
// exact f16 copies instead of the compressed rows. Recent pages are assigned to a sequence's pages
// while they are inside its window; the pool is sized for every sequence's window plus one batch.
struct RecentWindowSpec {
  int tokens = -1;               // -1: auto (16 when a codec compresses and the backend can), 0: off
  uint32_t max_sequences = 1;    // sequences in one batch (--parallel)
  uint32_t max_batch_tokens = 512;  // tokens in one forward pass (--prefill-size + --parallel)
};

// One backend's share of the layers when the model is split across backends (--gpu-layers,
// --devices): its KV storage holds those layers, indexed from 0.
struct KvStage {
  const BackendHandle* backend = nullptr;
  uint32_t n_layers = 0;
};

class KvCache {
 public:
  static constexpr uint32_t kPageTokens = 16;
  static constexpr uint32_t kAutoRecentWindow = 16;

  static Result<std::unique_ptr<KvCache>> create(const BackendHandle& backend, const PluginRegistry& registry,
                                                 const ModelConfig& config, const KvCodecChoice& choice,
                                                 uint32_t capacity_tokens, const RecentWindowSpec& recent = {});
  // The layers split across backends in order: one storage per stage, one page pool for all.
  static Result<std::unique_ptr<KvCache>> create(std::span<const KvStage> stages, const PluginRegistry& registry,
                                                 const ModelConfig& config, const KvCodecChoice& choice,
                                                 uint32_t capacity_tokens, const RecentWindowSpec& recent = {});
  ~KvCache();

  sl_kv_cache* raw() const { return caches_.front(); }  // the first stage's (all layers when not split)
  std::span<sl_kv_cache* const> caches() const { return caches_; }  // one per stage (Transformer::forward)
  uint32_t page_tokens() const { return kPageTokens; }
  uint32_t n_pages() const { return n_pages_; }
  PagePool& pages() { return *pool_; }
  const PagePool& pages() const { return *pool_; }
  // Bytes of K and V for one token across all layers.
  double bytes_per_token() const { return bytes_per_token_; }
  uint64_t capacity_bytes() const { return static_cast<uint64_t>(bytes_per_token_ * n_pages_ * kPageTokens); }
  std::string codec_description() const;

  // The recent window in tokens (0: every key is read from the codec's rows), and the bytes of its pool.
  uint32_t recent_window() const { return recent_window_; }
  uint64_t recent_bytes() const { return recent_page_bytes_ * recent_free_capacity_; }
  uint32_t recent_pages_in_use() const { return recent_free_capacity_ - static_cast<uint32_t>(recent_free_.size()); }
  // Before a forward pass of one sequence over positions [n_past, n_end): frees the recent pages that
  // left the window and gives a recent page to every page those positions touch, except positions
  // below first_own (a reused prefix: its exact rows were never kept). `recent` parallels the
  // sequence's page list (-1 = none).
  Status update_recent(std::vector<int32_t>& recent, int32_t first_own, int32_t n_past, int32_t n_end);
  // After a pass: frees the recent pages no later query reads (a sequence keeps only its window).
  void trim_recent(std::vector<int32_t>& recent, int32_t n_past);
  void release_recent(std::vector<int32_t>& recent);
  // A sequence's row of a batch's recent table (sl_batch.recent_table): its recent pages, -1 beyond.
  static void write_recent_row(const std::vector<int32_t>& recent, std::span<int32_t> row);

 private:
  KvCache() = default;
  std::unique_ptr<KvCodec> k_, v_;
  std::vector<const BackendHandle*> backends_;  // parallel to caches_
  std::vector<sl_kv_cache*> caches_;
  uint32_t n_pages_ = 0;
  double bytes_per_token_ = 0;
  std::unique_ptr<PagePool> pool_;
  uint32_t recent_window_ = 0;
  uint64_t recent_page_bytes_ = 0;
  uint32_t recent_free_capacity_ = 0;
  std::vector<int32_t> recent_free_;  // recent pages no sequence holds
};

}  // namespace sluice
