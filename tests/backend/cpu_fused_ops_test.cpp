// The CPU backend's fused kernels (what its fusion pass runs for consecutive MATMULs of one input and
// for ADD then RMS_NORM) against the single nodes they replace, bit for bit: the goldens must not move
// with the pass. Products of every weight form and row count, with output row counts whose thread
// chunks do not start on the 4-row blocks of the decode kernel; add then rms_norm on row lengths on
// both sides of the 8- and 16-value vector steps, with weight offsets 0 and 1. (Which runs the pass
// joins: cpu_fusion_plan_test.cpp.)
#include <cstring>
#include <string>
#include <vector>

#include "backend_fixture.h"
#include "plugin/plugin_registry.h"
#include "quant/affine.h"
#include "reference.h"

namespace sluice::test {

std::vector<BackendUnderTest> backends_under_test() { return {BackendUnderTest{"cpu", binary_path("lib"), ""}}; }

namespace {

class CpuFusedOps : public BackendOpsTest {
 protected:
  struct Form {
    sl_dtype dtype;
    int bits = 0, group = 0;
  };
  std::string name(const Form& f) const {
    return f.bits ? "q" + std::to_string(f.bits) + " g" + std::to_string(f.group) : dtype_name(f.dtype);
  }
  // A weight of the form: float values rounded to the dtype, or MLX affine codes with bf16 parameters.
  DeviceWeight make(const Form& f, uint32_t rows, uint32_t cols) {
    if (!f.bits) return make_weight(f.dtype, rows, cols, 0.5f);
    const std::vector<float> w = random(std::size_t(rows) * cols, 0.5f, 0.1f);
    const std::size_t wpr = std::size_t(cols) * f.bits / 32, groups = cols / f.group;
    std::vector<uint32_t> words(rows * wpr);
    std::vector<float> scales(rows * groups), biases(rows * groups);
    for (uint32_t r = 0; r < rows; ++r)
      quant::quantize_row(w.data() + std::size_t(r) * cols, cols, f.bits, f.group, DType::kBF16, words.data() + r * wpr,
                          scales.data() + r * groups, biases.data() + r * groups);
    std::vector<std::byte> params(2 * scales.size() * 2);
    quant::store_as(DType::kBF16, scales.data(), scales.size(), params.data());
    quant::store_as(DType::kBF16, biases.data(), biases.size(), params.data() + scales.size() * 2);
    // Words and parameters in one buffer, as in a model file: the weight points in at offsets.
    std::vector<std::byte> all(words.size() * 4 + params.size());
    std::memcpy(all.data(), words.data(), words.size() * 4);
    std::memcpy(all.data() + words.size() * 4, params.data(), params.size());
    DeviceWeight d;
    d.buffer = upload_bytes(all.data(), all.size());
    sl_weight& s = d.weight;
    s.struct_size = sizeof(s);
    s.data = s.scales = s.biases = d.buffer.get();
    s.scales_offset = words.size() * 4;
    s.biases_offset = words.size() * 4 + scales.size() * 2;
    s.dtype = SL_DTYPE_U32;
    s.rows = rows;
    s.cols = cols;
    s.bits = static_cast<uint32_t>(f.bits);
    s.group_size = static_cast<uint32_t>(f.group);
    s.scale_dtype = SL_DTYPE_BF16;
    return d;
  }

