#pragma once
// One op at a time on a backend, each as a graph of its node (or, for a fused form, of the nodes a
// backend joins): what the conformance checks and the op tests drive. The calls keep ABI 1's shapes
// (raw buffers, sizes as arguments) so a check reads as the op it checks; a batch set with
// begin_batch is the step of every later call (a one-token batch until then), and kv_write needs the
// cache's layout (set_kv_layout) for the width of K and V. Between record() and run_recorded() the
// calls only append their nodes, and run as one graph — what a backend's fusion pass sees in a step.
#include <cstdint>
#include <memory>
#include <vector>

#include "graph/step_graph.h"
#include "plugin/backend_handle.h"
#include "sluice/backend.h"

namespace sluice {

// A batch over the caller's tables (they outlive its use; OpCalls::begin_batch copies them): each
// token's position and sequence slot, the page table ([n_seqs][max_pages]) and, where given, the
// window table (WINDOW layers), the state slots (STATE layers) and the recent table (the recent
// window's pages) — how the checks and tests fill one.
inline sl_batch batch_view(const std::vector<int32_t>& positions, const std::vector<int32_t>& seq_slots, uint32_t n_seqs,
                           uint32_t max_pages, const std::vector<int32_t>& page_table, const std::vector<int32_t>* window_table = nullptr,
                           const std::vector<int32_t>* state_slots = nullptr, const std::vector<int32_t>* recent_table = nullptr) {
  sl_batch b{};
  b.struct_size = sizeof(b);
  b.n_tokens = static_cast<uint32_t>(positions.size());
  b.positions = positions.data();
  b.seq_slots = seq_slots.data();
  b.n_seqs = n_seqs;
  b.max_pages = max_pages;
  b.page_table = page_table.data();
  b.window_table = window_table ? window_table->data() : nullptr;
  b.state_slots = state_slots ? state_slots->data() : nullptr;
  b.recent_table = recent_table ? recent_table->data() : nullptr;
  return b;
}

class OpCalls {
 public:
  explicit OpCalls(const BackendHandle& backend) : api_(backend.api()), be_(backend.raw()) {}
  OpCalls(const sl_backend_api* api, sl_backend* be) : api_(api), be_(be) {}
  ~OpCalls();

  // Appends the calls that follow into one graph, run by run_recorded (every call until then
  // answers SL_OK: errors come from the run). Host arrays passed meanwhile must stay valid until it.
  void record();
  sl_status run_recorded(sl_error* err);

  sl_status begin_batch(const sl_batch* batch, sl_error* err);
  // The cache's layout, for the widths of K and V (a layout with `layers`: that array must outlive the calls).
  void set_kv_layout(const sl_kv_layout& layout) { kv_layout_ = layout; has_layout_ = true; }

