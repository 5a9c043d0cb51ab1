#pragma once
// The KV cache as the host sees it: the codecs for K and V (chosen by --kv-codec), the backends'
// storage laid out per layer (sl_kv_layout.layers), the page pools and state slots, and what each
// sequence holds of them (SequenceKv).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/page_pool.h"
#include "engine/sequence_kv.h"
#include "plugin/backend_handle.h"
#include "plugin/plugin_registry.h"
#include "sluice/backend.h"
#include "util/result.h"

namespace sluice {

struct ModelConfig;
struct ForwardBatch;

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
  sl_kv_role role() const { return role_; }

 private:
  KvCodec() = default;
  const sl_kvcodec_api* api_ = nullptr;
  sl_kvcodec* codec_ = nullptr;
  sl_kv_format format_{};
  std::string name_;
  sl_kv_role role_ = SL_KV_KEYS;
};

// How the KV cache sizes its pools besides the main one (capacity_tokens positions):
// - the recent window (--kv-recent): the newest `recent_tokens` keys before each query are attended
//   from exact f16 copies instead of the compressed rows; recent pages are assigned to a sequence's
//   pages while they are inside its window; the pool is sized for every sequence's window plus one batch;
// - sliding-window layers' pages: each sequence holds only the pages its queries' windows reach,
//   the pool sized the same way;
// - recurrent layers' state slots: a live state per sequence (and per pass in flight) plus
//   `state_snapshots` snapshots at block ends, kept least-recently-used for prefix reuse.
struct KvPoolSpec {
  int recent_tokens = -1;           // -1: auto (16 when a codec compresses and the backend can), 0: off
  uint32_t max_sequences = 1;       // sequences in one batch (--parallel)
  uint32_t max_batch_tokens = 512;  // tokens in one forward pass (--prefill-size + --parallel)
  int state_snapshots = -1;         // -1: auto (KvCache::kSnapshotsPerSequence a sequence)
  bool window_pages = true;         // false: sliding-window layers keep every position (as without SL_CAP_KV_WINDOW_PAGES)
};

// One backend's share of the layers when the model is split across backends (--gpu-layers,
// --devices): its KV storage holds those layers, indexed from 0.
struct KvStage {
  const BackendHandle* backend = nullptr;
  uint32_t n_layers = 0;
};

// The KV cache: per layer (ModelConfig::layer_cache) K and V rows of every position (FULL layers,
// pages from the main pool), of the newest positions only (sliding-window layers on a backend with
// SL_CAP_KV_WINDOW_PAGES: pages from the window pool, released as the window moves on), or a state
// per sequence (recurrent layers: state slots). A block of page_tokens positions is published to
// the prefix cache in every pool under one chained hash; a request reuses the longest prefix for
// which every pool still holds what its next query needs.
class KvCache {
 public:
  static constexpr uint32_t kPageTokens = 16;
  static constexpr uint32_t kAutoRecentWindow = 16;
  static constexpr uint32_t kSnapshotsPerSequence = 8;

  static Result<std::unique_ptr<KvCache>> create(const BackendHandle& backend, const PluginRegistry& registry,
                                                 const ModelConfig& config, const KvCodecChoice& choice,
                                                 uint32_t capacity_tokens, const KvPoolSpec& pools = {});
  // The layers split across backends in order: one storage per stage, one page pool for all.
  static Result<std::unique_ptr<KvCache>> create(std::span<const KvStage> stages, const PluginRegistry& registry,
                                                 const ModelConfig& config, const KvCodecChoice& choice,
                                                 uint32_t capacity_tokens, const KvPoolSpec& pools = {});
  ~KvCache();

  sl_kv_cache* raw() const { return caches_.front(); }  // the first stage's (all layers when not split)
  std::span<sl_kv_cache* const> caches() const { return caches_; }  // one per stage (Transformer::forward)
  uint32_t page_tokens() const { return kPageTokens; }
  uint32_t n_pages() const { return n_pages_; }
  PagePool& pages() { return *pool_; }
  const PagePool& pages() const { return *pool_; }
  // The kind each layer that keeps a cache was given, by its cache index (ModelConfig::cache_index; the
  // model's layer but past KV-sharing layers) — sl_kv_layer_kind: a sliding-window layer is SL_KV_FULL
  // on a backend without window pages — and the pools beside the main one (null: no such layer).
  uint32_t layer_kind(uint32_t cache_layer) const { return kinds_.at(cache_layer); }
  uint32_t n_cache_layers() const { return static_cast<uint32_t>(kinds_.size()); }
  const PagePool* window_pool() const { return window_pool_.get(); }
  const PagePool* state_pool() const { return state_pool_.get(); }
  uint32_t window() const { return window_; }  // the largest window of a WINDOW layer (0: none)

  // Memory. Bytes of K and V of the FULL layers for one token; of one page of every WINDOW layer
  // (a sequence holds at most window_pages_per_sequence of them); of one state slot of every
  // recurrent layer.
  double bytes_per_token() const { return bytes_per_token_; }
  uint64_t window_page_bytes() const { return window_page_bytes_; }
  uint32_t window_pages_per_sequence() const { return window_pages_per_sequence_; }
  uint64_t state_slot_bytes() const { return state_slot_bytes_; }
  // Everything the backends hold for K, V and state (not the recent window's pool).
  uint64_t capacity_bytes() const;
  // The bytes of pages and slots now held (by sequences or the prefix cache).
  uint64_t bytes_in_use() const;
  // The pools sized per sequence and batch, not by capacity_tokens: sliding-window pages (as many as
  // a cache of any capacity would take), recurrent states, the recent window (--mem-limit's plan).
  uint64_t per_sequence_pool_bytes() const;
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

