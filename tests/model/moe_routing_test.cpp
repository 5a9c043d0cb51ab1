// DeepSeek-V3's sigmoid group-limited routing (core/model/moe_routing.h) against values worked by hand
// from transformers' DeepseekV3TopkRouter.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "model/moe_routing.h"

namespace sluice {
namespace {

float logit(float p) { return std::log(p / (1.0f - p)); }  // the logit whose sigmoid is p

MoeConfig deepseek_moe() {
  MoeConfig m;
  m.n_experts = 8;
  m.top_k = 2;
  m.routing = MoeRouting::kSigmoidGroupLimited;
  m.n_group = 2;
  m.topk_group = 1;
  m.normalize_top_k = true;
  m.routed_scaling = 2.5f;
  return m;
}

TEST(MoeRouting, SigmoidGroupLimitedKeepsTheBestGroupAndWeighsByUnbiasedScores) {
  const MoeConfig m = deepseek_moe();
  // Group 0 (experts 0-3): scores .9 .1 .1 .1 → its two best sum 1.0. Group 1 (4-7): .6 .55 .5 .2 → 1.15:
  // group 1 stays although expert 0 has the best single score; experts 4 and 5 are chosen.
  std::vector<float> logits;
  for (float p : {0.9f, 0.1f, 0.1f, 0.1f, 0.6f, 0.55f, 0.5f, 0.2f}) logits.push_back(logit(p));
  auto r = routing::sigmoid_group_limited(m, logits, 1, {});
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(r[0].size(), 2u);
  EXPECT_EQ(r[0][0].first, 4u);
  EXPECT_EQ(r[0][1].first, 5u);
  EXPECT_NEAR(r[0][0].second, 0.6 / 1.15 * 2.5, 1e-5);
  EXPECT_NEAR(r[0][1].second, 0.55 / 1.15 * 2.5, 1e-5);

  // The correction bias moves the choice (group 0 now sums 1.0 + 0.3, expert 6 beats 5 by bias), the
  // weights stay the unbiased scores.
  const std::vector<float> bias = {0.0f, 0.3f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  r = routing::sigmoid_group_limited(m, logits, 1, bias);
  EXPECT_EQ(r[0][0].first, 0u);
  EXPECT_EQ(r[0][1].first, 1u);
  EXPECT_NEAR(r[0][0].second, 0.9 / 1.0 * 2.5, 1e-5);
  EXPECT_NEAR(r[0][1].second, 0.1 / 1.0 * 2.5, 1e-5);

  // Without normalisation: the scores times the scaling factor.
  MoeConfig plain = m;
  plain.normalize_top_k = false;
  plain.routed_scaling = 1.0f;
  r = routing::sigmoid_group_limited(plain, logits, 1, {});
  EXPECT_NEAR(r[0][0].second, 0.6, 1e-6);
  EXPECT_NEAR(r[0][1].second, 0.55, 1e-6);
}

TEST(MoeRouting, SigmoidGroupLimitedMasksOtherGroupsWithZeroAsTransformersDoes) {
  const MoeConfig m = deepseek_moe();
  // Group 1 wins on biased sums, but its biased scores are negative: transformers fills the dropped
  // group's scores with 0, which then beat them — expert 0 (lowest index among the zeros) is chosen.
  std::vector<float> logits;
  for (float p : {0.1f, 0.1f, 0.1f, 0.1f, 0.5f, 0.4f, 0.3f, 0.3f}) logits.push_back(logit(p));
  const std::vector<float> bias(8, -0.45f);
  const auto r = routing::sigmoid_group_limited(m, logits, 1, bias);
  EXPECT_EQ(r[0][0].first, 4u);  // 0.05, the only positive biased score
  EXPECT_EQ(r[0][1].first, 0u);  // 0 (masked) > -0.05
}

}  // namespace
}  // namespace sluice
