#pragma once
// The decoder-only transformer: binds a checkpoint's tensors, then runs each forward pass as step
// graphs (sluice/graph.h) that the family's builder (core/model/families/) writes from shared blocks
// (core/model/blocks.h) and each stage's backend runs. Weights stay in the memory-mapped safetensors
// files; a backend sees them through buffers wrapping the byte ranges of the tensors it runs. The
// layers may be split across backends in stages (--gpu-layers, --devices): one graph per stage, the
// hidden state carried between them by the host. A Mixture-of-Experts layer ends its graph at the
// router: the host routes, fetches the experts from the store and goes on in a new graph.
#include <array>
#include <deque>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <optional>

#include "graph/step_graph.h"
#include "model/blocks.h"
#include "model/expert_arrange.h"
#include "model/expert_layout.h"
#include "model/families/family.h"
#include "model/layer_weights.h"
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
  std::vector<int32_t> window_table;    // [n_seqs][max_pages] sliding-window layers' pages, -1 released; empty = none
  std::vector<int32_t> state_slots;     // [n_seqs] recurrent layers' state slot of each sequence; empty = none
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
// experts are not counted: they come from the expert store (bound at attach_expert_store when it is
// the resident one, else wrapped per use).
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

  // Greedy decoding a token ahead (one stage, whose backend runs ARGMAX and EMBED of ids on the
  // device): a pass reads its token on the device, where the pass before it left its choice (the
  // argmax of its logits), and leaves its own choice there, copied back to the host without waiting
  // — so the host can issue the next pass before it knows this one's token.
  static constexpr uint32_t kGreedySlots = 4;
  bool greedy_on_device() const;
  // Issues one pass of batch without waiting for it: one token a sequence, every row a logit row in
  // order (a decode step of one or several sequences). from_slot < 0: the batch's tokens from the
  // host; otherwise row i's token is row i's choice of the pass issued to from_slot (the same
  // sequences in the same order). The pass's choices go to to_slot, which must not be in flight.
  Status forward_greedy(const ForwardBatch& batch, sl_kv_cache* cache, int from_slot, uint32_t to_slot);
  // Waits for the choices of the pass issued to `slot` (one a row) and frees the slot.
  Result<std::vector<int32_t>> greedy_choices(uint32_t slot);
  // The one choice of a one-row pass.
  Result<int32_t> greedy_choice(uint32_t slot);

  const ModelConfig& config() const { return config_; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Bytes that stay resident: every weight but the routed experts'.
  uint64_t dense_weight_bytes() const { return weight_bytes_ - (experts_ ? experts_->total_bytes() : 0); }
  // The weight bytes one decode step of one sequence reads: every weight but the lookup tables
  // (an untied embedding, Gemma's per-layer embeddings: a row each, counted as none), and of the routed
  // experts the share a token picks (top-k of n). What a decode figure's bandwidth is reckoned from.
  uint64_t decode_bytes_per_token() const { return decode_bytes_per_token_; }
  // Where the layers run: one StageSpec per backend, in layer order.
  std::vector<StageSpec> stages() const;

  // Mixture-of-Experts models: where the experts lie, and the store that serves them (required
  // before the first forward pass of such a model; the caller keeps it alive).
  const std::optional<ExpertLayout>& expert_layout() const { return experts_; }
  // A store whose memory stays put (ExpertStoreHandle::lends_stable_memory) has every expert of the
  // separate form bound to each stage's backend here, once: a device then holds its own copy of the
  // experts instead of receiving the routed ones every pass (where they do not all fit, that stage
  // keeps receiving them, with a warning).
  // Bound experts are also chosen on the device where the backend runs ABI 2.5's MOE_ROUTE,
  // MATMUL_ID and MOE_COMBINE and the routing is softmax top-k (either order): a step of at most
  // kDeviceRoutedTokens tokens then runs its MoE layers without the host reading the router.
  Status attach_expert_store(ExpertStoreHandle* store);
  // Up to this many tokens a pass, bound experts are chosen on the device: each token's k products
  // read their experts' rows (decode, a few sequences' steps). A longer pass (prefill) routes on the
  // host, where one product an expert reads its matrix once for all the tokens sent to it.
  static constexpr uint32_t kDeviceRoutedTokens = 16;
  // Whether MoE layer moe_layer's experts are chosen on the device (attach_expert_store decided).
  bool routes_on_device(uint32_t moe_layer) const;
  // Tests compare both routes: false sends every pass through the host's routing.
  void set_device_routing(bool allowed) { device_routing_allowed_ = allowed; }
  // Whether MXFP4 experts reach the backend(s) in that form (every stage's backend multiplies it,
  // ABI 2.3) rather than decoded to bf16 on the host (expert_arrange.h).
  bool experts_in_mxfp4() const;

 private:
  using Layer = LayerWeights;

  // Activation buffers on one backend, grown to the largest batch seen.
  struct Activations {
    uint32_t capacity_tokens = 0, capacity_logit_rows = 0;
    Buffer x, h, q, k, v, attn, o, gate, up, act, last, last_norm, logits;
    Buffer router_logits, next_router_logits, expert_in, expert_out, zeros;  // Mixture of Experts
    Buffer per_layer_all, per_layer_tokens, per_layer, per_layer_gate;       // Gemma 4's per-layer inputs
    Buffer dense_out, router_in;                                              // Gemma 4's MoE block beside the MLP
    Buffer shared_gate_logits;                                                 // a shared expert's gate, [n, 1]
    // Experts chosen on the device (route_on_device): each token's k ids and weights, the k products'
    // rows ([n · k, F] and [n · k, H]), and a shared expert's sigmoid gate made from its logit and ones.
    Buffer route_ids, route_weights, slot_gate, slot_up, slot_out, ones, shared_gate_weights;
    uint32_t capacity_routed = 0;  // tokens the routing buffers hold
    Buffer q_gate, attn_gate;                                                  // gated attention (Qwen3.5)
    Buffer lin_qkv, lin_conv, lin_z, lin_a, lin_b, lin_core;                   // Gated DeltaNet layers
    Buffer mla_q_latent, mla_q, mla_kv_latent, mla_kv_normed, mla_kv;          // MLA's latents and per-head products
    Buffer mla_q_nope, mla_q_pe, mla_q_lat, mla_query, mla_k_pe, mla_k, mla_o_lat;  // MLA's latent form (blocks.h)
  };

  // A buffer over a page-aligned byte range of one model file, holding the tensors a stage binds.
  struct WeightSpan {
    uint32_t file = 0;
    uint64_t begin = 0, end = 0;
    Buffer buffer;
    bool copied = false;  // one tensor that lies off its values' alignment in the file, copied to aligned memory
  };

  // One MoE layer's experts bound to a stage's backend once (attach_expert_store). Where the store
  // lends each part of every expert as one run of memory (MLX's stacked tensors), a buffer a part holds
  // all E experts, expert e at e · stride; elsewhere, on a device that copies anyway, the same stacks
  // are assembled by upload; on a backend that reads host memory in place, a buffer an expert a part.
  struct BoundExperts {
    std::vector<Buffer> stacks;                    // [n_parts], when stacked
    std::vector<uint64_t> strides;                 // bytes an expert, per part
    std::vector<std::vector<Buffer>> per_expert;   // [E][n_parts], when not
    // The stacks as MATMUL_ID's weights (gate, up, down: [E · rows, cols]) where each part's stride is
    // exactly its expert's matrix, and the experts' routing factors (Gemma 4's per_expert_scale) as an
    // F32 [1, E] weight; set when the backend chooses experts on the device (route_on_device).
    bool device_routing = false;
    sl_weight stacked[3]{};
    Buffer factors_buffer;
    sl_weight factors{};
    bool stacked_form() const { return !stacks.empty(); }
  };

  struct Stage {
    const BackendHandle* backend = nullptr;
    uint32_t first = 0, end = 0;  // layers [first, end)
    bool embeds = false, has_head = false;
    // Binding runs twice: first recording the tensors the stage needs (to wrap only their bytes),
    // then for real against the spans.
    bool recording = false;
    std::vector<const TensorInfo*> used;
    std::vector<WeightSpan> spans;
    // The first MoE layer after this stage's, when it lies on a later stage: its router, bound
    // here too, predicts that layer's experts for the store's prefetch.
    sl_weight next_router{};
    sl_weight next_router_bias{};  // where routers have biases (MoeConfig::router_bias)
    bool has_next_router = false;
    std::vector<Buffer> sinks;     // the layers' attention sinks as float32 (LayerWeights::sinks)
    // The experts are MXFP4 and this stage's backend multiplies them so (ABI 2.3): they reach it as
    // MXFP4 weights, not decoded to bf16 (expert_arrange.h).
    bool mxfp4_experts = false;
    // The experts of this stage's MoE layers bound for good (attach_expert_store), by moe_layer.
    std::unordered_map<uint32_t, BoundExperts> bound_experts;
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

  // A pass's graph on one stage, and what its nodes read that must stay put until it has run.
  struct PassGraph {
    StepGraph graph;
    blocks::Activations act;
    sl_batch batch{};
    sl_kv_cache* cache = nullptr;
    std::vector<Buffer> keep;                 // expert weights wrapped for this pass
    std::deque<std::vector<int32_t>> rows;    // host index arrays (MoE rows)
    std::deque<std::vector<float>> weights;   // host weights (MoE routing)
    std::deque<ArrangedExpert> arranged;      // fused experts rearranged for MATMUL (expert_arrange.h)
    bool past_original_context = false;       // a position of the step lies past longrope's trained context
    std::vector<int32_t> per_layer_rows;      // [L][n]: each layer's rows of the per-layer inputs
  };
  // Registers the stage's activation buffers in the graph for n tokens.
  void declare_activations(Stage& stage, PassGraph& pass, uint32_t n) const;
  // Runs what the graph holds on the stage's backend and starts a new graph (same activations).
  Status flush(Stage& stage, PassGraph& pass, uint32_t n);
  // One layer's nodes (the family's builder); a MoE layer's experts run between two graphs.
  Status build_layer(Stage& stage, PassGraph& pass, const Layer& layer, uint32_t stage_layer, uint32_t n);
  // h → o: routed on the host from the router's logits, the experts' gated MLPs as nodes.
  Status build_moe(Stage& stage, PassGraph& pass, const Layer& layer, uint32_t n, StepGraph::Id router_input);
  // Every token of h through the layer's shared experts' gated MLP, into out.
  void shared_experts_mlp(Stage& stage, PassGraph& pass, const Layer& layer, uint32_t n, uint32_t activation,
                          StepGraph::Id out) const;
  // o's starting value: the shared experts' MLP (DeepSeek) or zeros.
  void start_moe_output(Stage& stage, PassGraph& pass, const Layer& layer, uint32_t n, bool shared_gated) const;
  // h → o with the experts chosen on the device (BoundExperts::device_routing): no host round trip.
  Status build_moe_on_device(Stage& stage, PassGraph& pass, const Layer& layer, const BoundExperts& bound, uint32_t n,
                             StepGraph::Id router_input);
  // Binds MoE layer m's experts (parts: the store's pointers, expert-major) to the stage's backend.
  Status bind_experts(Stage& stage, uint32_t m, const std::vector<const void*>& parts, BoundExperts& out) const;
  // Per token, its (expert, weight) pairs; expert_scale (Gemma 4) multiplies each chosen expert's weight;
  // choice_bias (DeepSeek-V3's e_score_correction_bias) shifts the scores the experts are chosen by.
  std::vector<std::vector<std::pair<uint32_t, float>>> route(const std::vector<float>& logits, uint32_t n,
                                                             const std::vector<float>& expert_scale = {},
                                                             const std::vector<float>& choice_bias = {}) const;
  // Every stage's layers; the last stage's graph is left open for the head (returned in `last`).
  Status run_layers(const ForwardBatch& batch, std::span<sl_kv_cache* const> caches, int from_slot, PassGraph& last);
  // The final norm and the LM head over the rows that need logits, into the stage's a.logits.
  void build_head(Stage& stage, PassGraph& pass, const ForwardBatch& batch, uint32_t n);

  ModelConfig config_;
  bool device_routing_allowed_ = true;
  const families::Family* family_ = nullptr;  // writes each layer's nodes
  std::vector<Stage> stages_;
  sl_weight embed_{}, final_norm_{}, lm_head_{};
  std::vector<Layer> layers_;
  // Rotary tables: each layer's type's parameters (Gemma 3's sliding layers have their own), and
  // longrope's long factors, used by a step that reaches past the trained context (Phi-3).
  struct RopeTable {
    std::vector<float> inv_freq;
    float factor = 1.0f;
  };
  // Each layer's table (its type's parameters at its head width), and longrope's long one.
  std::vector<RopeTable> layer_rope_, layer_long_rope_;
  ModelWeights model_weights_;       // the family's tensors around the layers (first stage)
  std::vector<Buffer> constants_;    // small weights the families made (WeightSource::constant)
  uint64_t weight_bytes_ = 0, decode_bytes_per_token_ = 0;
  std::vector<float> hidden_;  // the hidden state on its way between stages
  std::vector<float> per_layer_host_;  // and Gemma 4's per-layer inputs

  // Greedy choices on the device (forward_greedy): a slot's id, its copy on the host and the
  // download's ticket (0: none in flight).
  // A slot holds greedy_capacity_ rows' ids; a pass of more rows grows the buffer when no slot is in
  // flight.
  Buffer greedy_ids_;
  uint32_t greedy_capacity_ = 0;
  std::array<std::vector<int32_t>, kGreedySlots> greedy_host_{};
  std::array<uint64_t, kGreedySlots> greedy_ticket_{};

  // Mixture of Experts.
  std::optional<ExpertLayout> experts_;
  ExpertStoreHandle* store_ = nullptr;
};

}  // namespace sluice
