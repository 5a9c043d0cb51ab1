#pragma once
// The host's side of a step graph (sluice/graph.h): tensors and nodes appended in order, parameter
// structs and names kept at stable addresses until the graph is cleared, and the sl_graph view a
// backend's graph_compute reads. The model's builders (core/model/families/) and the conformance
// checks write graphs through it.
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <string>
#include <variant>
#include <vector>

#include "sluice/graph.h"

namespace sluice {

class StepGraph {
 public:
  using Id = uint32_t;
  static constexpr Id kNone = SL_NO_TENSOR;

  // Tensors. A weight is referenced, not copied: it must outlive the graph.
  Id buffer(sl_buffer* b, uint32_t rows, uint32_t cols, sl_dtype dtype = SL_DTYPE_F32, uint64_t offset_bytes = 0);
  Id weight(const sl_weight& w);
  Id host(const void* data, uint32_t rows, uint32_t cols, sl_dtype dtype);
  // The step's sequences' states in recurrent layer `layer` of the step's cache: [n_seqs, cols]
  // float32 values from byte `offset_bytes` of each sequence's state (SL_TENSOR_STATE).
  Id state(uint32_t layer, uint32_t n_seqs, uint32_t cols, uint64_t offset_bytes = 0);
  // Host I32 values the graph keeps until it is cleared (GET_ROWS indices made while building).
  Id host_ints(std::vector<int32_t> values);

  // Nodes (sluice/graph.h says what each op computes). Names are for messages and profiles.
  void embed(Id table, Id ids, Id out, std::string name = "embed");
  void rms_norm(Id x, Id weight, float eps, float weight_offset, Id out, std::string name);
  void matmul(Id x, Id weight, Id bias, Id out, std::string name);
  void rope(Id x, const sl_rope_params& p, std::string name);
  void kv_write(Id k, Id v, uint32_t layer, std::string name);
  void attention(Id q, Id sinks, const sl_attention_params& p, Id out, std::string name);
  void glu(Id gate, Id up, uint32_t activation, Id out, std::string name);
  // With the activation's parameters (SL_ACT_SWIGLU_CLAMPED's alpha and limit).
  void glu(Id gate, Id up, const sl_glu_params& p, Id out, std::string name);
  void add(Id a, Id b, Id out, std::string name);
  void copy(Id x, Id out, std::string name);
  void get_rows(Id x, Id rows, Id out, std::string name);
  void scatter_add_rows(Id x, Id rows, Id weights, Id out, std::string name);
  void argmax(Id x, Id out, std::string name);
  // The same memory as BUFFER tensor t, seen as [rows, cols] (a layer of its own width in a shared buffer,
  // per-head rows of a projection).
  Id reshape(Id t, uint32_t rows, uint32_t cols);
  // out = x * scale, or tanh(x * scale / softcap) * softcap with softcap > 0.
  void scale(Id x, float scale, float softcap, Id out, std::string name);
  // 2.2: the causal depthwise convolution of x by w ([C, K]) with its window in `window` (a STATE).
  void causal_conv(Id x, Id w, uint32_t activation, Id out, Id window, std::string name);
  // 2.2: the gated delta rule over qkv with gates a (dt_bias added) and b, A_log; its states in `state`.
  void gated_delta(Id qkv, Id a, Id b, Id a_log, const sl_gated_delta_params& p, Id out, Id state, std::string name);
  // out[r, dst_col + c] = x[r / repeat, src_col + c] for c < width; out's other columns kept.
  void copy_columns(Id x, uint32_t src_col, uint32_t dst_col, uint32_t width, uint32_t repeat, Id out, std::string name);
  // Per head h, x's head h times rows h·head_rows + row_offset … + slice_rows of w (transposed as in
  // matmul, or not: sl_head_matmul_params).
  void head_matmul(Id x, Id w, const sl_head_matmul_params& p, Id out, std::string name);
  // 2.5: each row's top k experts and their weights from the router's logits (factors: per-expert
  // weights' multipliers, or kNone), written to ids and weights on the device.
  void moe_route(Id logits, Id factors, const sl_moe_route_params& p, Id ids, Id weights, std::string name);
  // 2.5: each row times its experts' matrices in the stacked weight w (n_experts of them), by ids.
  void matmul_id(Id x, Id w, Id ids, uint32_t n_experts, Id out, std::string name);
  // 2.5: out[i] += sum_j weights[i, j] * x[i * k + j].
  void moe_combine(Id x, Id weights, Id out, std::string name);

  const sl_tensor& tensor(Id id) const { return tensors_.at(id); }
  const std::vector<sl_node>& nodes() const { return nodes_; }
  bool empty() const { return nodes_.empty(); }
  // The graph as a backend reads it; valid until the next change.
  const sl_graph& view();
  void clear();

 private:
  using Params = std::variant<sl_norm_params, sl_rope_params, sl_kv_params, sl_attention_params, sl_glu_params, sl_scale_params,
                              sl_conv_params, sl_gated_delta_params, sl_copy_columns_params, sl_head_matmul_params, sl_moe_route_params,
                              sl_matmul_id_params>;
  void node(sl_op op, std::initializer_list<Id> in, std::initializer_list<Id> out, const void* params, std::string name);
  template <class P>
  const P* keep(const P& p) {
    return &std::get<P>(params_.emplace_back(p));
  }

  std::vector<sl_tensor> tensors_;
  std::vector<sl_node> nodes_;
  std::deque<Params> params_;     // stable addresses
  std::deque<std::string> names_;
  std::deque<sl_weight> weights_; // copies of the weights referenced (the caller's may move)
  std::deque<std::vector<int32_t>> ints_;  // host_ints' values
  sl_graph graph_{};
};

}  // namespace sluice
