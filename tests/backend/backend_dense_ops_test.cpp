// Backend ops other than attention, each against a naive double-precision reference. Weights in
// f16/bf16 are rounded once on the host and the reference uses the rounded values, so the bounds
// measure the op's arithmetic, not the storage format.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "backend_fixture.h"

namespace sluice::test {
namespace {

constexpr double kRel = 1e-5;    // float32 arithmetic against a double reference
constexpr double kFloor = 1e-6;  // absolute floor for values near zero

std::string shape_trace(const char* what, sl_dtype dtype, uint32_t a, uint32_t b) {
  return std::string(what) + " " + dtype_name(dtype) + " " + std::to_string(a) + "x" + std::to_string(b);
}

// ---- device, memory ----------------------------------------------------------------------------

TEST_P(BackendOpsTest, DeviceInfoNamesTheDeviceAndRefusesABadIndex) {
  EXPECT_NE(backend().device().name[0], '\0');
  EXPECT_NE(backend().device().kind[0], '\0');
  ASSERT_NE(api()->device_count, nullptr);
  const uint32_t count = api()->device_count();
  EXPECT_GE(count, 1u);
  sl_device_info info{};
  info.struct_size = sizeof(info);
  sl_error err{};
  EXPECT_NE(api()->device_info(count, &info, &err), SL_OK);
  EXPECT_STRNE(err.message, "");
}

TEST_P(BackendOpsTest, UploadAndDownloadRoundTripAtAnOffset) {
  auto buffer = backend().alloc(64);
  ASSERT_TRUE(buffer);
  const char text[] = "sluice backend";
  ASSERT_TRUE(backend().upload(*buffer, 17, text, sizeof(text)));
  char back[sizeof(text)] = {};
  ASSERT_TRUE(backend().download(*buffer, 17, back, sizeof(text)));
  EXPECT_STREQ(back, text);
}

TEST_P(BackendOpsTest, TransfersPastTheEndAreErrorsEvenWhenOffsetsOverflow) {
  auto buffer = backend().alloc(64);
  ASSERT_TRUE(buffer);
  char bytes[16] = {};
  EXPECT_FALSE(backend().upload(*buffer, 60, bytes, 8));
  EXPECT_FALSE(backend().download(*buffer, 0, bytes, 65));
  // offset + bytes wraps around 2^64: must still be refused.
  const auto status = backend().upload(*buffer, std::numeric_limits<uint64_t>::max() - 3, bytes, 8);
  EXPECT_FALSE(status);
  EXPECT_FALSE(status.message().empty());
  EXPECT_FALSE(backend().download(*buffer, std::numeric_limits<uint64_t>::max(), bytes, 2));
}

TEST_P(BackendOpsTest, WrappedHostMemoryIsReadableByOps) {
  std::vector<float> host = random(37);
  auto wrapped = backend().wrap_host(host.data(), host.size() * 4);
  ASSERT_TRUE(wrapped) << wrapped.message();
  auto out = zeros(37);
  sl_error err{};
  ASSERT_EQ(ops().copy(wrapped->get(), 0, out.get(), 0, 37, &err), SL_OK) << err.message;
  EXPECT_EQ(download(out, 37), host);
}

// A MoE layer's row moves: the host's index and weight arrays are read during the call only (the
// OpenCL backend copies them and does not wait for the queue), so the caller may reuse them at once.
TEST_P(BackendOpsTest, RowMovesReadTheirHostArraysDuringTheCallOnly) {
  constexpr uint32_t dim = 40;
  const std::vector<float> src = random(4 * dim);
  auto s = upload(src);
  auto gathered = zeros(3 * dim);
  auto dst = zeros(4 * dim);
  sl_error err{};
  std::vector<int32_t> rows = {2, 0, 3};
  std::vector<float> weights = {0.5f, 2.0f, -1.0f};
  ASSERT_EQ(ops().gather_rows(s.get(), rows.data(), 3, dim, gathered.get(), &err), SL_OK) << err.message;
  rows = {3, 1, 0};  // the gather's rows are gone: these are the scatter's
  ASSERT_EQ(ops().scatter_add_rows(s.get(), rows.data(), weights.data(), 3, dim, dst.get(), 4, &err), SL_OK) << err.message;
  rows = {0, 0, 0};
  weights = {1.0f, 1.0f, 1.0f};
  ASSERT_EQ(ops().scatter_add_rows(gathered.get(), rows.data(), weights.data(), 3, dim, dst.get(), 4, &err), SL_OK) << err.message;
  rows = {7, 7, 7};  // out of range: nothing may read these any more
  weights = {1e9f, 1e9f, 1e9f};
  std::vector<float> want(4 * dim, 0.0f);
  for (uint32_t c = 0; c < dim; ++c) {
    want[3 * dim + c] += 0.5f * src[0 * dim + c];
    want[1 * dim + c] += 2.0f * src[1 * dim + c];
    want[0 * dim + c] += -1.0f * src[2 * dim + c];
    want[0 * dim + c] += src[2 * dim + c];
    want[0 * dim + c] += src[0 * dim + c];
    want[0 * dim + c] += src[3 * dim + c];
  }
  const auto got = download(dst, 4 * dim);
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::abs(want[i]))) << i;
}

