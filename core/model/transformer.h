#pragma once
// The decoder-only transformer, written once for every supported architecture: the differences
// (biases, q/k norms, rotary variants, sliding windows, tied embeddings) come from ModelConfig and
// from which tensors the checkpoint has. Weights stay in the memory-mapped safetensors files; the
// backend sees them through buffers wrapping each file.
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
  std::vector<uint32_t> logit_rows;     // which tokens need logits (e.g. each sequence's last)
};

class Transformer {
 public:
  // Binds every tensor the architecture needs (clear error naming a missing or misshapen one).
  static Result<std::unique_ptr<Transformer>> create(const ModelConfig& config, const SafetensorsSet& tensors,
                                                     const BackendHandle& backend);

  // Runs the batch; writes logits for batch.logit_rows into `logits` ([rows][vocab]).
  Status forward(const ForwardBatch& batch, sl_kv_cache* cache, std::vector<float>& logits);

  const ModelConfig& config() const { return config_; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Bytes that stay resident: every weight but the routed experts'.
  uint64_t dense_weight_bytes() const { return weight_bytes_ - (experts_ ? experts_->total_bytes() : 0); }

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

  Transformer(const ModelConfig& config, const BackendHandle& backend) : config_(config), backend_(backend) {}
  Result<sl_weight> bind(const SafetensorsSet& tensors, const std::string& name, std::vector<int64_t> shape) const;
  Result<sl_weight> bind_quantized(const SafetensorsSet& tensors, const std::string& module, const TensorInfo& weight,
                                   const std::vector<int64_t>& shape) const;
  Status ensure_activations(uint32_t n_tokens, uint32_t n_logit_rows);
  Status run_layer(const Layer& layer, uint32_t index, uint32_t n, sl_kv_cache* cache);
  // h_ → o_: the routed experts' weighted sum for every token.
  Status run_moe(const Layer& layer, uint32_t n);
  Result<std::vector<std::vector<std::pair<uint32_t, float>>>> route(const sl_weight& router, uint32_t n);
  Status gather_rows(const Buffer& src, const std::vector<int32_t>& rows, uint32_t dim, const Buffer& dst);
  Status scatter_add_rows(const Buffer& src, const std::vector<int32_t>& rows, const std::vector<float>& weights, uint32_t dim,
                          const Buffer& dst);

  ModelConfig config_;
  const BackendHandle& backend_;
  std::vector<Buffer> file_buffers_;
  sl_weight embed_{}, final_norm_{}, lm_head_{};
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;
  float rope_factor_ = 1.0f;
  uint64_t weight_bytes_ = 0;

  // Activation buffers, grown to the largest batch seen.
  uint32_t capacity_tokens_ = 0, capacity_logit_rows_ = 0;
  Buffer x_, h_, q_, k_, v_, attn_, o_, gate_, up_, act_, last_, last_norm_, logits_;
  // Mixture of Experts.
  std::optional<ExpertLayout> experts_;
  ExpertStoreHandle* store_ = nullptr;
  Buffer router_logits_, expert_in_, expert_out_, zeros_;
};

}  // namespace sluice
