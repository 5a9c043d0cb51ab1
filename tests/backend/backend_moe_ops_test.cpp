// Experts chosen on the device (ABI 2.5): MOE_ROUTE against the host's routing (core/graph/moe_route.h,
// itself held to the goldens by the MoE models' tests), MATMUL_ID against a float64 reference over
// stacked plain and affine-quantized experts, and MOE_COMBINE; the host's version and support checks.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "graph/moe_route.h"
#include "quant_weight_test.h"

namespace sluice::test {
namespace {

sl_moe_route_params route_params(uint32_t k, uint32_t kind, bool normalize) {
  return sl_moe_route_params{sizeof(sl_moe_route_params), k, kind, normalize ? 1u : 0u};
}

class MoeOps : public QuantWeightTest {
 protected:
  Buffer upload_ints(const std::vector<int32_t>& v) { return upload_bytes(v.data(), v.size() * 4); }
  std::vector<int32_t> download_ints(const Buffer& b, std::size_t n) {
    const std::vector<float> raw = download(b, n);
    std::vector<int32_t> out(n);
    std::memcpy(out.data(), raw.data(), n * 4);
    return out;
  }

  // Routes n rows of logits on the backend; ids and weights come back per row.
  void route(const std::vector<float>& logits, uint32_t n, uint32_t E, const sl_moe_route_params& p, const DeviceWeight* factors,
             std::vector<int32_t>& ids, std::vector<float>& weights) {
    Buffer l = upload(logits), id = zeros(std::size_t(n) * p.k), w = zeros(std::size_t(n) * p.k);
    sl_error err{};
    ASSERT_EQ(ops().moe_route(l.get(), n, E, factors ? factors->get() : nullptr, p, id.get(), w.get(), &err), SL_OK) << err.message;
    ids = download_ints(id, std::size_t(n) * p.k);
    weights = download(w, std::size_t(n) * p.k);
  }

  // The backend's routing equals the host's: the same k experts in increasing id order, weights within
  // float32 rounding of exp (a device's exp may differ in the last bits).
  void expect_host_routing(const std::vector<float>& logits, uint32_t n, uint32_t E, const sl_moe_route_params& p,
                           const DeviceWeight* factors) {
    std::vector<int32_t> ids;
    std::vector<float> weights;
    route(logits, n, E, p, factors, ids, weights);
    graph::RouteScratch scratch;
    std::vector<uint32_t> want_ids(p.k);
    std::vector<float> want_w(p.k);
    for (uint32_t t = 0; t < n; ++t) {
      graph::route_row(logits.data() + std::size_t(t) * E, E, p.k, p.kind, p.normalize != 0, factors ? factors->values.data() : nullptr, scratch,
                       want_ids.data(), want_w.data());
      std::vector<std::pair<uint32_t, float>> want;
      for (uint32_t j = 0; j < p.k; ++j) want.emplace_back(want_ids[j], want_w[j]);
      std::sort(want.begin(), want.end());
      for (uint32_t j = 0; j < p.k; ++j) {
        ASSERT_EQ(ids[std::size_t(t) * p.k + j], int32_t(want[j].first)) << "row " << t << " slot " << j;
        EXPECT_NEAR(weights[std::size_t(t) * p.k + j], want[j].second, 2e-6f * std::abs(want[j].second) + 1e-7f) << "row " << t << " slot " << j;
      }
    }
  }

  // Runs MATMUL_ID over the stacked `values` ([E · R, cols]) and compares each slot's row with the
  // double sum; an id outside the experts must give zeros. The bound is MATMUL's for the weight's form
  // (quantized: quant_matmul_shapes_test's, as the affine kernels form s·Σqx + b·Σx).
  void expect_products(const sl_weight& w, const std::vector<float>& values, uint32_t E, const std::vector<int32_t>& ids, uint32_t n,
                       uint32_t k, bool x_per_slot) {
    const double rel = w.bits ? 2e-5 : 1e-5, floor = w.bits ? 1e-5 : 1e-6;
    const uint32_t R = w.rows / E, cols = w.cols, x_rows = x_per_slot ? n * k : n;
    SCOPED_TRACE("experts " + std::to_string(E) + " of " + std::to_string(R) + "x" + std::to_string(cols) + " tokens " + std::to_string(n) +
                 " k " + std::to_string(k) + (x_per_slot ? " x per slot" : " x per token"));
    const std::vector<float> x = activations(x_rows, cols);
    Buffer xb = upload(x), idb = upload_ints(ids), out = upload(std::vector<float>(std::size_t(n) * k * R, 7.0f));
    sl_error err{};
    ASSERT_EQ(ops().matmul_id(xb.get(), x_rows, &w, E, idb.get(), n, k, out.get(), &err), SL_OK) << err.message;
    const std::vector<float> got = download(out, std::size_t(n) * k * R);
    for (uint32_t s = 0; s < n * k; ++s) {
      const int32_t e = ids[s];
      const float* xs = x.data() + std::size_t(x_per_slot ? s : s / k) * cols;
      for (uint32_t r = 0; r < R; ++r) {
        double ref = 0, magnitude = 0;
        if (e >= 0 && uint32_t(e) < E)
          for (uint32_t c = 0; c < cols; ++c) {
            const double term = double(xs[c]) * values[(std::size_t(e) * R + r) * cols + c];
            ref += term;
            magnitude += std::abs(term);
          }
        ASSERT_NEAR(got[std::size_t(s) * R + r], ref, rel * magnitude + floor) << "slot " << s << " expert " << e << " row " << r;
      }
    }
  }