TEST_P(BackendOpsTest, SupportsNodeAnswersForEveryOpAndRefusesUnknownOnes) {
  auto w = make_weight(SL_DTYPE_F32, 8, 16);
  sl_tensor tensors[3]{};
  for (auto& t : tensors) {
    t.struct_size = sizeof(t);
    t.kind = SL_TENSOR_BUFFER;
    t.dtype = SL_DTYPE_F32;
    t.rows = 1;
    t.cols = 16;
  }
  tensors[1].kind = SL_TENSOR_WEIGHT;
  tensors[1].weight = w.get();
  tensors[1].rows = 8;
  sl_node n{};
  n.struct_size = sizeof(n);
  std::fill(std::begin(n.inputs), std::end(n.inputs), SL_NO_TENSOR);
  std::fill(std::begin(n.outputs), std::end(n.outputs), SL_NO_TENSOR);
  n.inputs[0] = 0;
  n.inputs[1] = 1;
  n.outputs[0] = 2;
  sl_node_query q{};
  q.struct_size = sizeof(q);
  q.node = &n;
  q.tensors = tensors;
  q.n_tensors = 3;
  for (uint32_t op = 0; op < SL_OP_COUNT + 3; ++op) {
    n.op = op;
    const int answer = api()->supports_node(be(), &q);
    EXPECT_TRUE(answer == 0 || answer == 1) << "op " << op;
  }
  n.op = SL_OP_MATMUL;
  EXPECT_EQ(api()->supports_node(be(), &q), 1) << "f32 matmul is the baseline every backend runs";
  n.op = SL_OP_COUNT + 1000;
  EXPECT_EQ(api()->supports_node(be(), &q), 0) << "an op from a later minor is refused";
  n.op = SL_OP_NONE;
  EXPECT_EQ(api()->supports_node(be(), &q), 0);
}

// ---- embed -------------------------------------------------------------------------------------

TEST_P(BackendOpsTest, EmbedCopiesTableRowsOfEveryDtype) {
  for (sl_dtype dtype : kWeightDtypes) {
    for (uint32_t cols : {13u, 64u}) {
      SCOPED_TRACE(shape_trace("embed", dtype, 40, cols));
      auto table = make_weight(dtype, 40, cols);
      const std::vector<int32_t> ids = {0, 39, 7, 7, 20};
      auto out = zeros(ids.size() * cols);
      sl_error err{};
      ASSERT_EQ(ops().embed(table.get(), ids.data(), 5, out.get(), &err), SL_OK) << err.message;
      const auto got = download(out, ids.size() * cols);
      for (std::size_t i = 0; i < ids.size(); ++i)
        for (uint32_t c = 0; c < cols; ++c)
          ASSERT_EQ(got[i * cols + c], table.values[ids[i] * cols + c]) << "token " << i << " col " << c;
    }
  }
}

TEST_P(BackendOpsTest, EmbedOfAnIdOutsideTheVocabularyIsAnError) {
  auto table = make_weight(SL_DTYPE_F32, 10, 8);
  auto out = zeros(16);
  for (int32_t bad : {10, -1, 1 << 30}) {
    const int32_t ids[2] = {3, bad};
    sl_error err{};
    EXPECT_EQ(ops().embed(table.get(), ids, 2, out.get(), &err), SL_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::string(err.message).find(std::to_string(bad)), std::string::npos) << err.message;
  }
}

// ---- norms -------------------------------------------------------------------------------------

