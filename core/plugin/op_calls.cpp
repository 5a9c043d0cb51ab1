#include "plugin/op_calls.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "graph/step_graph.h"

namespace sluice {

sl_status OpCalls::begin_batch(const sl_batch* b, sl_error* err) {
  if (!b || b->n_tokens == 0) {
    std::snprintf(err->message, sizeof(err->message), "begin_batch: empty batch");
    return SL_ERR_INVALID_ARGUMENT;
  }
  positions_.assign(b->positions, b->positions + b->n_tokens);
  slots_.assign(b->seq_slots, b->seq_slots + b->n_tokens);
  const std::size_t table = std::size_t(b->n_seqs) * b->max_pages;
  pages_.assign(b->page_table, b->page_table + table);
  if (b->recent_table)
    recent_.assign(b->recent_table, b->recent_table + table);
  else
    recent_.clear();
  const bool has_window = b->struct_size >= offsetof(sl_batch, window_table) + sizeof(void*) && b->window_table;
  const bool has_states = b->struct_size >= offsetof(sl_batch, state_slots) + sizeof(void*) && b->state_slots;
  if (has_window)
    window_.assign(b->window_table, b->window_table + table);
  else
    window_.clear();
  if (has_states)
    states_.assign(b->state_slots, b->state_slots + b->n_seqs);
  else
    states_.clear();
  batch_ = sl_batch{};
  std::memcpy(&batch_, b, std::min<std::size_t>(b->struct_size, sizeof(batch_)));
  batch_.struct_size = sizeof(batch_);
  batch_.positions = positions_.data();
  batch_.seq_slots = slots_.data();
  batch_.page_table = pages_.data();
  batch_.recent_table = b->recent_table ? recent_.data() : nullptr;
  batch_.window_table = has_window ? window_.data() : nullptr;
  batch_.state_slots = has_states ? states_.data() : nullptr;
  has_batch_ = true;
  return SL_OK;
}

sl_step OpCalls::step(sl_kv_cache* cache) {
  if (!has_batch_) {  // ops that read no batch still run as a step: one token at position 0
    positions_.assign(1, 0);
    slots_.assign(1, 0);
    pages_.clear();
    batch_ = {};
    batch_.struct_size = sizeof(batch_);
    batch_.n_tokens = 1;
    batch_.positions = positions_.data();
    batch_.seq_slots = slots_.data();
    batch_.n_seqs = 1;
  }
  sl_step s{};
  s.struct_size = sizeof(s);
  s.batch = &batch_;
  s.cache = cache;
  return s;
}

OpCalls::~OpCalls() = default;

void OpCalls::record() {
  recording_ = std::make_unique<StepGraph>();
  recording_cache_ = nullptr;
}

sl_status OpCalls::run_recorded(sl_error* err) {
  if (!recording_) return SL_OK;
  std::unique_ptr<StepGraph> g = std::move(recording_);
  const sl_step s = step(recording_cache_);
  return api_->graph_compute(be_, &g->view(), &s, err);
}

// The graph of a call: its own, run at the end, or the one being recorded.
class OpCalls::GraphRun {
 public:
  explicit GraphRun(OpCalls& calls) : calls_(calls), g(calls.recording_ ? *calls.recording_ : own_) {}
  sl_status run(sl_error* err, sl_kv_cache* cache = nullptr) {
    if (calls_.recording_) {
      if (cache) calls_.recording_cache_ = cache;
      return SL_OK;
    }
    const sl_step s = calls_.step(cache);
    return calls_.api_->graph_compute(calls_.be_, &g.view(), &s, err);
  }

 private:
  OpCalls& calls_;
  StepGraph own_;