  bool runs(uint32_t E, const sl_moe_route_params& p, const sl_weight& w) { return backend().runs_device_routing(E, p, {&w, 1}); }
};

// Softmax then top k (renormalised or not, with Gemma 4's per-expert factors or without) and top k then
// softmax, over expert counts around the kernels' work-group sizes, k from 1 to 8.
TEST_P(MoeOps, RoutingEqualsTheHostsForEveryKind) {
  for (uint32_t E : {4u, 60u, 64u, 128u, 257u, 1024u}) {  // up to the kernel's largest row and k
    const std::vector<float> logits = random(std::size_t(5) * E, 2.0f);
    DeviceWeight factors = make_weight(SL_DTYPE_F32, 1, E, 0.5f, 1.0f);
    for (uint32_t k : {1u, 2u, std::min(E, 8u), std::min(E, 64u)}) {
      SCOPED_TRACE("experts " + std::to_string(E) + " k " + std::to_string(k));
      expect_host_routing(logits, 5, E, route_params(k, SL_ROUTE_SOFTMAX_TOPK, true), nullptr);
      expect_host_routing(logits, 5, E, route_params(k, SL_ROUTE_SOFTMAX_TOPK, false), nullptr);
      expect_host_routing(logits, 5, E, route_params(k, SL_ROUTE_SOFTMAX_TOPK, true), &factors);
      expect_host_routing(logits, 5, E, route_params(k, SL_ROUTE_TOPK_SOFTMAX, false), nullptr);
    }
  }
}

// Equal logits go to the lower index (torch.topk's order); a row of NaN still names k distinct experts.
TEST_P(MoeOps, TiesGoToTheLowerExpertAndNanRowsStillNameDistinctExperts) {
  const uint32_t E = 70, k = 4;
  std::vector<float> logits(std::size_t(2) * E, 0.5f);
  logits[65] = 3.0f;  // row 0: expert 65 first, then the lowest of the rest, all equal: 0, 1, 2
  for (uint32_t e = 0; e < E; ++e) logits[E + e] = std::numeric_limits<float>::quiet_NaN();
  for (uint32_t kind : {uint32_t(SL_ROUTE_SOFTMAX_TOPK), uint32_t(SL_ROUTE_TOPK_SOFTMAX)}) {
    std::vector<int32_t> ids;
    std::vector<float> weights;
    route(logits, 2, E, route_params(k, kind, true), nullptr, ids, weights);
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + k), (std::vector<int32_t>{0, 1, 2, 65})) << "kind " << kind;
    std::vector<int32_t> nan_row(ids.begin() + k, ids.end());
    std::sort(nan_row.begin(), nan_row.end());
    EXPECT_EQ(std::unique(nan_row.begin(), nan_row.end()), nan_row.end()) << "kind " << kind;
    for (int32_t id : nan_row) EXPECT_TRUE(id >= 0 && uint32_t(id) < E) << id;
  }
}

// Stacked plain experts of every dtype, each token's input shared by its k experts or one a slot, and
// ids outside the experts.
TEST_P(MoeOps, ProductsByExpertIdMatchTheReferenceForPlainWeights) {
  const uint32_t E = 5, R = 13, cols = 48;
  for (sl_dtype dtype : kWeightDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    auto w = make_weight(dtype, E * R, cols, 0.5f);
    ASSERT_TRUE(runs(E, route_params(2, SL_ROUTE_SOFTMAX_TOPK, true), *w.get()));
    expect_products(*w.get(), w.values, E, {4, 0, 2, 2, 1, 3}, 3, 2, false);
    expect_products(*w.get(), w.values, E, {4, 0, 2, 2, 1, 3}, 3, 2, true);
    expect_products(*w.get(), w.values, E, {1, -1, 5, 3}, 2, 2, false);  // -1 and 5: rows of zeros
  }
}

