// The CPU backend's vector e^x (core/util/vec.h: exp_shifted_sum for softmax, silu_mul for SwiGLU)
// against double-precision std::exp, over the whole range softmax and SiLU feed it and its edges.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "util/vec.h"

namespace {

using sluice::cpu::exp_shifted_sum;
using sluice::cpu::silu_mul;

// Inputs from -100 to 100 in steps that do not align with ln2, plus the values around the clamps.
std::vector<float> inputs() {
  std::vector<float> x;
  for (float v = -100.0f; v <= 100.0f; v += 0.0137f) x.push_back(v);
  for (float v : {-88.0f, -87.5f, -87.3f, -87.0f, 0.0f, -0.0f, 88.0f, 88.3f}) x.push_back(v);
  while (x.size() % 8) x.push_back(0.5f);  // whole vectors and no scalar tail in the main check
  return x;
}

// The error model, for the rounded difference d = x - m: the Taylor polynomial to r^6 for |r| <= ln2/2
// misses (ln2/2)^7/7! = 1.2e-7 of e^r; the argument reduction and six fused multiply-adds each round
// once (about 2^-24 relative each, not all in the same direction): 4e-7 relative.
constexpr double kRel = 4e-7;

TEST(VecMath, ExpShiftedSumMatchesDoubleExpAcrossTheRange) {
  const std::vector<float> x = inputs();
  for (float m : {0.0f, 3.5f, -20.0f}) {
    std::vector<float> v = x;
    const float sum = exp_shifted_sum(v.data(), v.size(), m);
    double ref_sum = 0.0;
    const double top = double(88.3f);  // the clamp: above it, e^88.3f
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double d = double(x[i] - m);  // the difference rounds to float first, as in any float softmax
      const double ref = std::exp(std::min(d, top));
      ref_sum += ref;
      if (d < -87.3) {  // e^x leaves the normal floats: a subnormal or 0, never more than e^-87.3
        EXPECT_GE(v[i], 0.0f) << "x - m = " << d;
        EXPECT_LE(v[i], 1.3e-38f) << "x - m = " << d;
        continue;
      }
      EXPECT_NEAR(v[i], ref, kRel * ref) << "x - m = " << d;
    }
    if (ref_sum < 1e38) EXPECT_NEAR(sum, ref_sum, 1e-6 * ref_sum) << "m = " << m;  // else past float's range
    else EXPECT_TRUE(std::isinf(sum)) << "m = " << m;
  }
}

TEST(VecMath, ExpShiftedSumKeepsInfinitiesAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {-inf, 0.0f, 1.0f, -inf, 2.0f, -inf, -inf, 0.0f, -inf};  // a vector and a scalar tail
  const float sum = exp_shifted_sum(v.data(), v.size(), 2.0f);
  for (std::size_t i : {0u, 3u, 5u, 6u, 8u}) EXPECT_EQ(v[i], 0.0f) << i;  // masked scores weigh nothing
  EXPECT_NEAR(v[4], 1.0f, kRel);
  EXPECT_NEAR(sum, 1.0 + std::exp(-1.0) + 2 * std::exp(-2.0), 1e-6);
  std::vector<float> n(8, 1.0f);
  n[3] = std::numeric_limits<float>::quiet_NaN();
  exp_shifted_sum(n.data(), n.size(), 0.0f);
  EXPECT_TRUE(std::isnan(n[3]));
  EXPECT_NEAR(n[2], std::exp(1.0), kRel * std::exp(1.0));
}

TEST(VecMath, SiluMulMatchesDoubleFormula) {
  const std::vector<float> g = inputs();
  std::vector<float> u(g.size()), o(g.size());
  for (std::size_t i = 0; i < u.size(); ++i) u[i] = 0.25f + 0.001f * float(i % 97);
  silu_mul(g.data(), u.data(), o.data(), g.size() - 3);  // a scalar tail too
  for (std::size_t i = 0; i + 3 < g.size(); ++i) {
    const double ref = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
    // e^-g's error passes into 1 + e^-g at most in full; the division and product round twice more.
    // Below g = -88.3, e^-g is held at e^88.3: the result stays below |g| e^-88.3 |u| < 1e-36.
    EXPECT_NEAR(o[i], ref, (kRel + 2.5e-7) * std::abs(ref) + 1e-36) << "g = " << g[i];
  }
}

}  // namespace
