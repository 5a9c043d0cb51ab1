#pragma once
// A step graph's own copy, for a backend's plan (sluice/backend.h: the caller may release its graph
// once plan_create returns). Header-only: backend plugins use it without linking the host's code.
// Copied: the tensors, the weights they refer to, the nodes, their parameter structs (struct_size
// bytes each) and names. Referenced, as the ABI says they stay valid while a plan lives: buffers,
// HOST tensors' memory (its contents may change between steps) and rope's inv_freq.
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "sluice/graph.h"

namespace sluice::graph {

class GraphCopy {
 public:
  // A parameter struct larger than this is taken for a corrupt one.
  static constexpr uint32_t kMaxParamsBytes = 4096;

  explicit GraphCopy(const sl_graph& g) {
    graph_ = g;
    if (g.n_tensors && !g.tensors) {
      fail("graph: tensors missing");
      return;
    }
    if (g.n_nodes && !g.nodes) {
      fail("graph: nodes missing");
      return;
    }
    tensors_.assign(g.tensors, g.tensors + g.n_tensors);
    for (sl_tensor& t : tensors_)
      if (t.weight) t.weight = &weights_.emplace_back(*t.weight);
    nodes_.assign(g.nodes, g.nodes + g.n_nodes);
    for (sl_node& n : nodes_) {
      if (n.params) {
        uint32_t size = 0;
        std::memcpy(&size, n.params, sizeof(size));
        if (size < sizeof(uint32_t) || size > kMaxParamsBytes) {
          fail("graph: a node's parameters have struct_size " + std::to_string(size));
          return;
        }
        std::vector<std::uint64_t>& p = params_.emplace_back((size + 7) / 8);  // 8-byte aligned, as the structs need
        std::memcpy(p.data(), n.params, size);
        n.params = p.data();
      }
      if (n.name) n.name = names_.emplace_back(n.name).c_str();
    }
    graph_.tensors = tensors_.data();
    graph_.nodes = nodes_.data();
  }
  GraphCopy(const GraphCopy&) = delete;
  GraphCopy& operator=(const GraphCopy&) = delete;

  const sl_graph& view() const { return graph_; }
  // Empty when the copy is whole, else why not (then view() must not be used).
  const std::string& error() const { return error_; }

 private:
  void fail(std::string why) {
    error_ = std::move(why);
    graph_.n_tensors = graph_.n_nodes = 0;
  }

  sl_graph graph_{};
  std::vector<sl_tensor> tensors_;
  std::deque<sl_weight> weights_;  // stable addresses for the tensors' pointers
  std::vector<sl_node> nodes_;
  std::deque<std::vector<std::uint64_t>> params_;
  std::deque<std::string> names_;
  std::string error_;
};

}  // namespace sluice::graph
