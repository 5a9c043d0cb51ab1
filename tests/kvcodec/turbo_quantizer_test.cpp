// The TurboQuant quantizer against the paper (Zandieh et al., arXiv 2504.19874): the committed
// codebooks are the Lloyd–Max optimum they claim to be, the MSE stage's distortion on random unit
// vectors matches Theorem 1, and the inner-product variant (MSE + QJL) is unbiased where the MSE
// stage alone is not.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "turbo/codebook.h"
#include "turbo/lloyd_max.h"
#include "turbo/mse_stage.h"
#include "turbo/turbo_codecs.h"

namespace sluice::turbo {
namespace {

std::vector<float> random_unit(std::mt19937& rng, uint32_t d) {
  std::normal_distribution<float> g;
  std::vector<float> v(d);
  double n2 = 0;
  for (auto& x : v) {
    x = g(rng);
    n2 += static_cast<double>(x) * x;
  }
  for (auto& x : v) x = static_cast<float>(x / std::sqrt(n2));
  return v;
}

TEST(TurboCodebooks, CommittedTablesAreTheLloydMaxOptimumRecomputed) {
  for (const auto& e : committed_codebooks()) {
    SCOPED_TRACE("n=" + std::to_string(e.block_dim) + " b=" + std::to_string(e.bits));
    const auto r = lloyd_max(e.block_dim, e.bits);
    ASSERT_EQ(r.centroids.size(), 1u << e.bits);
    for (std::size_t k = 0; k < r.centroids.size(); ++k) EXPECT_NEAR(e.centroids[k], r.centroids[k], 1e-6);
    EXPECT_NEAR(e.distortion, r.distortion, 1e-8);
  }
  for (uint32_t n : kBlockSizes)
    for (uint32_t b = 1; b <= kMaxBits; ++b) EXPECT_NE(find_codebook(n, b), nullptr) << n << " " << b;
}

TEST(TurboCodebooks, GaussianLimitMatchesMaxsTable) {
  // J. Max (1960), optimum quantizers for N(0, 1): MSE 0.3634, 0.1175, 0.03455, 0.009497.
  const double expected[] = {0.3634, 0.1175, 0.03455, 0.009497};
  for (uint32_t b = 1; b <= 4; ++b) EXPECT_NEAR(lloyd_max(0, b).distortion, expected[b - 1], 2e-4 * expected[b - 1] + 1e-5);
  EXPECT_NEAR(lloyd_max(0, 1).centroids[1], std::sqrt(2 / M_PI), 1e-6);
}

// D_mse = E‖x − x̂‖² over random unit vectors (d = 128: one rotation block), with one fixed
// rotation (the paper's quantizer) through the rotated-domain calls.
double mse_distortion(uint32_t bits, ScaleMode mode, int trials) {
  const uint32_t d = 128;
  MseStage stage(d, bits, kDefaultSeed, mode);
  std::mt19937 rng(42);
  std::vector<std::byte> row(stage.row_bytes());
  std::vector<float> y(d), yhat(d);
  double sum = 0;
  for (int t = 0; t < trials; ++t) {
    const auto x = random_unit(rng, d);
    stage.rotate(x.data(), y.data());
    stage.encode_rotated(y.data(), row.data(), nullptr);
    stage.reconstruct_rotated(row.data(), yhat.data());
    stage.unrotate(yhat.data(), yhat.data());
    for (uint32_t j = 0; j < d; ++j) sum += (x[j] - yhat[j]) * (x[j] - yhat[j]);
  }
  return sum / trials;
}

TEST(TurboMse, DistortionOnRandomUnitVectorsMatchesThePaper) {
  // Theorem 1's values for b = 1..4 are 0.36, 0.117, 0.03, 0.009. The last two are printed to one
  // significant figure: the Lloyd–Max optimum they round is 0.0340 and 0.0093 at d = 128
  // (0.0345 and 0.0095 in the Gaussian limit, Max 1960), so 0.03 itself is 13% below what any
  // scalar quantizer of these coordinates reaches. We hold every b to 10% of the exact optimum,
  // and b = 1, 2, 4 to 10% of the paper's printed value as well; b = 3 to its printed precision.
  const double paper[] = {0.36, 0.117, 0.03, 0.009};
  for (uint32_t b = 1; b <= 4; ++b) {
    const double measured = mse_distortion(b, ScaleMode::kRaw, 4000);
    const double optimum = find_codebook(128, b)->distortion;
    SCOPED_TRACE("b=" + std::to_string(b) + " measured " + std::to_string(measured));
    std::printf("b=%u: D_mse %.5f (Lloyd-Max optimum %.5f, paper %.3g)\n", b, measured, optimum, paper[b - 1]);
    EXPECT_NEAR(measured, optimum, 0.10 * optimum);
    if (b == 3)
      EXPECT_NEAR(measured, paper[b - 1], 0.005);  // rounds to 0.03
    else
      EXPECT_NEAR(measured, paper[b - 1], 0.10 * paper[b - 1]);
    EXPECT_GT(measured, std::pow(4.0, -static_cast<double>(b)));        // the paper's lower bound 4^-b
    EXPECT_LT(measured, std::sqrt(3.0) * M_PI / 2 * std::pow(4.0, -static_cast<double>(b)));  // its upper bound
  }
}

TEST(TurboMse, NormCorrectionCostsLittleMse) {
  // The default scale keeps each block's length; its MSE stays within 10% of the raw quantizer's.
  for (uint32_t b = 2; b <= 4; ++b) {
    const double raw = mse_distortion(b, ScaleMode::kRaw, 1000), exact = mse_distortion(b, ScaleMode::kExact, 1000);
    const double ls = mse_distortion(b, ScaleMode::kLeastSquares, 1000);
    EXPECT_LT(exact, 1.10 * raw) << "b=" << b;
    EXPECT_LE(ls, raw * 1.0001) << "b=" << b;  // least squares is never worse than a fixed scale
  }
}

// The same through encode/decode, choosing among `rotations` candidates per block.
double mse_with_rotations(uint32_t d, uint32_t bits, uint32_t rotations, int trials) {
  MseStage stage(d, bits, kDefaultSeed, ScaleMode::kExact, rotations);
  std::mt19937 rng(43);
  std::vector<std::byte> row(stage.row_bytes());
  std::vector<float> back(d);
  double sum = 0;
  for (int t = 0; t < trials; ++t) {
    const auto x = random_unit(rng, d);
    stage.encode(x.data(), row.data());
    stage.decode(row.data(), back.data());
    for (uint32_t j = 0; j < d; ++j) sum += (x[j] - back[j]) * (x[j] - back[j]);
  }
  return sum / trials;
}

TEST(TurboMse, ChoosingAmongRotationsLowersMseAtTheSameBits) {
  for (uint32_t d : {64u, 128u})
    for (uint32_t b : {3u, 4u}) {
      const double one = mse_with_rotations(d, b, 1, 2000), four = mse_with_rotations(d, b, 4, 2000),
                   sixteen = mse_with_rotations(d, b, 16, 2000);
      std::printf("d=%u b=%u: D_mse 1 rotation %.5f, best of 4 %.5f (%+.0f%%), best of 16 %.5f (%+.0f%%)\n", d, b, one, four,
                  100 * (four / one - 1), sixteen, 100 * (sixteen / one - 1));
      EXPECT_LT(four, 0.90 * one) << "d=" << d << " b=" << b;
      EXPECT_LT(sixteen, 0.85 * one) << "d=" << d << " b=" << b;
      EXPECT_LT(sixteen, four) << "d=" << d << " b=" << b;
    }
}

TEST(TurboMse, OneRotationEncodeEqualsTheRotatedDomainPath) {
  MseStage stage(80, 4, kDefaultSeed, ScaleMode::kExact, 1);
  std::mt19937 rng(3);
  const auto x = random_unit(rng, 80);
  std::vector<float> y(80);
  std::vector<std::byte> a(stage.row_bytes()), b(stage.row_bytes());
  stage.encode(x.data(), a.data());
  stage.rotate(x.data(), y.data());
  stage.encode_rotated(y.data(), b.data(), nullptr);
  EXPECT_EQ(a, b);
}

TEST(TurboMse, RotationIsOrthogonalAndInvertible) {
  for (uint32_t d : {64u, 80u, 96u, 128u, 256u}) {
    MseStage stage(d, 4, kDefaultSeed, ScaleMode::kExact);
    std::mt19937 rng(d);
    auto x = random_unit(rng, d);
    std::vector<float> y(d), back(d);
    stage.rotate(x.data(), y.data());
    double n2 = 0;
    for (float v : y) n2 += v * v;
    EXPECT_NEAR(n2, 1.0, 1e-5) << d;
    stage.unrotate(y.data(), back.data());
    for (uint32_t j = 0; j < d; ++j) EXPECT_NEAR(back[j], x[j], 1e-6) << d;
  }
}

// Inner-product errors ⟨q, x⟩_estimated − ⟨q, x⟩ over 10⁴ pairs with q correlated with x (for an
// independent q every estimator looks unbiased). Returns mean and standard error.
std::pair<double, double> inner_product_error(const std::string& name, const std::string& options) {
  const uint32_t d = 128;
  kvcodec::Options opts(options);
  auto codec = name == "turbo-prod" ? make_turbo_prod(d, SL_KV_KEYS, opts)
               : name == "turbo3"   ? make_turbo3(d, SL_KV_KEYS, opts)
                                    : make_turbo2(d, SL_KV_KEYS, opts);
  const auto f = codec->format();
  std::vector<std::byte> row(f.row_bytes), state(codec->query_state_bytes());
  std::mt19937 rng(7);
  const int pairs = 10000;
  double sum = 0, sum2 = 0;
  for (int t = 0; t < pairs; ++t) {
    const auto x = random_unit(rng, d);
    const auto noise = random_unit(rng, d);
    std::vector<float> q(d);
    double truth = 0;
    for (uint32_t j = 0; j < d; ++j) truth += x[j] * (q[j] = x[j] + 0.5f * noise[j]);
    codec->encode(x.data(), 1, row.data());
    codec->prepare_query(q.data(), state.data());
    float est;
    codec->score_keys(state.data(), row.data(), f.row_bytes, 1, &est);
    const double e = est - truth;
    sum += e;
    sum2 += e * e;
  }
  const double mean = sum / pairs, var = (sum2 / pairs - mean * mean) * pairs / (pairs - 1);
  return {mean, std::sqrt(var / pairs)};
}

TEST(TurboProd, InnerProductEstimateIsUnbiased) {
  for (const char* opts : {"bits=3:norm=raw", "bits=4:norm=raw", "bits=3", "bits=2:norm=raw"}) {
    const auto [mean, se] = inner_product_error("turbo-prod", opts);
    std::printf("turbo-prod %s: mean error %.2e, standard error %.2e\n", opts, mean, se);
    EXPECT_LT(std::fabs(mean), 3 * se) << opts << ": mean error " << mean << ", standard error " << se;
  }
}

TEST(TurboProd, TheMseStageAloneIsBiasedWhereQjlIsNot) {
  // The paper's motivation for QJL: the MSE quantizer shrinks inner products (by about D_mse).
  const auto [mean, se] = inner_product_error("turbo2", "norm=raw");
  EXPECT_GT(std::fabs(mean), 10 * se) << "mean error " << mean << ", standard error " << se;
  EXPECT_LT(mean, 0.0);
}

}  // namespace
}  // namespace sluice::turbo
