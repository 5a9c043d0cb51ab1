#include "graph/step_graph.h"

#include <stdexcept>

#include "graph/tensor_desc.h"

namespace sluice {

StepGraph::Id StepGraph::buffer(sl_buffer* b, uint32_t rows, uint32_t cols, sl_dtype dtype, uint64_t offset_bytes) {
  tensors_.push_back(buffer_tensor(rows, cols, dtype, b, offset_bytes));
  return static_cast<Id>(tensors_.size() - 1);
}

StepGraph::Id StepGraph::weight(const sl_weight& w) {
  tensors_.push_back(weight_tensor(weights_.emplace_back(w)));
  return static_cast<Id>(tensors_.size() - 1);
}

StepGraph::Id StepGraph::host(const void* data, uint32_t rows, uint32_t cols, sl_dtype dtype) {
  sl_tensor t = buffer_tensor(rows, cols, dtype);
  t.kind = SL_TENSOR_HOST;
  t.host = data;
  tensors_.push_back(t);
  return static_cast<Id>(tensors_.size() - 1);
}

StepGraph::Id StepGraph::state(uint32_t layer, uint32_t n_seqs, uint32_t cols, uint64_t offset_bytes) {
  sl_tensor t = buffer_tensor(n_seqs, cols, SL_DTYPE_F32, nullptr, offset_bytes);
  t.kind = SL_TENSOR_STATE;
  t.state_layer = layer;
  tensors_.push_back(t);
  return static_cast<Id>(tensors_.size() - 1);
}

StepGraph::Id StepGraph::host_ints(std::vector<int32_t> values) {
  const auto& kept = ints_.emplace_back(std::move(values));
  return host(kept.data(), 1, static_cast<uint32_t>(kept.size()), SL_DTYPE_I32);
}

void StepGraph::node(sl_op op, std::initializer_list<Id> in, std::initializer_list<Id> out, const void* params, std::string name) {
  if (in.size() > SL_NODE_MAX_INPUTS || out.size() > SL_NODE_MAX_OUTPUTS) throw std::logic_error("node with too many tensors");
  sl_node n{};
  n.struct_size = sizeof(n);
  n.op = op;
  std::fill(std::begin(n.inputs), std::end(n.inputs), kNone);
  std::fill(std::begin(n.outputs), std::end(n.outputs), kNone);
  std::size_t i = 0;
  for (Id id : in) n.inputs[i++] = id;
  i = 0;
  for (Id id : out) n.outputs[i++] = id;
  n.params = params;
  n.name = names_.emplace_back(std::move(name)).c_str();
  nodes_.push_back(n);
}

void StepGraph::embed(Id table, Id ids, Id out, std::string name) { node(SL_OP_EMBED, {table, ids}, {out}, nullptr, std::move(name)); }

void StepGraph::rms_norm(Id x, Id weight, float eps, float weight_offset, Id out, std::string name) {
  sl_norm_params p{};
  p.struct_size = sizeof(p);
  p.eps = eps;
  p.weight_offset = weight_offset;
  node(SL_OP_RMS_NORM, {x, weight}, {out}, keep(p), std::move(name));
}

void StepGraph::matmul(Id x, Id weight, Id bias, Id out, std::string name) {
  node(SL_OP_MATMUL, {x, weight, bias}, {out}, nullptr, std::move(name));
}

void StepGraph::rope(Id x, const sl_rope_params& p, std::string name) {
  sl_rope_params q = p;
  q.struct_size = sizeof(q);
  node(SL_OP_ROPE, {x}, {x}, keep(q), std::move(name));
}

void StepGraph::kv_write(Id k, Id v, uint32_t layer, std::string name) {
  sl_kv_params p{};
  p.struct_size = sizeof(p);
  p.layer = layer;
  node(SL_OP_KV_WRITE, {k, v}, {}, keep(p), std::move(name));
}

void StepGraph::attention(Id q, Id sinks, const sl_attention_params& p, Id out, std::string name) {
  sl_attention_params a = p;
  a.struct_size = sizeof(a);
  node(SL_OP_ATTENTION, {q, sinks}, {out}, keep(a), std::move(name));
}

void StepGraph::glu(Id gate, Id up, uint32_t activation, Id out, std::string name) {
  sl_glu_params p{};
  p.activation = activation;
  glu(gate, up, p, out, std::move(name));
}

void StepGraph::glu(Id gate, Id up, const sl_glu_params& p, Id out, std::string name) {
  sl_glu_params q = p;
  q.struct_size = sizeof(q);
  node(SL_OP_GLU, {gate, up}, {out}, keep(q), std::move(name));
}

void StepGraph::add(Id a, Id b, Id out, std::string name) { node(SL_OP_ADD, {a, b}, {out}, nullptr, std::move(name)); }
void StepGraph::copy(Id x, Id out, std::string name) { node(SL_OP_COPY, {x}, {out}, nullptr, std::move(name)); }
void StepGraph::get_rows(Id x, Id rows, Id out, std::string name) { node(SL_OP_GET_ROWS, {x, rows}, {out}, nullptr, std::move(name)); }
void StepGraph::scatter_add_rows(Id x, Id rows, Id weights, Id out, std::string name) {
  node(SL_OP_SCATTER_ADD_ROWS, {x, rows, weights}, {out}, nullptr, std::move(name));
}
void StepGraph::argmax(Id x, Id out, std::string name) { node(SL_OP_ARGMAX, {x}, {out}, nullptr, std::move(name)); }

StepGraph::Id StepGraph::reshape(Id t, uint32_t rows, uint32_t cols) {
  sl_tensor v = tensors_.at(t);
  v.rows = rows;
  v.cols = cols;
  tensors_.push_back(v);
  return static_cast<Id>(tensors_.size() - 1);
}

void StepGraph::scale(Id x, float scale, float softcap, Id out, std::string name) {
  sl_scale_params p{};
  p.struct_size = sizeof(p);
  p.scale = scale;
  p.softcap = softcap;
  node(SL_OP_SCALE, {x}, {out}, keep(p), std::move(name));
}

void StepGraph::causal_conv(Id x, Id w, uint32_t activation, Id out, Id window, std::string name) {
  sl_conv_params p{};
  p.struct_size = sizeof(p);
  p.activation = activation;
  node(SL_OP_CAUSAL_CONV, {x, w}, {out, window}, keep(p), std::move(name));
}

void StepGraph::gated_delta(Id qkv, Id a, Id b, Id a_log, const sl_gated_delta_params& p, Id out, Id state, std::string name) {
  sl_gated_delta_params q = p;
  q.struct_size = sizeof(q);
  node(SL_OP_GATED_DELTA, {qkv, a, b, a_log}, {out, state}, keep(q), std::move(name));
}

void StepGraph::copy_columns(Id x, uint32_t src_col, uint32_t dst_col, uint32_t width, uint32_t repeat, Id out, std::string name) {
  sl_copy_columns_params p{};
  p.struct_size = sizeof(p);
  p.src_col = src_col;
  p.dst_col = dst_col;
  p.width = width;
  p.repeat = repeat;
  node(SL_OP_COPY_COLUMNS, {x}, {out}, keep(p), std::move(name));
}

void StepGraph::head_matmul(Id x, Id w, const sl_head_matmul_params& p, Id out, std::string name) {
  sl_head_matmul_params kept = p;
  kept.struct_size = sizeof(kept);
  node(SL_OP_HEAD_MATMUL, {x, w}, {out}, keep(kept), std::move(name));
}

void StepGraph::moe_route(Id logits, Id factors, const sl_moe_route_params& p, Id ids, Id weights, std::string name) {
  sl_moe_route_params kept = p;
  kept.struct_size = sizeof(kept);
  node(SL_OP_MOE_ROUTE, {logits, factors}, {ids, weights}, keep(kept), std::move(name));
}

void StepGraph::matmul_id(Id x, Id w, Id ids, uint32_t n_experts, Id out, std::string name) {
  sl_matmul_id_params p{};
  p.struct_size = sizeof(p);
  p.n_experts = n_experts;
  node(SL_OP_MATMUL_ID, {x, w, ids}, {out}, keep(p), std::move(name));
}

void StepGraph::moe_combine(Id x, Id weights, Id out, std::string name) {
  node(SL_OP_MOE_COMBINE, {x, weights}, {out}, nullptr, std::move(name));
}

const sl_graph& StepGraph::view() {
  graph_ = {};
  graph_.struct_size = sizeof(graph_);
  graph_.n_tensors = static_cast<uint32_t>(tensors_.size());
  graph_.tensors = tensors_.data();
  graph_.n_nodes = static_cast<uint32_t>(nodes_.size());
  graph_.nodes = nodes_.data();
  return graph_;
}

void StepGraph::clear() {
  tensors_.clear();
  nodes_.clear();
  params_.clear();
  names_.clear();
  weights_.clear();
  ints_.clear();
  graph_ = {};
}

}  // namespace sluice
