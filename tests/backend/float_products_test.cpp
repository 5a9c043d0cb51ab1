// The CPU backend's float products (backends/cpu/float_products.h: prefill attention's two and the float GEMM) against
// double-precision sums, over the shapes that reach every tile edge: query rows past a whole register
// tile, keys past a whole key tile, head sizes with and without a remainder of 16, and causal blocks
// that start on, before and far from the diagonal.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "float_products.h"

namespace sluice::cpu {
namespace {

std::vector<float> random_values(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

struct Shape {
  std::size_t n_queries, n_keys, dim, key_count;
};

// Rows: 1, a tile and one more (9), 13; keys: under a tile, between tiles, past the value block (256);
// head sizes 16, 24, 64, 72, 128; the first row's keys 1 (a block at the start), n_keys − rows + 1 (a
// block ending at the diagonal) and n_keys (a decode-like block that sees everything).
const Shape kShapes[] = {
    {1, 1, 16, 1},     {9, 9, 24, 1},      {13, 45, 64, 33},   {8, 40, 72, 33},  {17, 300, 128, 284},
    {5, 270, 64, 270}, {24, 31, 128, 8},   {3, 600, 64, 598},  {11, 17, 20, 7},
};

TEST(FloatProducts, ScoresAreEachRowsKeysTimesItsQuery) {
  std::mt19937 rng(7);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE("queries " + std::to_string(s.n_queries) + " keys " + std::to_string(s.n_keys) + " dim " + std::to_string(s.dim) +
                 " first row sees " + std::to_string(s.key_count));
    const std::size_t q_stride = s.dim * 3 + 5, s_stride = s.n_keys + 3;  // strides as a head inside a row
    const auto q = random_values(s.n_queries * q_stride, rng), k = random_values(s.n_keys * s.dim, rng);
    PackedRows packed;
    pack_rows(k.data(), s.n_keys, s.dim, packed);
    const float sentinel = 12345.0f;
    std::vector<float> scores(s.n_queries * s_stride, sentinel);
    const float scale = 0.125f;
    times_packed_rows(q.data(), q_stride, s.n_queries, packed, s.key_count, scale, scores.data(), s_stride);
    for (std::size_t i = 0; i < s.n_queries; ++i) {
      const std::size_t seen = std::min(s.n_keys, s.key_count + i);
      for (std::size_t j = 0; j < seen; ++j) {
        double want = 0;
        for (std::size_t d = 0; d < s.dim; ++d) want += double(q[i * q_stride + d]) * k[j * s.dim + d];
        want *= scale;
        ASSERT_NEAR(scores[i * s_stride + j], want, 1e-5 * (1.0 + std::abs(want))) << "row " << i << " key " << j;
      }
      // Nothing at or past the last key, nor in the gap of the stride, is written.
      for (std::size_t j = s.n_keys; j < s_stride; ++j) ASSERT_EQ(scores[i * s_stride + j], sentinel) << "row " << i << " column " << j;
    }
  }
}

TEST(FloatProducts, ValuesAreEachRowsWeightsOverTheKeysItSees) {
  std::mt19937 rng(11);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE("queries " + std::to_string(s.n_queries) + " keys " + std::to_string(s.n_keys) + " dim " + std::to_string(s.dim) +
                 " first row sees " + std::to_string(s.key_count));
    const std::size_t p_stride = s.n_keys + 7, o_stride = s.dim * 2 + 3;
    auto p = random_values(s.n_queries * p_stride, rng);
    // Zeros past each row's own keys, as a causal softmax leaves them (the kernel may read them).
    for (std::size_t i = 0; i < s.n_queries; ++i)
      for (std::size_t j = std::min(s.n_keys, s.key_count + i); j < s.n_keys; ++j) p[i * p_stride + j] = 0.0f;
    const auto v = random_values(s.n_keys * s.dim, rng);
    const float sentinel = -777.0f;
    std::vector<float> o(s.n_queries * o_stride, sentinel);
    times_rows(p.data(), p_stride, s.n_queries, v.data(), s.n_keys, s.dim, s.key_count, o.data(), o_stride);
    for (std::size_t i = 0; i < s.n_queries; ++i) {
      const std::size_t seen = std::min(s.n_keys, s.key_count + i);
      for (std::size_t d = 0; d < s.dim; ++d) {
        double want = 0;
        for (std::size_t j = 0; j < seen; ++j) want += double(p[i * p_stride + j]) * v[j * s.dim + d];
        ASSERT_NEAR(o[i * o_stride + d], want, 1e-5 * (1.0 + std::sqrt(double(seen)))) << "row " << i << " column " << d;
      }
      for (std::size_t d = s.dim; d < o_stride; ++d) ASSERT_EQ(o[i * o_stride + d], sentinel) << "row " << i << " column " << d;
    }
  }
}

// The packed layout itself: key j's value d at tile j / 16, row d, lane j % 16; padding keys zero.
TEST(FloatProducts, PackedRowsHoldEachKeyDownAColumnAndZeroPadding) {
  std::mt19937 rng(3);
  const std::size_t n = 37, dim = 5;
  const auto k = random_values(n * dim, rng);
  PackedRows packed;
  pack_rows(k.data(), n, dim, packed);
  ASSERT_EQ(packed.values.size(), 48 * dim);
  for (std::size_t j = 0; j < 48; ++j)
    for (std::size_t d = 0; d < dim; ++d)
      EXPECT_EQ(packed.tile(j / 16)[d * 16 + j % 16], j < n ? k[j * dim + d] : 0.0f) << "key " << j << " value " << d;
}

}  // namespace
}  // namespace sluice::cpu
