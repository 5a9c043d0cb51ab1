#pragma once
// Routing kinds of a Mixture-of-Experts block other than softmax-then-top-k (which lives with the
// driver, core/model/transformer_forward.cpp): on the host, from the router's logits.
#include <cstdint>
#include <utility>
#include <vector>

#include "model/model_config.h"

namespace sluice::routing {

// Per token, its (expert, weight) pairs.
using Routes = std::vector<std::vector<std::pair<uint32_t, float>>>;

// DeepSeek-V3 (MoeRouting::kSigmoidGroupLimited), as transformers' DeepseekV3TopkRouter: scores =
// sigmoid(logits); the choice by score + choice_bias (e_score_correction_bias; empty = zeros): the
// topk_group groups whose two best biased scores sum highest stay, the rest count 0, and the top k
// of those biased scores are chosen; weights = the chosen experts' unbiased scores, divided by their
// sum (normalize_top_k, + 1e-20), times routed_scaling. Ties go to the lower index.
Routes sigmoid_group_limited(const MoeConfig& moe, const std::vector<float>& logits, uint32_t n, const std::vector<float>& choice_bias);

}  // namespace sluice::routing