  // matmul_multi of `forms` (one weight each, out rows from `rows`) against a matmul per weight.
  void expect_multi_equals_singles(const std::vector<Form>& forms, const std::vector<uint32_t>& rows, uint32_t cols,
                                   uint32_t n_rows, bool with_biases) {
    const uint32_t count = static_cast<uint32_t>(forms.size());
    std::string what = std::to_string(n_rows) + " rows of " + std::to_string(cols) + " into";
    for (uint32_t i = 0; i < count; ++i) what += " " + name(forms[i]) + "×" + std::to_string(rows[i]);
    SCOPED_TRACE(what + (with_biases ? " with biases" : ""));
    std::vector<DeviceWeight> ws, bs;
    for (uint32_t i = 0; i < count; ++i) {
      ws.push_back(make(forms[i], rows[i], cols));
      bs.push_back(make_weight(SL_DTYPE_F32, 1, rows[i], 1.0f));
    }
    auto x = upload(random(std::size_t(n_rows) * cols));
    std::vector<Buffer> fused, single;
    const sl_weight* w_ptr[4];
    const sl_weight* b_ptr[4];
    sl_buffer* o_ptr[4];
    for (uint32_t i = 0; i < count; ++i) {
      fused.push_back(zeros(std::size_t(n_rows) * rows[i]));
      single.push_back(zeros(std::size_t(n_rows) * rows[i]));
      w_ptr[i] = ws[i].get();
      b_ptr[i] = with_biases && i != 1 ? bs[i].get() : nullptr;  // a null entry among biases
      o_ptr[i] = fused[i].get();
    }
    sl_error err{};
    ASSERT_EQ(ops().matmul_multi(x.get(), n_rows, count, w_ptr, with_biases ? b_ptr : nullptr, o_ptr, &err), SL_OK) << err.message;
    for (uint32_t i = 0; i < count; ++i) {
      ASSERT_EQ(ops().matmul(x.get(), n_rows, w_ptr[i], with_biases ? b_ptr[i] : nullptr, single[i].get(), &err), SL_OK)
          << err.message;
      const auto a = download(fused[i], std::size_t(n_rows) * rows[i]), b = download(single[i], std::size_t(n_rows) * rows[i]);
      for (std::size_t k = 0; k < a.size(); ++k) ASSERT_EQ(a[k], b[k]) << "product " << i << " value " << k;
    }
  }
};

TEST_P(CpuFusedOps, MatmulMultiGivesEveryProductExactlyAsMatmul) {
  const Form f32{SL_DTYPE_F32}, f16{SL_DTYPE_F16}, bf16{SL_DTYPE_BF16};
  const Form q4{SL_DTYPE_U32, 4, 64}, q8{SL_DTYPE_U32, 8, 64}, q3{SL_DTYPE_U32, 3, 32}, q4g32{SL_DTYPE_U32, 4, 32};
  for (uint32_t n_rows : {1u, 2u, 3u, 4u, 5u, 9u}) {
    for (bool biases : {false, true}) {
      // Each form alone and as q/k/v: 70 rows split over two threads at row 35 (not a 4-row block).
      for (const Form& f : {f32, f16, bf16, q4, q8, q3}) {
        const uint32_t cols = f.bits ? 256 : 64;
        expect_multi_equals_singles({f}, {70}, cols, n_rows, biases);
        expect_multi_equals_singles({f, f, f}, {384, 128, 70}, cols, n_rows, biases);
      }
      // Rows that are not whole vectors (the scalar tails), gate/up pairs, every count to the maximum.
      expect_multi_equals_singles({bf16, f16}, {33, 7}, 70, n_rows, biases);
      expect_multi_equals_singles({f32, bf16, f16, f32}, {5, 13, 1, 131}, 13, n_rows, biases);
      // Mixed quantized forms in one call (per-module bits): activations prepared per form.
      expect_multi_equals_singles({q4, q8, q4g32, bf16}, {67, 64, 9, 130}, 256, n_rows, biases);
      if (HasFailure()) return;
    }
  }
}

TEST_P(CpuFusedOps, ProductsOfOneInputRefuseWhatMatmulWould) {
  auto w = make_weight(SL_DTYPE_F32, 8, 16), narrow = make_weight(SL_DTYPE_F32, 8, 12), bias7 = make_weight(SL_DTYPE_F32, 1, 7);
  auto x = zeros(2 * 16), out_a = zeros(2 * 8), out_b = zeros(2 * 8), small = zeros(2 * 8 - 1);
  const sl_weight* two[] = {w.get(), w.get()};
  const sl_weight* mixed_cols[] = {w.get(), narrow.get()};
  const sl_weight* bad_bias[] = {nullptr, bias7.get()};
  sl_buffer* outs[] = {out_a.get(), out_b.get(), out_a.get(), out_b.get(), out_a.get()};
  sl_buffer* too_small[] = {out_a.get(), small.get()};
  auto refused = [&](sl_status s, const sl_error& err, const char* what) {
    EXPECT_EQ(s, SL_ERR_INVALID_ARGUMENT) << what;
    EXPECT_STRNE(err.message, "") << what;
  };
  sl_error err{};
  refused(ops().matmul_multi(x.get(), 2, 2, mixed_cols, nullptr, outs, &err), err, "different cols");
  err = {};
  refused(ops().matmul_multi(x.get(), 2, 2, two, nullptr, too_small, &err), err, "output too small");
  err = {};
  refused(ops().matmul_multi(x.get(), 2, 2, two, bad_bias, outs, &err), err, "bias of the wrong length");
}

TEST_P(CpuFusedOps, AddRmsNormEqualsAddThenRmsNorm) {
  const float eps = 1e-6f;
  for (sl_dtype dtype : kWeightDtypes)
    for (auto [rows, dim] : {std::pair{1u, 1u}, {1u, 7u}, {3u, 8u}, {2u, 16u}, {5u, 24u}, {70u, 33u}, {3u, 384u}, {2u, 1000u}, {129u, 64u}})
      for (float offset : {0.0f, 1.0f}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::to_string(rows) + "x" + std::to_string(dim) + " offset " +
                     std::to_string(offset));
        auto weight = make_weight(dtype, 1, dim, 0.5f);
        const auto x = random(std::size_t(rows) * dim, 2.0f, 0.3f), delta = random(x.size(), 0.7f);
        auto fused_x = upload(x), single_x = upload(x), d = upload(delta);
        auto fused_out = zeros(x.size()), single_out = zeros(x.size());
        sl_error err{};
        ASSERT_EQ(ops().add_rms_norm(fused_x.get(), d.get(), weight.get(), offset, fused_out.get(), rows, dim, eps, &err), SL_OK)
            << err.message;
        ASSERT_EQ(ops().add(single_x.get(), d.get(), single_x.get(), x.size(), &err), SL_OK) << err.message;
        ASSERT_EQ(ops().rms_norm(single_x.get(), weight.get(), offset, single_out.get(), rows, dim, eps, &err), SL_OK)
            << err.message;
        const auto fx = download(fused_x, x.size()), sx = download(single_x, x.size());
        const auto fo = download(fused_out, x.size()), so = download(single_out, x.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
          ASSERT_EQ(fx[i], sx[i]) << "x value " << i;
          ASSERT_EQ(fo[i], so[i]) << "out value " << i;
        }
      }
}

TEST_P(CpuFusedOps, AddRmsNormRefusesAMismatchedWeightOrShortBuffers) {
  auto weight = make_weight(SL_DTYPE_F32, 1, 15);
  auto x = zeros(2 * 16), d = zeros(2 * 16), out = zeros(2 * 16), short_out = zeros(2 * 16 - 1);
  sl_error err{};
  EXPECT_NE(ops().add_rms_norm(x.get(), d.get(), weight.get(), 0.0f, out.get(), 2, 16, 1e-6f, &err), SL_OK);
  EXPECT_STRNE(err.message, "");
  auto fitting = make_weight(SL_DTYPE_F32, 1, 16);
  err = {};
  EXPECT_EQ(ops().add_rms_norm(x.get(), d.get(), fitting.get(), 0.0f, short_out.get(), 2, 16, 1e-6f, &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(err.message, "");
}

INSTANTIATE_TEST_SUITE_P(Backend, CpuFusedOps, ::testing::ValuesIn(backends_under_test()), backend_test_name);

}  // namespace
}  // namespace sluice::test