 public:
  StepGraph& g;
};

namespace {
using Id = StepGraph::Id;
Id values(StepGraph& g, const sl_buffer* b, uint32_t rows, uint64_t cols, uint64_t offset_floats = 0) {
  return g.buffer(const_cast<sl_buffer*>(b), rows, static_cast<uint32_t>(cols), SL_DTYPE_F32, offset_floats * 4);
}
Id maybe_weight(StepGraph& g, const sl_weight* w) { return w ? g.weight(*w) : StepGraph::kNone; }
}  // namespace

sl_status OpCalls::embed(const sl_weight* table, const int32_t* ids, uint32_t n, sl_buffer* out, sl_error* err) {
  GraphRun r(*this);
  r.g.embed(r.g.weight(*table), r.g.host(ids, 1, n, SL_DTYPE_I32), values(r.g, out, n, table->cols));
  return r.run(err);
}

sl_status OpCalls::embed_device(const sl_weight* table, const sl_buffer* ids, uint64_t ids_offset, uint32_t n, sl_buffer* out,
                                sl_error* err) {
  GraphRun r(*this);
  r.g.embed(r.g.weight(*table), r.g.buffer(const_cast<sl_buffer*>(ids), 1, n, SL_DTYPE_I32, ids_offset * 4),
            values(r.g, out, n, table->cols));
  return r.run(err);
}

sl_status OpCalls::rms_norm(const sl_buffer* x, const sl_weight* weight, float weight_offset, sl_buffer* out, uint32_t n_rows,
                            uint32_t dim, float eps, sl_error* err) {
  GraphRun r(*this);
  r.g.rms_norm(values(r.g, x, n_rows, dim), r.g.weight(*weight), eps, weight_offset, values(r.g, out, n_rows, dim), "rms_norm");
  return r.run(err);
}

sl_status OpCalls::add_rms_norm(sl_buffer* x, const sl_buffer* delta, const sl_weight* weight, float weight_offset, sl_buffer* out,
                                uint32_t n_rows, uint32_t dim, float eps, sl_error* err) {
  GraphRun r(*this);
  const Id xs = values(r.g, x, n_rows, dim);
  r.g.add(xs, values(r.g, delta, n_rows, dim), xs, "residual");
  r.g.rms_norm(xs, r.g.weight(*weight), eps, weight_offset, values(r.g, out, n_rows, dim), "rms_norm");
  return r.run(err);
}

sl_status OpCalls::matmul(const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const sl_weight* bias, sl_buffer* out,
                          sl_error* err) {
  GraphRun r(*this);
  r.g.matmul(values(r.g, x, n_rows, w->cols), r.g.weight(*w), maybe_weight(r.g, bias), values(r.g, out, n_rows, w->rows), "matmul");
  return r.run(err);
}

sl_status OpCalls::matmul_multi(const sl_buffer* x, uint32_t n_rows, uint32_t count, const sl_weight* const* ws,
                                const sl_weight* const* biases, sl_buffer* const* outs, sl_error* err) {
  GraphRun r(*this);
  if (count == 0) return SL_OK;
  const Id xs = values(r.g, x, n_rows, ws[0]->cols);
  for (uint32_t i = 0; i < count; ++i)
    r.g.matmul(xs, r.g.weight(*ws[i]), maybe_weight(r.g, biases ? biases[i] : nullptr), values(r.g, outs[i], n_rows, ws[i]->rows),
               "matmul " + std::to_string(i));
  return r.run(err);
}

sl_status OpCalls::rope(sl_buffer* x, uint32_t n_heads, uint32_t head_dim, uint32_t rotary_dim, const float* inv_freq,
                        float attention_factor, uint32_t style, sl_error* err) {
  GraphRun r(*this);
  const uint32_t n = has_batch_ ? batch_.n_tokens : 1;
  sl_rope_params p{};
  p.n_heads = n_heads;
  p.head_dim = head_dim;
  p.rotary_dim = rotary_dim;
  p.style = style;
  p.attention_factor = attention_factor;
  p.inv_freq = inv_freq;
  r.g.rope(values(r.g, x, n, uint64_t(n_heads) * head_dim), p, "rope");
  return r.run(err);
}

sl_status OpCalls::kv_write(sl_kv_cache* cache, uint32_t layer, const sl_buffer* k, const sl_buffer* v, sl_error* err) {
  if (!has_layout_) {
    std::snprintf(err->message, sizeof(err->message), "kv_write: the cache's layout was not given (set_kv_layout)");
    return SL_ERR_INVALID_ARGUMENT;
  }
  GraphRun r(*this);
  const uint32_t n = has_batch_ ? batch_.n_tokens : 1;
  uint64_t k_width = uint64_t(kv_layout_.n_kv_heads) * kv_layout_.head_dim, v_width = k_width;
  if (kv_layout_.layers && layer < kv_layout_.n_layers) {  // the layer's own widths
    const sl_kv_layer& l = kv_layout_.layers[layer];
    k_width = uint64_t(l.n_kv_heads) * l.k_head_dim;
    v_width = uint64_t(l.n_kv_heads) * l.v_head_dim;
  }
  r.g.kv_write(values(r.g, k, n, k_width), values(r.g, v, n, v_width), layer, "kv_write");
  return r.run(err, cache);
}

sl_status OpCalls::attention(sl_kv_cache* cache, uint32_t layer, const sl_buffer* q, const sl_attention_params* params,
                             const sl_buffer* sinks, sl_buffer* out, sl_error* err) {
  GraphRun r(*this);
  const uint32_t n = has_batch_ ? batch_.n_tokens : 1;
  sl_attention_params p{};
  std::memcpy(&p, params, std::min<std::size_t>(params->struct_size ? params->struct_size : sizeof(p), sizeof(p)));
  p.layer = layer;
  const uint64_t width = uint64_t(p.n_heads) * p.head_dim, out_width = uint64_t(p.n_heads) * (p.v_head_dim ? p.v_head_dim : p.head_dim);
  r.g.attention(values(r.g, q, n, width), sinks ? values(r.g, sinks, 1, p.n_heads) : StepGraph::kNone, p, values(r.g, out, n, out_width),
                "attention");
  return r.run(err, cache);
}

sl_status OpCalls::state_read(sl_kv_cache* cache, uint32_t layer, uint64_t offset, uint32_t n, sl_buffer* out, sl_error* err) {
  GraphRun r(*this);
  const uint32_t seqs = has_batch_ ? batch_.n_seqs : 1;
  r.g.copy(r.g.state(layer, seqs, n, offset * 4), values(r.g, out, seqs, n), "state read");
  return r.run(err, cache);
}

sl_status OpCalls::state_write(sl_kv_cache* cache, uint32_t layer, uint64_t offset, uint32_t n, const sl_buffer* in, sl_error* err) {
  GraphRun r(*this);
  const uint32_t seqs = has_batch_ ? batch_.n_seqs : 1;
  r.g.copy(values(r.g, in, seqs, n), r.g.state(layer, seqs, n, offset * 4), "state write");
  return r.run(err, cache);
}

sl_status OpCalls::gated_activation(uint32_t activation, const sl_buffer* gate, const sl_buffer* up, sl_buffer* out, uint64_t n,
                                    sl_error* err) {
  sl_glu_params p{};
  p.activation = activation;
  return gated_activation(p, gate, up, out, n, err);
}

sl_status OpCalls::gated_activation(const sl_glu_params& p, const sl_buffer* gate, const sl_buffer* up, sl_buffer* out, uint64_t n,
                                    sl_error* err) {
  GraphRun r(*this);
  r.g.glu(values(r.g, gate, 1, n), values(r.g, up, 1, n), p, values(r.g, out, 1, n), "glu");
  return r.run(err);
}

sl_status OpCalls::add(const sl_buffer* a, const sl_buffer* b, sl_buffer* out, uint64_t n, sl_error* err) {
  GraphRun r(*this);
  r.g.add(values(r.g, a, 1, n), values(r.g, b, 1, n), values(r.g, out, 1, n), "add");
  return r.run(err);
}

sl_status OpCalls::scale(const sl_buffer* x, sl_buffer* out, uint64_t n, float scale, float softcap, sl_error* err) {
  GraphRun r(*this);
  r.g.scale(values(r.g, x, 1, n), scale, softcap, values(r.g, out, 1, n), "scale");
  return r.run(err);
}

sl_status OpCalls::causal_conv(sl_kv_cache* cache, uint32_t layer, const sl_buffer* x, const sl_weight* w, uint32_t activation,
                               sl_buffer* out, sl_error* err) {
  GraphRun r(*this);
  const uint32_t tokens = has_batch_ ? batch_.n_tokens : 1, seqs = has_batch_ ? batch_.n_seqs : 1;
  const uint32_t window = w->cols > 0 ? (w->cols - 1) * w->rows : 0;
  r.g.causal_conv(values(r.g, x, tokens, w->rows), r.g.weight(*w), activation, values(r.g, out, tokens, w->rows),
                  r.g.state(layer, seqs, window), "causal_conv");
  return r.run(err, cache);
}

sl_status OpCalls::gated_delta(sl_kv_cache* cache, uint32_t layer, uint64_t state_offset, const sl_buffer* qkv, const sl_buffer* a,
                               const sl_buffer* b, const sl_weight* a_log, const sl_gated_delta_params& p, sl_buffer* out, sl_error* err) {
  GraphRun r(*this);
  const uint32_t tokens = has_batch_ ? batch_.n_tokens : 1, seqs = has_batch_ ? batch_.n_seqs : 1;
  const uint64_t width = 2ull * p.n_k_heads * p.k_head_dim + uint64_t(p.n_v_heads) * p.v_head_dim;
  r.g.gated_delta(values(r.g, qkv, tokens, width), values(r.g, a, tokens, p.n_v_heads), values(r.g, b, tokens, p.n_v_heads), r.g.weight(*a_log),
                  p, values(r.g, out, tokens, uint64_t(p.n_v_heads) * p.v_head_dim),
                  r.g.state(layer, seqs, p.n_v_heads * p.k_head_dim * p.v_head_dim, state_offset * 4), "gated_delta");
  return r.run(err, cache);
}

sl_status OpCalls::copy(const sl_buffer* src, uint64_t src_offset, sl_buffer* dst, uint64_t dst_offset, uint64_t n, sl_error* err) {
  // A tensor holds at most 2^32 - 1 values per row at a byte offset: larger asks cannot be a graph.
  if (n > UINT32_MAX || src_offset > UINT64_MAX / 4 || dst_offset > UINT64_MAX / 4) {
    std::snprintf(err->message, sizeof(err->message), "copy: %llu values at float offsets %llu, %llu do not fit a tensor",
                  static_cast<unsigned long long>(n), static_cast<unsigned long long>(src_offset), static_cast<unsigned long long>(dst_offset));
    return SL_ERR_INVALID_ARGUMENT;
  }
  GraphRun r(*this);
  r.g.copy(values(r.g, src, 1, n, src_offset), values(r.g, dst, 1, n, dst_offset), "copy");
  return r.run(err);
}

sl_status OpCalls::copy_columns(const sl_buffer* x, uint32_t x_cols, sl_buffer* out, uint32_t out_rows, uint32_t out_cols,
                                const sl_copy_columns_params& p, sl_error* err) {
  GraphRun r(*this);
  const uint32_t x_rows = p.repeat ? out_rows / p.repeat : out_rows;
  r.g.copy_columns(values(r.g, x, x_rows, x_cols), p.src_col, p.dst_col, p.width, p.repeat, values(r.g, out, out_rows, out_cols), "copy_columns");
  return r.run(err);
}

sl_status OpCalls::head_matmul(const sl_buffer* x, uint32_t n_tokens, const sl_weight* w, const sl_head_matmul_params& p, sl_buffer* out,
                               sl_error* err) {
  GraphRun r(*this);
  const uint32_t in_w = p.transpose ? p.slice_rows : w->cols, out_w = p.transpose ? w->cols : p.slice_rows;
  r.g.head_matmul(values(r.g, x, n_tokens, p.n_heads * in_w), r.g.weight(*w), p, values(r.g, out, n_tokens, p.n_heads * out_w),
                  "head_matmul");
  return r.run(err);
}

sl_status OpCalls::moe_route(const sl_buffer* logits, uint32_t n, uint32_t E, const sl_weight* factors, const sl_moe_route_params& p,
                             sl_buffer* ids, sl_buffer* weights, sl_error* err) {
  GraphRun r(*this);
  r.g.moe_route(values(r.g, logits, n, E), maybe_weight(r.g, factors), p, r.g.buffer(ids, n, p.k, SL_DTYPE_I32), values(r.g, weights, n, p.k),
                "moe_route");
  return r.run(err);
}

sl_status OpCalls::matmul_id(const sl_buffer* x, uint32_t x_rows, const sl_weight* w, uint32_t n_experts, const sl_buffer* ids, uint32_t n,
                             uint32_t k, sl_buffer* out, sl_error* err) {
  GraphRun r(*this);
  r.g.matmul_id(values(r.g, x, x_rows, w->cols), r.g.weight(*w), r.g.buffer(const_cast<sl_buffer*>(ids), n, k, SL_DTYPE_I32), n_experts,
                values(r.g, out, n * k, n_experts ? w->rows / n_experts : 0), "matmul_id");
  return r.run(err);
}

sl_status OpCalls::moe_combine(const sl_buffer* x, const sl_buffer* weights, uint32_t n, uint32_t k, uint32_t dim, sl_buffer* out,
                               sl_error* err) {
  GraphRun r(*this);
  r.g.moe_combine(values(r.g, x, n * k, dim), values(r.g, weights, n, k), values(r.g, out, n, dim), "moe_combine");
  return r.run(err);
}

sl_status OpCalls::gather_rows(const sl_buffer* src, const int32_t* rows, uint32_t n, uint32_t dim, sl_buffer* dst, sl_error* err) {
  GraphRun r(*this);
  // The host does not know the source's rows: enough for the rows asked (the backend checks its buffer).
  uint32_t src_rows = 1;
  for (uint32_t i = 0; i < n; ++i) src_rows = std::max<uint32_t>(src_rows, rows[i] >= 0 ? uint32_t(rows[i]) + 1 : 1);
  r.g.get_rows(values(r.g, src, src_rows, dim), r.g.host(rows, 1, n, SL_DTYPE_I32), values(r.g, dst, n, dim), "gather_rows");
  return r.run(err);
}

sl_status OpCalls::scatter_add_rows(const sl_buffer* src, const int32_t* rows, const float* weights, uint32_t n, uint32_t dim,
                                    sl_buffer* dst, uint32_t dst_rows, sl_error* err) {
  GraphRun r(*this);
  r.g.scatter_add_rows(values(r.g, src, n, dim), r.g.host(rows, 1, n, SL_DTYPE_I32), r.g.host(weights, 1, n, SL_DTYPE_F32),
                       values(r.g, dst, dst_rows, dim), "scatter_add_rows");
  return r.run(err);
}

sl_status OpCalls::argmax(const sl_buffer* x, uint32_t n_rows, uint32_t dim, sl_buffer* ids, uint64_t ids_offset, sl_error* err) {
  GraphRun r(*this);
  r.g.argmax(values(r.g, x, n_rows, dim), r.g.buffer(ids, 1, n_rows, SL_DTYPE_I32, ids_offset * 4), "argmax");
  return r.run(err);
}

}  // namespace sluice
