#include "model/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sluice::routing {

Routes sigmoid_group_limited(const MoeConfig& moe, const std::vector<float>& logits, uint32_t n, const std::vector<float>& choice_bias) {
  const uint32_t E = static_cast<uint32_t>(moe.n_experts), K = static_cast<uint32_t>(moe.top_k);
  const uint32_t G = static_cast<uint32_t>(std::max(1, moe.n_group)), per_group = E / G;
  const uint32_t kept_groups = static_cast<uint32_t>(std::clamp(moe.topk_group, 1, static_cast<int>(G)));
  Routes routes(n);
  std::vector<float> score(E), choice(E), group_score(G);
  std::vector<uint32_t> order(E), group_order(G);
  // Larger first, ties to the lower index (torch.topk's order on CPU).
  auto by = [](const std::vector<float>& v) { return [&v](uint32_t a, uint32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); }; };
  for (uint32_t t = 0; t < n; ++t) {
    const float* row = logits.data() + static_cast<std::size_t>(t) * E;
    for (uint32_t e = 0; e < E; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-row[e]));
      choice[e] = score[e] + (e < choice_bias.size() ? choice_bias[e] : 0.0f);
    }
    for (uint32_t g = 0; g < G; ++g) {  // each group's two best biased scores, summed
      float best = -INFINITY, second = -INFINITY;
      for (uint32_t e = g * per_group; e < (g + 1) * per_group; ++e) {
        if (choice[e] > best) {
          second = best;
          best = choice[e];
        } else if (choice[e] > second) {
          second = choice[e];
        }
      }
      group_score[g] = best + second;
    }
    std::iota(group_order.begin(), group_order.end(), 0u);
    std::partial_sort(group_order.begin(), group_order.begin() + kept_groups, group_order.end(), by(group_score));
    std::vector<bool> kept(G, false);
    for (uint32_t i = 0; i < kept_groups; ++i) kept[group_order[i]] = true;
    // transformers masks the other groups' experts with 0 (not -inf): with negative biased scores one may still be chosen.
    for (uint32_t e = 0; e < E; ++e)
      if (!kept[e / per_group]) choice[e] = 0.0f;
    std::iota(order.begin(), order.end(), 0u);
    std::partial_sort(order.begin(), order.begin() + K, order.end(), by(choice));
    float sum = 0.0f;
    for (uint32_t i = 0; i < K; ++i) sum += score[order[i]];
    const float denominator = moe.normalize_top_k ? sum + 1e-20f : 1.0f;
    for (uint32_t i = 0; i < K; ++i) routes[t].emplace_back(order[i], score[order[i]] / denominator * moe.routed_scaling);
  }
  return routes;
}

}  // namespace sluice::routing