  sl_status embed(const sl_weight* table, const int32_t* ids, uint32_t n, sl_buffer* out, sl_error* err);
  sl_status embed_device(const sl_weight* table, const sl_buffer* ids, uint64_t ids_offset, uint32_t n, sl_buffer* out, sl_error* err);
  sl_status rms_norm(const sl_buffer* x, const sl_weight* weight, float weight_offset, sl_buffer* out, uint32_t n_rows, uint32_t dim,
                     float eps, sl_error* err);
  // x += delta, then out = rms_norm(x): an ADD and an RMS_NORM (the residual step backends join).
  sl_status add_rms_norm(sl_buffer* x, const sl_buffer* delta, const sl_weight* weight, float weight_offset, sl_buffer* out,
                         uint32_t n_rows, uint32_t dim, float eps, sl_error* err);
  sl_status matmul(const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const sl_weight* bias, sl_buffer* out, sl_error* err);
  // count products of one input: count MATMUL nodes in a row (the form backends join).
  sl_status matmul_multi(const sl_buffer* x, uint32_t n_rows, uint32_t count, const sl_weight* const* ws,
                         const sl_weight* const* biases, sl_buffer* const* outs, sl_error* err);
  sl_status rope(sl_buffer* x, uint32_t n_heads, uint32_t head_dim, uint32_t rotary_dim, const float* inv_freq, float attention_factor,
                 uint32_t style, sl_error* err);
  sl_status kv_write(sl_kv_cache* cache, uint32_t layer, const sl_buffer* k, const sl_buffer* v, sl_error* err);
  sl_status attention(sl_kv_cache* cache, uint32_t layer, const sl_buffer* q, const sl_attention_params* params, const sl_buffer* sinks,
                      sl_buffer* out, sl_error* err);
  sl_status gated_activation(uint32_t activation, const sl_buffer* gate, const sl_buffer* up, sl_buffer* out, uint64_t n, sl_error* err);
  sl_status gated_activation(const sl_glu_params& p, const sl_buffer* gate, const sl_buffer* up, sl_buffer* out, uint64_t n, sl_error* err);
  sl_status add(const sl_buffer* a, const sl_buffer* b, sl_buffer* out, uint64_t n, sl_error* err);
  // 2.2, over the batch's tokens and the STATE layer `layer` of the cache: the causal convolution of
  // x [tokens, w.rows] (its window from float 0 of each state), and the gated delta rule (its
  // matrices from float state_offset).
  sl_status causal_conv(sl_kv_cache* cache, uint32_t layer, const sl_buffer* x, const sl_weight* w, uint32_t activation, sl_buffer* out,
                        sl_error* err);
  sl_status gated_delta(sl_kv_cache* cache, uint32_t layer, uint64_t state_offset, const sl_buffer* qkv, const sl_buffer* a,
                        const sl_buffer* b, const sl_weight* a_log, const sl_gated_delta_params& p, sl_buffer* out, sl_error* err);
  // out = x * scale, or tanh(x * scale / softcap) * softcap (a SCALE node, 2.1).
  sl_status scale(const sl_buffer* x, sl_buffer* out, uint64_t n, float scale, float softcap, sl_error* err);
  // Offsets and n in floats.
  sl_status copy(const sl_buffer* src, uint64_t src_offset, sl_buffer* dst, uint64_t dst_offset, uint64_t n, sl_error* err);
  // out[r, p.dst_col + c] = x[r / p.repeat, p.src_col + c] (a COPY_COLUMNS node, 2.2): x [out_rows / repeat, x_cols], out [out_rows, out_cols].
  sl_status copy_columns(const sl_buffer* x, uint32_t x_cols, sl_buffer* out, uint32_t out_rows, uint32_t out_cols,
                         const sl_copy_columns_params& p, sl_error* err);
  // 2.4: per head, x's head times its slice of w's rows (n_tokens rows of x).
  sl_status head_matmul(const sl_buffer* x, uint32_t n_tokens, const sl_weight* w, const sl_head_matmul_params& p, sl_buffer* out,
                        sl_error* err);
  // 2.5: each of n rows of E logits to its top p.k (id, weight) pairs (factors: a [1, E] F32 weight or null).
  sl_status moe_route(const sl_buffer* logits, uint32_t n, uint32_t E, const sl_weight* factors, const sl_moe_route_params& p, sl_buffer* ids,
                      sl_buffer* weights, sl_error* err);
  // 2.5: x (x_rows = n or n · k rows) times each slot's expert in the stacked w, by ids [n, k].
  sl_status matmul_id(const sl_buffer* x, uint32_t x_rows, const sl_weight* w, uint32_t n_experts, const sl_buffer* ids, uint32_t n, uint32_t k,
                      sl_buffer* out, sl_error* err);
  // 2.5: out[i] += sum_j weights[i, j] · x[i · k + j] (out [n, dim]).
  sl_status moe_combine(const sl_buffer* x, const sl_buffer* weights, uint32_t n, uint32_t k, uint32_t dim, sl_buffer* out, sl_error* err);
  sl_status gather_rows(const sl_buffer* src, const int32_t* rows, uint32_t n, uint32_t dim, sl_buffer* dst, sl_error* err);
  sl_status scatter_add_rows(const sl_buffer* src, const int32_t* rows, const float* weights, uint32_t n, uint32_t dim, sl_buffer* dst,
                             uint32_t dst_rows, sl_error* err);
  sl_status argmax(const sl_buffer* x, uint32_t n_rows, uint32_t dim, sl_buffer* ids, uint64_t ids_offset, sl_error* err);
  // A recurrent layer's state of each sequence of the batch: n floats from float `offset` of it,
  // copied into out ([n_seqs, n]) or from in (COPY nodes with a STATE tensor).
  sl_status state_read(sl_kv_cache* cache, uint32_t layer, uint64_t offset, uint32_t n, sl_buffer* out, sl_error* err);
  sl_status state_write(sl_kv_cache* cache, uint32_t layer, uint64_t offset, uint32_t n, const sl_buffer* in, sl_error* err);

 private:
  class GraphRun;
  sl_step step(sl_kv_cache* cache);

  const sl_backend_api* api_;
  sl_backend* be_;
  std::unique_ptr<StepGraph> recording_;
  sl_kv_cache* recording_cache_ = nullptr;
  std::vector<int32_t> positions_, slots_, pages_, recent_, window_, states_;
  sl_batch batch_{};
  bool has_batch_ = false;
  sl_kv_layout kv_layout_{};
  bool has_layout_ = false;
};

}  // namespace sluice
