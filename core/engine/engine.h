#pragma once
// The engine: owns the loaded model, the backend and the KV cache, and runs generation requests on
// one engine thread. Requests are token-level (the HTTP edge does templates, text and stop strings);
// results stream back through each request's callback, called on the engine thread.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/memory_budget.h"
#include "engine/sampling.h"
#include "engine/token_constraint.h"
#include "util/result.h"

namespace sluice {

class Tokenizer;
struct ModelConfig;

struct EngineOptions {
  std::string model_dir;
  std::string backend = "auto";         // auto | cpu | opencl[:P:D] | path to a backend .so
  std::string kv_codec = "f16";         // f32 | f16 | plugin name | k=A,v=B
  int kv_recent = -1;                   // recent window kept exact, tokens (-1 auto, 0 off)
  // Sliding-window layers keep only their window's pages where the backend can (SL_CAP_KV_WINDOW_PAGES);
  // false: every position, as on a backend without it (attention alone applies the window).
  bool kv_window_pages = true;
  std::string expert_store = "resident"; // resident | uring[:options] | plugin name
  int expert_cache_mb = 0;              // the streaming store's budget (0 = its default)
  std::string plugin_dir;               // "" = next to the executable
  int threads = 0;                      // 0 = all cores
  int ctx_size = 0;                     // 0 = the model's max_position_embeddings (capped)
  int prefill_size = 512;               // prompt tokens per forward pass
  // Recurrent layers (Qwen3.5's linear attention) keep a state, not a history: a cached prefix is
  // reusable only up to a block end where the state was snapshotted, and a pass snapshots where it
  // ends. So a prompt's passes also end at every multiple of this many tokens (rounded down to whole
  // KV pages; 0: only where prefill_size ends them) and at the prompt's last whole block. Smaller:
  // longer reuse of a prefix shared partway (a system prompt), at shorter prefill passes.
  int state_snapshot_tokens = 256;
  int parallel = 1;                     // sequences served at once
  int queue_size = 64;                  // waiting requests before submit() refuses
  // Layer partitioning (engine/layer_split.h): "" = every layer on the chosen backend, "N" = the
  // first N layers on the GPU/OpenCL backend (--backend) and the rest on the CPU backend, "auto" =
  // as many as fit the device's memory with their KV cache at ctx_size.
  std::string gpu_layers;
  // Several offload devices, e.g. "opencl:0:0,opencl:0:1" (instead of --backend): the offloaded
  // layers are split evenly between them, in this order; "" = the one --backend.
  std::string devices;
  // Greedy decoding a token ahead (engine/greedy_ahead.h): "auto" where the backend queues its ops
  // (a GPU), "on", "off".
  std::string decode_ahead = "auto";
  // The options of the backends --backend or --devices name (sl_backend_config.options; the OpenCL
  // backend's: docs/GUIDE.md, "OpenCL tuning"); the CPU backend that runs the layers a split leaves
  // gets none.
  std::string backend_options;
  // Speculative decoding (engine/speculation.h, engine/drafter.h): draft = "ngram" (prompt lookup)
  // or draft_model = a model folder with the target's tokenizer (one of them; both empty: off).
  std::string draft;
  std::string draft_model;
  int num_draft_tokens = 8;  // the most guesses one pass verifies (the adaptive length stays below)
  // Sequences speculate only while at most this many decode in one step: a batch that large already
  // reads the weights once for several tokens, and drafts would add rows without saving a pass.
  int spec_max_batch = 2;
  // Whether a sequence may stop guessing for a while where plain passes give more tokens a millisecond
  // (DraftLength: a draft that is seldom right or dear); false: it guesses at every pass (tests).
  bool draft_rests = true;
  // --mem-limit (engine/memory_budget.h): the bytes everything is planned under (0: none; the KV
  // pool then holds ctx_size × parallel positions), and how long a request waits in the queue for
  // the KV pages it may need before it ends with `retry_later`.
  uint64_t mem_limit_bytes = 0;
  int mem_wait_ms = 30000;
};

enum class FinishReason { kStop, kLength, kCancelled, kError };
const char* to_string(FinishReason reason);

struct TokenEvent {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<TokenChoice> top_logprobs;  // filled when the request asks for them
  int choice = 0;  // which of the request's n choices it belongs to
};

struct GenerationStats {
  int prompt_tokens = 0;
  int cached_tokens = 0;        // prompt tokens served from the prefix cache
  int completion_tokens = 0;
  double queue_ms = 0;
  double prefill_ms = 0;
  double decode_ms = 0;
  // Decode passes (every target forward pass that gave this sequence tokens after the first) and the
  // tokens they gave: 1 per pass in plain decoding, more when speculative guesses were kept.
  int decode_passes = 0;
  int decode_pass_tokens = 0;
  int draft_tokens = 0;     // guesses the target verified
  int draft_accepted = 0;   // of them, kept
  double tokens_per_pass() const { return decode_passes > 0 ? static_cast<double>(decode_pass_tokens) / decode_passes : 0; }
  double acceptance_rate() const { return draft_tokens > 0 ? static_cast<double>(draft_accepted) / draft_tokens : 0; }
  double prefill_tps() const { return prefill_ms > 0 ? (prompt_tokens - cached_tokens) * 1000.0 / prefill_ms : 0; }
  double decode_tps() const { return decode_ms > 0 && completion_tokens > 1 ? (completion_tokens - 1) * 1000.0 / decode_ms : 0; }
};

struct GenerationResult {
  std::vector<int32_t> ids;
  FinishReason finish = FinishReason::kLength;
  std::string error;  // when finish == kError
  // kError before the request started: the KV pages it may need were not free within --mem-wait
  // (the edge answers 503 with Retry-After).
  bool retry_later = false;
  GenerationStats stats;
  int choice = 0;  // which of the request's n choices
};

struct GenerationRequest {
  static constexpr int kMaxChoices = 16;