TEST_P(BackendOpsTest, RmsNormMatchesReferenceWithWeightOffset) {
  const float eps = 1e-6f;
  for (sl_dtype dtype : kWeightDtypes) {
    for (auto [rows, dim] : {std::pair{1u, 7u}, {3u, 64u}, {70u, 33u}, {2u, 1000u}}) {
      for (float offset : {0.0f, 1.0f}) {
        SCOPED_TRACE(shape_trace("rms_norm", dtype, rows, dim) + " offset " + std::to_string(offset));
        auto weight = make_weight(dtype, 1, dim, 0.5f);
        const auto x = random(static_cast<std::size_t>(rows) * dim, 2.0f, 0.3f);
        auto in = upload(x);
        auto out = zeros(x.size());
        sl_error err{};
        ASSERT_EQ(ops().rms_norm(in.get(), weight.get(), offset, out.get(), rows, dim, eps, &err), SL_OK)
            << err.message;
        const auto got = download(out, x.size());
        for (uint32_t r = 0; r < rows; ++r) {
          double ss = 0;
          for (uint32_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
          const double inv = 1.0 / std::sqrt(ss / dim + eps);
          for (uint32_t i = 0; i < dim; ++i) {
            const double ref = x[r * dim + i] * inv * (static_cast<double>(weight.values[i]) + offset);
            ASSERT_NEAR(got[r * dim + i], ref, 2 * kRel * std::abs(ref) + kFloor) << "row " << r << " col " << i;
          }
        }
      }
    }
  }
}

// ---- matmul ------------------------------------------------------------------------------------

TEST_P(BackendOpsTest, MatmulMatchesReferenceForEveryDtypeShapeAndRowCount) {
  struct Shape {
    uint32_t out, in;
  };
  // Odd sizes (not multiples of 8/16), and one large enough for several conversion blocks.
  const Shape shapes[] = {{7, 13}, {33, 70}, {64, 129}, {300, 4100}};
  // <= 8 rows: the few-rows (matvec) path of the CPU backend; more: its GEMM path (9: a register tile
  // of 8 and one more; 17: two and one, and on the large shape several blocks of converted rows).
  const uint32_t row_counts[] = {1, 3, 4, 5, 9, 17};
  for (sl_dtype dtype : kWeightDtypes) {
    for (const auto& shape : shapes) {
      auto w = make_weight(dtype, shape.out, shape.in, 0.5f);
      auto bias = make_weight(dtype == SL_DTYPE_BF16 ? SL_DTYPE_F32 : dtype, 1, shape.out, 1.0f);
      for (uint32_t n_rows : row_counts) {
        if (shape.in > 1000 && n_rows != 1 && n_rows != 5 && n_rows != 17) continue;  // the big shape: a few per path
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE(shape_trace("matmul", dtype, shape.out, shape.in) + " rows " + std::to_string(n_rows) +
                       (with_bias ? " bias" : ""));
          const auto x = random(static_cast<std::size_t>(n_rows) * shape.in);
          auto in = upload(x);
          auto out = zeros(static_cast<std::size_t>(n_rows) * shape.out);
          sl_error err{};
          ASSERT_EQ(ops().matmul(in.get(), n_rows, w.get(), with_bias ? bias.get() : nullptr, out.get(), &err),
                    SL_OK)
              << err.message;
          const auto got = download(out, static_cast<std::size_t>(n_rows) * shape.out);
          for (uint32_t t = 0; t < n_rows; ++t) {
            for (uint32_t r = 0; r < shape.out; ++r) {
              double ref = with_bias ? bias.values[r] : 0.0, magnitude = std::abs(ref);
              for (uint32_t c = 0; c < shape.in; ++c) {
                const double term = static_cast<double>(x[t * shape.in + c]) * w.values[r * shape.in + c];
                ref += term;
                magnitude += std::abs(term);
              }
              ASSERT_NEAR(got[t * shape.out + r], ref, kRel * magnitude + kFloor) << "row " << t << " out " << r;
            }
          }
        }
      }
    }
  }
}

