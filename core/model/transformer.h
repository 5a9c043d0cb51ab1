#pragma once
// The decoder-only transformer, written once for every supported architecture: the differences
// (biases, q/k norms, rotary variants, sliding windows, tied embeddings) come from ModelConfig and
// from which tensors the checkpoint has. Weights stay in the memory-mapped safetensors files; a
// backend sees them through buffers wrapping the byte ranges of the tensors it runs. The layers may
// be split across backends in stages (--gpu-layers, --devices): one forward pass, run stage by stage.
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <optional>

#include "model/expert_layout.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "plugin/backend_handle.h"
#include "plugin/expert_store_handle.h"
#include "sluice/backend.h"
#include "util/result.h"

namespace sluice {

// One forward pass: tokens of one or more sequences, with their positions and page tables.
struct ForwardBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> seq_slots;
  uint32_t n_seqs = 1;
  uint32_t max_pages = 0;
  std::vector<int32_t> page_table;      // [n_seqs][max_pages]
  std::vector<int32_t> recent_table;    // [n_seqs][max_pages] recent (exact) pages, -1 none; empty = no window
  std::vector<uint32_t> logit_rows;     // which tokens need logits (e.g. each sequence's last)
};

// One backend's share of a model split across backends (--gpu-layers, --devices): the next
// n_layers layers, in order. The first stage also embeds the tokens, the last one runs the final
// norm and the LM head; the hidden state moves between stages by download and upload.
struct StageSpec {
  const BackendHandle* backend = nullptr;
  uint32_t n_layers = 0;
};

// Device bytes of the weights each part of the model binds, for sizing --gpu-layers auto. Routed
// experts are not counted: they come from the expert store, wrapped per use.
struct WeightFootprint {
  std::vector<uint64_t> layer_bytes;  // per layer
  uint64_t embed_bytes = 0;           // the embedding table
  uint64_t head_bytes = 0;            // the final norm and an untied lm_head
  bool tied_head = false;             // the head reads the embedding table
};

class Transformer {
 public:
  // Binds every tensor the architecture needs (clear error naming a missing or misshapen one), all
  // layers on one backend.
  static Result<std::unique_ptr<Transformer>> create(const ModelConfig& config, const SafetensorsSet& tensors,
                                                     const BackendHandle& backend);
  // The same, the layers split across backends in order; the stages' n_layers sum to the model's.
  static Result<std::unique_ptr<Transformer>> create(const ModelConfig& config, const SafetensorsSet& tensors,
                                                     std::span<const StageSpec> stages);
  static Result<WeightFootprint> footprint(const ModelConfig& config, const SafetensorsSet& tensors);

  // Runs the batch; writes logits for batch.logit_rows into `logits` ([rows][vocab]). One KV cache
  // per stage, each holding that stage's layers (indices from 0); the first form is for one stage.
  Status forward(const ForwardBatch& batch, sl_kv_cache* cache, std::vector<float>& logits);
  Status forward(const ForwardBatch& batch, std::span<sl_kv_cache* const> caches, std::vector<float>& logits);

  // Greedy decoding a token ahead (ABI 1.4; one stage, whose backend has argmax, embed_device and
  // download_begin/download_wait): a pass reads its token on the device, where the pass before it
  // left its choice (the argmax of its logits), and leaves its own choice there, copied back to the
  // host without waiting — so the host can issue the next pass before it knows this one's token.
  static constexpr uint32_t kGreedySlots = 4;
  bool greedy_on_device() const;
  // Issues one pass of batch (one logit row) without waiting for it. from_slot < 0: the batch's
  // tokens from the host; otherwise its one token is the choice of the pass issued to from_slot.
  // The pass's choice goes to to_slot, which must not be in flight.
  Status forward_greedy(const ForwardBatch& batch, sl_kv_cache* cache, int from_slot, uint32_t to_slot);
  // Waits for the choice of the pass issued to `slot` and frees the slot.
  Result<int32_t> greedy_choice(uint32_t slot);