  std::vector<int32_t> prompt_ids;
  int max_tokens = 256;
  // Choices (OpenAI's n, 1..kMaxChoices): sequences sampled independently from one prompt. The
  // prompt is prefilled once; then the n sequences fork from it (KvCache::fork shares its pages) and
  // decode together, each as a slot of --parallel (choices without a free slot wait for one, ahead
  // of other requests). Choice i > 0 samples with a seed derived from sampling.seed and i, and with
  // its own constraint (TokenConstraint::restart). Every callback says its choice; on_done is
  // called once per choice.
  int n = 1;
  SamplingParams sampling;
  bool ignore_eos = false;
  int top_logprobs = 0;  // alternatives per token to report (0 = none)
  // The grammar the output must follow (nullptr: free text). Masks apply before sampling, per
  // sequence, so constrained and free requests batch together; such a request never decodes a
  // token ahead (greedy_ahead picks on the device, where no mask applies). Reported logprobs are
  // those of the masked distribution.
  std::shared_ptr<TokenConstraint> constraint;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Called on the engine thread for every generated token; return false to stop (the request then
  // finishes with kStop — the edge uses this for stop strings — or kCancelled if `cancelled` is set).
  std::function<bool(const TokenEvent&)> on_token;
  // Called once on the engine thread when the request ends, whatever the reason.
  std::function<void(const GenerationResult&)> on_done;
  // Set from any thread to cancel (e.g. the client disconnected); the engine frees the slot promptly.
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
};

struct EngineMetrics {
  uint64_t requests_total = 0;
  uint64_t requests_failed = 0;
  uint64_t prompt_tokens_total = 0;
  uint64_t cached_tokens_total = 0;
  uint64_t completion_tokens_total = 0;
  // Prompt tokens run through the model (a prompt less its cached prefix, once per request however
  // many choices fork from it) and the sequences that forked from another's prompt (n > 1).
  uint64_t prefilled_tokens_total = 0;
  uint64_t forked_sequences_total = 0;
  // Decode steps issued a token ahead (engine/greedy_ahead.h) and the sequences' rows in them: rows
  // over steps is how many greedy sequences decoded together.
  uint64_t ahead_steps_total = 0;
  uint64_t ahead_rows_total = 0;
  double prefill_seconds_total = 0;
  double decode_seconds_total = 0;
  // Speculative decoding (GenerationStats' counters, summed over finished requests).
  std::string drafter;  // "" when off, "ngram", "draft model NAME"
  uint64_t draft_bytes = 0;  // a draft model's weights and KV cache
  uint64_t decode_passes_total = 0;
  uint64_t decode_pass_tokens_total = 0;
  uint64_t draft_tokens_total = 0;
  uint64_t draft_accepted_total = 0;
  int queue_depth = 0;
  int active_sequences = 0;
  uint64_t weight_bytes = 0;
  uint32_t offloaded_layers = 0;  // layers on a backend other than the CPU's
  uint64_t kv_bytes_capacity = 0;
  uint64_t kv_bytes_used = 0;
  // KV pages: held by live sequences (0 when idle, so anything else is a leak) and kept by the prefix
  // cache (reusable prompt blocks, some also held by sequences; evicted on demand).
  uint32_t kv_pages_total = 0;
  uint32_t kv_pages_in_use = 0;
  uint32_t kv_pages_cached = 0;
  uint32_t kv_recent_pages_in_use = 0;  // the recent window's exact pages sequences hold
  // Sliding-window layers' pages (a sequence holds only those its window reaches) and recurrent
  // layers' state slots (live states and snapshots at block ends): totals, in use (held by
  // sequences or the prefix cache), and the most one sequence holds (its window's pages; its state).
  uint32_t kv_window_pages_total = 0, kv_window_pages_in_use = 0;
  uint32_t kv_state_slots_total = 0, kv_state_slots_in_use = 0;
  uint64_t kv_window_bytes_per_sequence = 0;
  uint64_t kv_state_bytes_per_sequence = 0;
  double kv_bytes_per_token = 0;     // the layers that keep every position (full attention)
  uint32_t kv_page_tokens = 0;       // positions a page holds
  // Admission (engine.cpp): the pages the active sequences may still need, claimed when each started
  // (its prompt and max_tokens), and the requests that waited for them past --mem-wait.
  uint32_t kv_pages_claimed = 0;
  uint64_t requests_memory_timeout = 0;
  MemoryBudget memory;               // the plan under --mem-limit (limit 0: none given)
  uint32_t kv_recent_window = 0;      // newest keys attended exactly (0: none)
  uint64_t kv_recent_bytes = 0;       // the recent window's pool of exact rows
  // Mixture-of-Experts models: the expert store's counters (zero for dense models).
  std::string expert_store;
  uint64_t expert_bytes_read = 0;     // bytes that really came from the files
  uint64_t expert_read_requests = 0;
  uint64_t expert_hits = 0;
  uint64_t expert_misses = 0;
  uint64_t expert_prefetched = 0;
  uint64_t expert_cache_bytes = 0;
  uint64_t expert_budget_bytes = 0;
  double expert_read_seconds = 0;
  double expert_read_p50_us = 0;
  double expert_read_p99_us = 0;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const EngineOptions& options);
  virtual ~Engine() = default;

  // Queues a request; an error (queue full, prompt longer than the context, empty prompt) is
  // returned at once and no callback is called. Thread-safe.
  virtual Status submit(std::shared_ptr<GenerationRequest> request) = 0;
  // Runs a request to completion on the caller's thread's behalf (blocks). Thread-safe.
  virtual GenerationResult generate(GenerationRequest request) = 0;
  // Stops the engine thread: waiting and running requests finish as kCancelled.
  virtual void shutdown() = 0;

  virtual const Tokenizer& tokenizer() const = 0;
  virtual const ModelConfig& model_config() const = 0;
  virtual std::string model_name() const = 0;     // the model folder's name
  virtual std::string backend_name() const = 0;   // e.g. "cpu (AMD EPYC ..., 2 threads)"
  virtual std::vector<int32_t> eos_ids() const = 0;
  virtual int context_size() const = 0;
  virtual EngineMetrics metrics() const = 0;
};

}  // namespace sluice