TEST_P(BackendOpsTest, MatmulWithTooSmallActivationBuffersIsAnError) {
  auto w = make_weight(SL_DTYPE_F32, 8, 16);
  auto x = zeros(3 * 16);
  auto small_out = zeros(3 * 8 - 1);
  auto out = zeros(3 * 8);
  sl_error err{};
  EXPECT_EQ(ops().matmul(x.get(), 3, w.get(), nullptr, small_out.get(), &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(err.message, "");
  err = {};
  EXPECT_EQ(ops().matmul(x.get(), 4, w.get(), nullptr, out.get(), &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(err.message, "");
}

TEST_P(BackendOpsTest, MatmulWithMismatchedBiasIsAnError) {
  auto w = make_weight(SL_DTYPE_F32, 8, 16);
  auto bias = make_weight(SL_DTYPE_F32, 1, 7);
  auto x = zeros(16);
  auto out = zeros(8);
  sl_error err{};
  EXPECT_EQ(ops().matmul(x.get(), 1, w.get(), bias.get(), out.get(), &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(err.message, "");
}

TEST_P(BackendOpsTest, UnsupportedWeightFormIsRefusedNotComputed) {
  // A 4-bit quantized weight: a backend that does not say it supports it must refuse it cleanly.
  sl_weight form{};
  form.struct_size = sizeof(form);
  form.dtype = SL_DTYPE_U32;
  form.bits = 4;
  form.group_size = 16;
  form.rows = 8;
  form.cols = 16;
  if (backend().runs_weight(SL_OP_MATMUL, form)) GTEST_SKIP() << "this backend runs 4-bit weights";
  auto words = zeros(8 * 2);
  sl_weight w{};
  w.struct_size = sizeof(w);
  w.data = words.get();
  w.dtype = SL_DTYPE_U32;
  w.rows = 8;
  w.cols = 16;
  w.bits = 4;
  w.group_size = 16;
  auto x = zeros(16);
  auto out = zeros(8);
  sl_error err{};
  EXPECT_EQ(ops().matmul(x.get(), 1, &w, nullptr, out.get(), &err), SL_ERR_UNSUPPORTED);
  EXPECT_STRNE(err.message, "");
}

// ---- rope --------------------------------------------------------------------------------------

TEST_P(BackendOpsTest, RopeRotatesAtTheBatchPositions) {
  const std::vector<int32_t> positions = {0, 1, 17, 300, 2999};
  const std::vector<int32_t> slots(positions.size(), 0);
  begin_batch(positions, slots, 1, 1, {0});
  const uint32_t n_heads = 3, head_dim = 10;
  for (uint32_t style : {uint32_t{SL_ROPE_NEOX}, uint32_t{SL_ROPE_INTERLEAVED}}) {
    for (uint32_t rotary_dim : {10u, 6u, 0u}) {
      for (float factor : {1.0f, 1.2f}) {
        SCOPED_TRACE("style " + std::to_string(style) + " rotary_dim " + std::to_string(rotary_dim) + " factor " +
                     std::to_string(factor));
        std::vector<float> inv_freq(std::max(1u, rotary_dim / 2));
        for (uint32_t i = 0; i < rotary_dim / 2; ++i)
          inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / rotary_dim));
        const auto x = random(positions.size() * n_heads * head_dim);
        auto buf = upload(x);
        sl_error err{};
        ASSERT_EQ(ops().rope(buf.get(), n_heads, head_dim, rotary_dim, inv_freq.data(), factor, style, &err),
                  SL_OK)
            << err.message;
        const auto got = download(buf, x.size());
        const uint32_t half = rotary_dim / 2;
        for (std::size_t t = 0; t < positions.size(); ++t) {
          for (uint32_t h = 0; h < n_heads; ++h) {
            const float* v = x.data() + (t * n_heads + h) * head_dim;
            std::vector<double> ref(v, v + head_dim);
            for (uint32_t i = 0; i < half; ++i) {
              // The angle as a float32 product (as the model's reference computes it), then exact trig.
              const double angle = static_cast<float>(positions[t]) * inv_freq[i];
              const double c = std::cos(angle) * factor, s = std::sin(angle) * factor;
              const uint32_t a = style == SL_ROPE_NEOX ? i : 2 * i, b = style == SL_ROPE_NEOX ? i + half : 2 * i + 1;
              ref[a] = v[a] * c - v[b] * s;
              ref[b] = v[b] * c + v[a] * s;
            }
            for (uint32_t d = 0; d < head_dim; ++d)
              ASSERT_NEAR(got[(t * n_heads + h) * head_dim + d], ref[d], 4 * kRel * (std::abs(v[d]) + 1.0))
                  << "token " << t << " head " << h << " dim " << d;
          }
        }
      }
    }
  }
}

TEST_P(BackendOpsTest, RopeWithABadRotaryDimIsAnError) {
  begin_batch({0, 1}, {0, 0}, 1, 1, {0});
  auto buf = zeros(2 * 10);
  const std::vector<float> inv_freq(8, 1.0f);
  for (uint32_t rotary_dim : {7u, 12u}) {
    sl_error err{};
    EXPECT_EQ(ops().rope(buf.get(), 1, 10, rotary_dim, inv_freq.data(), 1.0f, SL_ROPE_NEOX, &err),
              SL_ERR_INVALID_ARGUMENT)
        << rotary_dim;
    EXPECT_STRNE(err.message, "");
  }
}

// ---- elementwise -------------------------------------------------------------------------------

double silu(double g) { return g / (1.0 + std::exp(-g)); }
double gelu_tanh(double g) { return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))); }
double gelu(double g) { return 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0))); }
double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