  const ModelConfig& config() const { return config_; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Bytes that stay resident: every weight but the routed experts'.
  uint64_t dense_weight_bytes() const { return weight_bytes_ - (experts_ ? experts_->total_bytes() : 0); }
  // Where the layers run: one StageSpec per backend, in layer order.
  std::vector<StageSpec> stages() const;

  // Mixture-of-Experts models: where the experts lie, and the store that serves them (required
  // before the first forward pass of such a model; the caller keeps it alive).
  const std::optional<ExpertLayout>& expert_layout() const { return experts_; }
  void attach_expert_store(ExpertStoreHandle* store) { store_ = store; }

 private:
  struct Layer {
    sl_weight attn_norm{}, q{}, k{}, v{}, o{}, q_bias{}, k_bias{}, v_bias{}, o_bias{};
    sl_weight q_norm{}, k_norm{}, ffn_norm{}, gate{}, up{}, down{};
    bool has_q_bias = false, has_k_bias = false, has_v_bias = false, has_o_bias = false, has_qk_norm = false;
    bool qk_norm_full = false;  // q/k norms over the whole projection (olmoe) rather than per head
    uint32_t window = 0;
    int moe_index = -1;         // >= 0: a MoE block (router below, experts in the store)
    sl_weight router{};
  };

  // Activation buffers on one backend, grown to the largest batch seen.
  struct Activations {
    uint32_t capacity_tokens = 0, capacity_logit_rows = 0;
    Buffer x, h, q, k, v, attn, o, gate, up, act, last, last_norm, logits;
    Buffer router_logits, expert_in, expert_out, zeros;  // Mixture of Experts
  };

  // A buffer over a page-aligned byte range of one model file, holding the tensors a stage binds.
  struct WeightSpan {
    uint32_t file = 0;
    uint64_t begin = 0, end = 0;
    Buffer buffer;
  };

  struct Stage {
    const BackendHandle* backend = nullptr;
    uint32_t first = 0, end = 0;  // layers [first, end)
    bool embeds = false, has_head = false;
    // This pass: the head reads every row in order, so the last layer leaves its MLP output in a.o
    // for the head's add_rms_norm (head_takes_residual), and whether it did (residual_pending).
    bool head_takes_residual = false, residual_pending = false;
    // Binding runs twice: first recording the tensors the stage needs (to wrap only their bytes),
    // then for real against the spans.
    bool recording = false;
    std::vector<const TensorInfo*> used;
    std::vector<WeightSpan> spans;
    // The first MoE layer after this stage's, when it lies on a later stage: its router, bound
    // here too, predicts that layer's experts for the store's prefetch.
    sl_weight next_router{};
    bool has_next_router = false;
    Activations act;
  };

  explicit Transformer(const ModelConfig& config) : config_(config) {}
  Status bind_stage(const SafetensorsSet& tensors, Stage& stage);
  Status wrap_spans(Stage& stage);
  Result<sl_buffer*> locate(Stage& stage, const TensorInfo& t, uint64_t& offset) const;
  Result<sl_weight> bind(const SafetensorsSet& tensors, Stage& stage, const std::string& name, std::vector<int64_t> shape) const;
  Result<sl_weight> bind_quantized(const SafetensorsSet& tensors, Stage& stage, const std::string& module, const TensorInfo& weight,
                                   const std::vector<int64_t>& shape) const;
  Status ensure_activations(Stage& stage, uint32_t n_tokens, uint32_t n_logit_rows);
  Status run_layer(Stage& stage, const Layer& layer, uint32_t index, uint32_t n, sl_kv_cache* cache, bool& residual_pending);
  // One of several products of one input.
  struct Product {
    const char* what;  // the op's name in errors
    const sl_weight* weight;
    const sl_weight* bias;  // or null
    sl_buffer* out;
  };
  // Products of one input: what names them together in errors (each Product's own name where they
  // run one by one).
  Status multiply(const BackendHandle& be, const Buffer& in, uint32_t n, std::span<const Product> products, const char* what);
  // a.x += a.o, then a.h = rms_norm(a.x, norm).
  Status add_then_norm(Stage& stage, const sl_weight& norm, uint32_t n);
  // h → o: the routed experts' weighted sum for every token.
  Status run_moe(Stage& stage, const Layer& layer, uint32_t n);
  Result<std::vector<std::vector<std::pair<uint32_t, float>>>> route(Stage& stage, const sl_weight& router, uint32_t n);
  Status gather_rows(const BackendHandle& be, const Buffer& src, const std::vector<int32_t>& rows, uint32_t dim, const Buffer& dst);
  Status scatter_add_rows(const BackendHandle& be, const Buffer& src, const std::vector<int32_t>& rows,
                          const std::vector<float>& weights, uint32_t dim, const Buffer& dst);
  Status run_layers(const ForwardBatch& batch, std::span<sl_kv_cache* const> caches, int from_slot);
  Status run_head(Stage& stage, const ForwardBatch& batch);

  ModelConfig config_;
  std::vector<Stage> stages_;
  sl_weight embed_{}, final_norm_{}, lm_head_{};
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;
  float rope_factor_ = 1.0f;
  uint64_t weight_bytes_ = 0;
  std::vector<float> hidden_;  // the hidden state on its way between stages

  // Greedy choices on the device (forward_greedy): a slot's id, its copy on the host and the
  // download's ticket (0: none in flight).
  Buffer greedy_ids_;
  std::array<int32_t, kGreedySlots> greedy_host_{};
  std::array<uint64_t, kGreedySlots> greedy_ticket_{};

  // Mixture of Experts.
  std::optional<ExpertLayout> experts_;
  ExpertStoreHandle* store_ = nullptr;
};

}  // namespace sluice