  // A sequence's life in the cache. reuse_prefix, on a new sequence: the longest run of the first
  // max_blocks blocks of `tokens` that the prefix cache holds for every kind of layer (FULL pages
  // of every block, WINDOW pages of the blocks the next query's window reaches, the state snapshot
  // at the run's end, copied into the sequence's live slot). reserve, before a pass over
  // [n_past, n_end): pages for those positions in every pool, window pages back to the first the
  // pass's queries reach, and a cleared state slot on the first pass — an error when a pool is short
  // (the engine waits for others to free theirs). passed, once the pass that took the sequence to
  // n_end is issued: the recent pages no later query reads go back, and at a block's end the state
  // is snapshotted. publish, once n_past is advanced and the tokens known: every computed block goes
  // to the prefix cache in each pool, then the window pages no later query reaches go back
  // (trim_window alone, where nothing is published). release: everything back.
  Status reuse_prefix(SequenceKv& seq, std::span<const int32_t> tokens, std::size_t max_blocks);
  Status reserve(SequenceKv& seq, int32_t n_end);
  Status passed(SequenceKv& seq, int32_t n_end);
  void publish(SequenceKv& seq, std::span<const int32_t> tokens);
  void trim_window(SequenceKv& seq);
  void release(SequenceKv& seq);
  // Speculative decoding's rejected drafts: forgets positions [n_end, seq.n_past) as if they had
  // never been computed — the pages (of every pool) past n_end's block go back, n_past becomes
  // n_end; rows left in the kept pages are overwritten before any query reads them (a query at
  // position p reads keys up to p, all written by then). An error below what was published. The
  // verifying pass must not be passed() before: passed() at its own end frees recent-window pages
  // that queries at the kept positions still read — pass the kept end after the rollback.
  // Recurrent layers' state is one value, not a row per position: rollback leaves it; the caller
  // keeps a copy from before the pass (save_state), puts it back (restore_state) and runs the kept
  // positions again.
  Status rollback(SequenceKv& seq, int32_t n_end);
  bool has_state() const { return state_pool_ != nullptr; }
  // Forking (a request's n choices after its prompt): `to` (empty) gets what `from` holds of
  // positions [0, from.n_past) without computing them again — its full blocks shared by reference,
  // the partly filled last block copied into a page of its own (both sequences write their next
  // positions there), the recurrent state copied into a slot of its own. Only where every layer
  // keeps full pages and there is no recent window (can_fork): a sliding window's pages and the
  // recent window's exact rows are not copied; elsewhere the engine takes the prompt's published
  // blocks through reuse_prefix instead and computes the rest.
  bool can_fork() const { return !window_pool_ && recent_window_ == 0; }
  Status fork(const SequenceKv& from, SequenceKv& to);
  // A copy of the sequence's live state in a slot of its own (-1: the model has no recurrent layers,
  // or the sequence no state yet); restore_state copies it back and frees it, drop_state frees it.
  Result<int32_t> save_state(const SequenceKv& seq);
  Status restore_state(SequenceKv& seq, int32_t saved);
  void drop_state(int32_t saved);
  // A batch's tables (page, window and recent tables, state slots) for its sequences, in order.
  void fill_batch(std::span<const SequenceKv* const> seqs, ForwardBatch& batch) const;

 private:
  KvCache() = default;
  Result<const KvCodec*> codec(const PluginRegistry& registry, const KvCodecChoice& choice, uint32_t dim, sl_kv_role role);
  int32_t window_first_block(int32_t position) const;  // the first block a query at `position` reads in WINDOW layers
  Status copy_state(uint32_t src, uint32_t dst) const;
  Status clear_state(uint32_t slot) const;
  void drop_snapshots(SequenceKv& seq, std::size_t below_block);

  std::unique_ptr<KvCodec> k_, v_;  // the model's usual geometry (head_dim)
  std::vector<std::unique_ptr<KvCodec>> codecs_;  // other widths (per (width, role))
  std::vector<const BackendHandle*> backends_;  // parallel to caches_
  std::vector<sl_kv_cache*> caches_;
  std::vector<bool> stage_has_state_;           // parallel to caches_
  std::vector<uint32_t> kinds_;                 // per cache layer (sl_kv_layer_kind)
  uint32_t n_pages_ = 0;
  double bytes_per_token_ = 0;
  std::unique_ptr<PagePool> pool_;
  std::unique_ptr<PagePool> window_pool_;       // WINDOW layers' pages (null: none)
  uint32_t window_ = 0;
  uint64_t window_page_bytes_ = 0;
  uint32_t window_pages_per_sequence_ = 0;
  uint32_t window_pool_pages_wanted_ = 0;       // before the main pool's size caps it
  std::unique_ptr<PagePool> state_pool_;        // recurrent layers' slots: live states and snapshots (null: none)
  uint64_t state_slot_bytes_ = 0;
  uint32_t recent_window_ = 0;
  uint64_t recent_page_bytes_ = 0;
  uint32_t recent_free_capacity_ = 0;
  std::vector<int32_t> recent_free_;  // recent pages no sequence holds
};

}  // namespace sluice