TEST_P(BackendOpsTest, GatedActivationsMatchReference) {
  for (uint32_t act : {uint32_t{SL_ACT_SILU}, uint32_t{SL_ACT_GELU_TANH}, uint32_t{SL_ACT_GELU}, uint32_t{SL_ACT_SIGMOID}}) {
    for (uint64_t n : {1u, 1001u, 9000u}) {
      SCOPED_TRACE("activation " + std::to_string(act) + " n " + std::to_string(n));
      const auto g = random(n, 3.0f), u = random(n);
      auto gate = upload(g), up = upload(u), out = zeros(n);
      sl_error err{};
      ASSERT_EQ(ops().gated_activation(act, gate.get(), up.get(), out.get(), n, &err), SL_OK) << err.message;
      const auto got = download(out, n);
      for (uint64_t i = 0; i < n; ++i) {
        const double a = act == SL_ACT_SILU        ? silu(g[i])
                         : act == SL_ACT_GELU_TANH ? gelu_tanh(g[i])
                         : act == SL_ACT_SIGMOID   ? sigmoid(g[i])
                                                   : gelu(g[i]);
        const double ref = a * u[i];
        ASSERT_NEAR(got[i], ref, 4 * kRel * (std::abs(g[i] * u[i]) + std::abs(ref)) + kFloor) << "value " << i;
      }
    }
  }
}

TEST_P(BackendOpsTest, UnknownActivationIsAnError) {
  auto a = zeros(4), out = zeros(4);
  sl_error err{};
  EXPECT_EQ(ops().gated_activation(99, a.get(), a.get(), out.get(), 4, &err), SL_ERR_UNSUPPORTED);
  EXPECT_STRNE(err.message, "");
}

TEST_P(BackendOpsTest, AddIsExactFloatArithmetic) {
  for (uint64_t n : {1u, 13u, 4099u}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto a = random(n), b = random(n);
    auto da = upload(a), db = upload(b), out = zeros(n);
    sl_error err{};
    ASSERT_EQ(ops().add(da.get(), db.get(), out.get(), n, &err), SL_OK) << err.message;
    auto sum = download(out, n);
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], a[i] + b[i]) << i;
    // out may alias a.
    ASSERT_EQ(ops().add(da.get(), db.get(), da.get(), n, &err), SL_OK) << err.message;
    EXPECT_EQ(download(da, n), sum);
  }
}

TEST_P(BackendOpsTest, CopyMovesARangeBetweenOffsets) {
  const auto src = random(50);
  auto s = upload(src), d = zeros(40);
  sl_error err{};
  ASSERT_EQ(ops().copy(s.get(), 11, d.get(), 5, 23, &err), SL_OK) << err.message;
  const auto got = download(d, 40);
  for (int i = 0; i < 40; ++i) {
    const float want = (i >= 5 && i < 28) ? src[i - 5 + 11] : 0.0f;
    ASSERT_EQ(got[i], want) << i;
  }
}

TEST_P(BackendOpsTest, CopyPastABuffersEndIsAnErrorEvenWhenOffsetsOverflow) {
  auto s = zeros(16), d = zeros(8);
  struct Case {
    uint64_t src_offset, dst_offset, n;
  };
  const Case cases[] = {{0, 0, 9}, {10, 0, 7}, {0, 1, 8}, {uint64_t{1} << 62, 0, 4}, {0, (uint64_t{1} << 62) - 1, 2},
                        {0, 0, std::numeric_limits<uint64_t>::max()}};
  for (const auto& c : cases) {
    sl_error err{};
    EXPECT_EQ(ops().copy(s.get(), c.src_offset, d.get(), c.dst_offset, c.n, &err), SL_ERR_INVALID_ARGUMENT)
        << c.src_offset << " " << c.dst_offset << " " << c.n;
    EXPECT_STRNE(err.message, "");
  }
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Backend, BackendOpsTest, ::testing::ValuesIn(backends_under_test()), backend_test_name);

}  // namespace sluice::test
