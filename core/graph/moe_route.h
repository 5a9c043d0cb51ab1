#pragma once
// One token's top-k expert routing (MOE_ROUTE, ABI 2.5), in float32 and in the order of operations
// transformers uses, so that the host's routing, the CPU backend's op and the goldens agree bit for
// bit. Header-only, for backend plugins and the host.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "sluice/graph.h"

namespace sluice::graph {

// A NaN ranks below every number, so that the order stays strict and weak whatever the logits hold.
inline float route_rank(float v) { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; }

// Scratch kept between rows (one allocation a call, not a row).
struct RouteScratch {
  std::vector<uint32_t> order;
  std::vector<float> p;
};

// The k experts of one row of E logits, best first (ties to the lower index, as torch.topk), and their
// weights: softmax over all E then the top k (renormalised by their sum with normalize), or the top k
// logits then softmax over those k. factors (nullable, E values) multiply each chosen weight.
inline void route_row(const float* row, uint32_t E, uint32_t k, uint32_t kind, bool normalize, const float* factors, RouteScratch& s,
                      uint32_t* ids, float* weights) {
  s.order.resize(E);
  s.p.resize(E);
  std::iota(s.order.begin(), s.order.end(), 0u);
  if (kind == SL_ROUTE_TOPK_SOFTMAX) {
    std::partial_sort(s.order.begin(), s.order.begin() + k, s.order.end(), [&](uint32_t a, uint32_t b) {
      return route_rank(row[a]) > route_rank(row[b]) || (route_rank(row[a]) == route_rank(row[b]) && a < b);
    });
    const float m = row[s.order[0]];
    float sum = 0.0f;
    for (uint32_t i = 0; i < k; ++i) sum += (s.p[i] = std::exp(row[s.order[i]] - m));
    for (uint32_t i = 0; i < k; ++i) {
      ids[i] = s.order[i];
      weights[i] = s.p[i] / sum * (factors ? factors[s.order[i]] : 1.0f);
    }
    return;
  }
  const float m = *std::max_element(row, row + E, [](float a, float b) { return route_rank(a) < route_rank(b); });
  float sum = 0.0f;
  for (uint32_t e = 0; e < E; ++e) sum += (s.p[e] = std::exp(row[e] - m));
  for (uint32_t e = 0; e < E; ++e) s.p[e] /= sum;
  std::partial_sort(s.order.begin(), s.order.begin() + k, s.order.end(), [&](uint32_t a, uint32_t b) {
    return route_rank(s.p[a]) > route_rank(s.p[b]) || (route_rank(s.p[a]) == route_rank(s.p[b]) && a < b);
  });
  float top_sum = 0.0f;
  for (uint32_t i = 0; i < k; ++i) top_sum += s.p[s.order[i]];
  for (uint32_t i = 0; i < k; ++i) {
    const float w = normalize ? s.p[s.order[i]] / top_sum : s.p[s.order[i]];
    ids[i] = s.order[i];
    weights[i] = w * (factors ? factors[s.order[i]] : 1.0f);
  }
}

}  // namespace sluice::graph