// MLX's 4- and 8-bit affine experts (groups of 32 and 64), decode's one token with k = 8 and a few tokens.
TEST_P(MoeOps, ProductsByExpertIdMatchTheReferenceForQuantizedWeights) {
  const uint32_t E = 12, R = 24, cols = 256;
  for (int bits : {4, 8})
    for (int group : {32, 64}) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " group " + std::to_string(group));
      QWeight q = make_quantized(bits, group, E * R, cols);
      ASSERT_TRUE(runs(E, route_params(8, SL_ROUTE_SOFTMAX_TOPK, true), q.weight));
      expect_products(q.weight, q.values, E, {11, 0, 3, 7, 5, 9, 2, 6}, 1, 8, false);
      expect_products(q.weight, q.values, E, {1, 2, 3, 3, 2, 11, 0, 0, 10}, 3, 3, true);
    }
  // Rows an expert that are no multiple of a kernel's rows a team (13), an id outside the experts.
  QWeight odd = make_quantized(4, 64, 3 * 13, 192);
  expect_products(odd.weight, odd.values, 3, {2, 0, -4, 1}, 2, 2, false);
}

TEST_P(MoeOps, CombineAddsEachTokensWeightedExpertsInOrder) {
  const uint32_t n = 3, k = 4, dim = 37;
  const std::vector<float> x = random(std::size_t(n) * k * dim), w = random(std::size_t(n) * k), start = random(std::size_t(n) * dim);
  Buffer xb = upload(x), wb = upload(w), out = upload(start);
  sl_error err{};
  ASSERT_EQ(ops().moe_combine(xb.get(), wb.get(), n, k, dim, out.get(), &err), SL_OK) << err.message;
  const std::vector<float> got = download(out, std::size_t(n) * dim);
  for (uint32_t t = 0; t < n; ++t)
    for (uint32_t c = 0; c < dim; ++c) {
      double ref = start[std::size_t(t) * dim + c];
      for (uint32_t j = 0; j < k; ++j) ref += double(w[std::size_t(t) * k + j]) * x[(std::size_t(t) * k + j) * dim + c];
      EXPECT_NEAR(got[std::size_t(t) * dim + c], ref, 1e-5 * (std::abs(ref) + 1)) << "token " << t << " col " << c;
    }
}

// Bad graphs are refused with a message: k beyond the experts, a stacked weight whose rows are not a
// multiple of the experts, ids that are host memory.
TEST_P(MoeOps, ShapesOutsideTheRulesAreRefused) {
  const uint32_t E = 6;
  Buffer logits = upload(random(E)), ids = zeros(8), weights = zeros(8);
  sl_error err{};
  EXPECT_NE(ops().moe_route(logits.get(), 1, E, nullptr, route_params(E + 1, SL_ROUTE_SOFTMAX_TOPK, true), ids.get(), weights.get(), &err),
            SL_OK);
  EXPECT_STRNE(err.message, "");
  auto w = make_weight(SL_DTYPE_F32, 7 * 4, 8);
  Buffer x = upload(random(8)), out = zeros(64);
  err = {};
  EXPECT_NE(ops().matmul_id(x.get(), 1, w.get(), E, ids.get(), 1, 2, out.get(), &err), SL_OK);
  EXPECT_STRNE(err.message, "");
}

// A table of ABI 2.4 (a plugin built before the ops) is never given them: the host routes instead.
TEST_P(MoeOps, TheHostOffersTheOpsOnlyToTablesOfTwoPointFive) {
  auto w = make_weight(SL_DTYPE_F32, 4 * 3, 8);
  ASSERT_TRUE(runs(4, route_params(2, SL_ROUTE_SOFTMAX_TOPK, true), *w.get()));
  sl_backend_api older = *api();
  older.abi_version = SL_ABI_VERSION_OF(2, 4);
  auto handle = BackendHandle::open(&older, GetParam().name, GetParam().device, 1, GetParam().options);
  ASSERT_TRUE(handle.ok()) << handle.message();
  const sl_weight stacked = *w.get();
  EXPECT_FALSE((*handle)->runs_device_routing(4, route_params(2, SL_ROUTE_SOFTMAX_TOPK, true), {&stacked, 1}));
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Backend, MoeOps, ::testing::ValuesIn(backends_under_test()), backend_test_name);

}  // namespace sluice::test
