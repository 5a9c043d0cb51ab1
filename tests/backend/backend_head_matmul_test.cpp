// HEAD_MATMUL (ABI 2.4), MLA's absorbed products, against a float64 reference: per head, x's head
// times that head's slice of one weight's rows, with the slice transposed (as MATMUL) or not, at
// awkward shapes (odd head counts, slices not at a group's start, widths that are no multiple of 8),
// for every plain dtype and for 4- and 8-bit affine weights; and the host's version check.
#include <cmath>
#include <string>
#include <vector>

#include "quant_weight_test.h"

namespace sluice::test {
namespace {

constexpr double kRel = 1e-5;    // float32 arithmetic against a double reference
constexpr double kFloor = 1e-6;  // absolute floor for values near zero

class HeadMatmul : public QuantWeightTest {
 protected:
  bool supported(const sl_weight& w, const sl_head_matmul_params& p) { return backend().runs_head_matmul(w, p); }

  // Runs the op on n_tokens random rows and compares every output value with the double sum over
  // `values` (the weight as the backend sees it, [w.rows, w.cols]).
  void expect_matches(const sl_weight& w, const std::vector<float>& values, const sl_head_matmul_params& p, uint32_t n_tokens) {
    const uint32_t H = p.n_heads, cols = w.cols, rows = p.slice_rows;
    const uint32_t in_w = p.transpose ? rows : cols, out_w = p.transpose ? cols : rows;
    SCOPED_TRACE("heads " + std::to_string(H) + " head_rows " + std::to_string(p.head_rows) + " offset " + std::to_string(p.row_offset) +
                 " slice " + std::to_string(rows) + "x" + std::to_string(cols) + (p.transpose ? " transposed" : "") + " tokens " +
                 std::to_string(n_tokens));
    const std::vector<float> x = random(std::size_t(n_tokens) * H * in_w);
    Buffer in = upload(x);
    Buffer out = zeros(std::size_t(n_tokens) * H * out_w);
    sl_error err{};
    ASSERT_EQ(ops().head_matmul(in.get(), n_tokens, &w, p, out.get(), &err), SL_OK) << err.message;
    const std::vector<float> got = download(out, std::size_t(n_tokens) * H * out_w);
    for (uint32_t t = 0; t < n_tokens; ++t)
      for (uint32_t h = 0; h < H; ++h)
        for (uint32_t o = 0; o < out_w; ++o) {
          double ref = 0, magnitude = 0;
          for (uint32_t i = 0; i < in_w; ++i) {
            const uint32_t r = h * p.head_rows + p.row_offset + (p.transpose ? i : o), c = p.transpose ? o : i;
            const double term = double(x[(std::size_t(t) * H + h) * in_w + i]) * values[std::size_t(r) * cols + c];
            ref += term;
            magnitude += std::abs(term);
          }
          ASSERT_NEAR(got[(std::size_t(t) * H + h) * out_w + o], ref, kRel * magnitude + kFloor)
              << "token " << t << " head " << h << " out " << o;
        }
  }
};

sl_head_matmul_params slice(uint32_t n_heads, uint32_t head_rows, uint32_t row_offset, uint32_t slice_rows, uint32_t transpose) {
  return sl_head_matmul_params{sizeof(sl_head_matmul_params), n_heads, head_rows, row_offset, slice_rows, transpose};
}

// kv_b's shape in miniature: 3 heads of [5 k rows | 7 v rows] over a latent of 13; both products MLA
// takes (the k rows transposed, the v rows not) and slices that fill a head or sit at its end.
TEST_P(HeadMatmul, EveryPlainDtypeMatchesTheReference) {
  const uint32_t H = 3, NOPE = 5, V = 7, KL = 13;
  for (sl_dtype dtype : kWeightDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    auto w = make_weight(dtype, H * (NOPE + V), KL, 0.5f);
    for (const auto& p : {slice(H, NOPE + V, 0, NOPE, 1), slice(H, NOPE + V, NOPE, V, 0), slice(H, NOPE + V, 0, NOPE + V, 0),
                          slice(H, NOPE + V, NOPE + V - 1, 1, 1)}) {
      ASSERT_TRUE(supported(*w.get(), p));
      for (uint32_t n_tokens : {1u, 4u, 9u}) expect_matches(*w.get(), w.values, p, n_tokens);
    }
  }
}

// One head (a slice the whole weight) and DeepSeek-V3-like widths at a smaller head count.
TEST_P(HeadMatmul, OneHeadAndWideSlicesMatchTheReference) {
  auto one = make_weight(SL_DTYPE_F32, 9, 17, 0.5f);
  expect_matches(*one.get(), one.values, slice(1, 9, 2, 6, 1), 3);
  expect_matches(*one.get(), one.values, slice(1, 9, 2, 6, 0), 3);
  auto wide = make_weight(SL_DTYPE_BF16, 2 * (128 + 128), 512, 0.05f);
  expect_matches(*wide.get(), wide.values, slice(2, 256, 0, 128, 1), 2);
  expect_matches(*wide.get(), wide.values, slice(2, 256, 128, 128, 0), 2);
}

// MLX's 4- and 8-bit affine forms (as a quantized kv_b_proj comes), groups of 32 and 64.
TEST_P(HeadMatmul, AffineQuantizedWeightsMatchTheirDequantizedValues) {
  const uint32_t H = 3, NOPE = 5, V = 6, KL = 64;
  for (int bits : {4, 8})
    for (int group : {32, 64}) {
      SCOPED_TRACE(std::to_string(bits) + "-bit, group " + std::to_string(group));
      QWeight q = make_quantized(bits, group, H * (NOPE + V), KL);
      for (const auto& p : {slice(H, NOPE + V, 0, NOPE, 1), slice(H, NOPE + V, NOPE, V, 0)}) {
        ASSERT_TRUE(supported(q.weight, p));
        for (uint32_t n_tokens : {1u, 5u}) expect_matches(q.weight, q.values, p, n_tokens);
      }
    }
}

TEST_P(HeadMatmul, SlicesPastTheHeadOrShapesThatDoNotFitAreErrors) {
  auto w = make_weight(SL_DTYPE_F32, 2 * 6, 8);
  auto x = zeros(2 * 8);
  auto out = zeros(2 * 8);
  sl_error err{};
  EXPECT_NE(ops().head_matmul(x.get(), 1, w.get(), slice(2, 6, 4, 3, 0), out.get(), &err), SL_OK) << "rows 4..7 of a 6-row head";
  EXPECT_STRNE(err.message, "");
  err = {};
  EXPECT_NE(ops().head_matmul(x.get(), 1, w.get(), slice(3, 6, 0, 2, 0), out.get(), &err), SL_OK) << "3 heads of 6 rows in 12";
  EXPECT_STRNE(err.message, "");
  err = {};
  EXPECT_NE(ops().head_matmul(x.get(), 1, w.get(), slice(2, 6, 0, 0, 0), out.get(), &err), SL_OK) << "an empty slice";
  EXPECT_STRNE(err.message, "");
}

// A table of ABI 2.3 (a plugin built before the op) is never given it, whatever its supports_node says:
// the host then runs MLA expanded.
TEST_P(HeadMatmul, TheHostOffersTheOpOnlyToTablesOfTwoPointFour) {
  auto w = make_weight(SL_DTYPE_F32, 2 * 6, 8);
  ASSERT_TRUE(supported(*w.get(), slice(2, 6, 0, 3, 1)));
  sl_backend_api older = *api();
  older.abi_version = SL_ABI_VERSION_OF(2, 3);
  auto handle = BackendHandle::open(&older, GetParam().name, GetParam().device, 1, GetParam().options);
  ASSERT_TRUE(handle.ok()) << handle.message();
  EXPECT_FALSE((*handle)->runs_head_matmul(*w.get(), slice(2, 6, 0, 3, 1)));
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Backend, HeadMatmul, ::testing::ValuesIn(backends_under_test()), backend_test_name);

}  // namespace sluice::test
