// The runs of nodes backends join into one launch (their fusion passes), against reference math with
// the bounds of the nodes they stand for:
// - products of one input (consecutive MATMULs of one x): every output within matmul's bound (run_matmul derives it: float32 sums, or f16
//   inputs for products of more than 8 rows on a device with matrix units), for every weight form,
//   1 to 4 products whose output rows are not multiples of 4, with and without biases (NULL entries
//   among them), decode- and prefill-sized row counts, and weights of different forms in one call.
// - ADD in place then RMS_NORM of the sum: the sum x + delta exact (one float addition, as add is
//   checked), the output within rms_norm's bound of the RMSNorm of that sum, with weight offsets 0 and 1.
#include <cmath>
#include <string>
#include <vector>

#include "conformance/runner.h"
#include "plugin/plugin_registry.h"

namespace sluice::conformance {
namespace {

constexpr uint32_t kMaxProducts = 4;  // q/k/v and gate/up: the most products of one input a layer makes

struct Form {
  sl_dtype dtype;
  uint32_t bits = 0, group = 0;
};

// One matmul_multi call of the forms' weights (out rows `rows`, `cols` in) on n_rows random rows.
void check_multi(Runner& r, const std::vector<Form>& forms, const std::vector<uint32_t>& rows, uint32_t cols, uint32_t n_rows,
                 bool with_biases, bool matrix_units) {
  const uint32_t count = static_cast<uint32_t>(forms.size());
  std::string what = std::to_string(n_rows) + " rows of " + std::to_string(cols) + " into";
  for (uint32_t i = 0; i < count; ++i) what += std::string(" ") + form_name(forms[i].dtype, forms[i].bits) + "x" + std::to_string(rows[i]);
  r.new_case(what + (with_biases ? " biases" : ""));
  std::vector<Weight> ws, bs;
  std::vector<Buffer> outs;
  const sl_weight* w_ptr[kMaxProducts];
  const sl_weight* b_ptr[kMaxProducts];
  sl_buffer* o_ptr[kMaxProducts];
  for (uint32_t i = 0; i < count; ++i) {
    const Form& f = forms[i];
    ws.push_back(f.bits ? r.quant_weight(f.bits, f.group, rows[i], cols) : r.weight(f.dtype, rows[i], cols));
    bs.push_back(r.weight(SL_DTYPE_F32, 1, rows[i], 1.0f));
    outs.push_back(r.zeros(std::size_t(n_rows) * rows[i]));
  }
  for (uint32_t i = 0; i < count; ++i) {  // the vectors are complete: their elements stay put
    w_ptr[i] = &ws[i].w;
    b_ptr[i] = with_biases && i % 2 == 0 ? &bs[i].w : nullptr;
    o_ptr[i] = outs[i].get();
  }
  const auto x = r.random(std::size_t(n_rows) * cols);
  auto in = r.upload(x);
  sl_error err{};
  r.expect_ok(r.ops().matmul_multi(in.get(), n_rows, count, w_ptr, with_biases ? b_ptr : nullptr, o_ptr, &err), err,
              "matmul_multi");
  for (uint32_t i = 0; i < count; ++i) {
    // f16 activations on matrix units: prefill-sized products, and 4-bit batches (conformance.cpp's matmul).
    const bool f16_inputs = matrix_units && (n_rows > 8 || (forms[i].bits == 4 && n_rows >= 2));
    const double rel = f16_inputs ? std::ldexp(1.0, -10) + 2 * kRel : 2 * kRel;
    const uint32_t out_f = rows[i];
    const auto got = r.download(outs[i], std::size_t(n_rows) * out_f);
    for (uint32_t t = 0; t < n_rows; ++t)
      for (uint32_t o = 0; o < out_f; ++o) {
        double ref = b_ptr[i] ? bs[i].values[o] : 0.0, mag = std::abs(ref);
        for (uint32_t c = 0; c < cols; ++c) {
          const double term = double(x[std::size_t(t) * cols + c]) * ws[i].values[std::size_t(o) * cols + c];
          ref += term;
          mag += std::abs(term);
        }
        r.check(got[std::size_t(t) * out_f + o], ref, rel * mag + kFloor,
                "product " + std::to_string(i) + " row " + std::to_string(t) + " out " + std::to_string(o));
      }
  }
}

// Each form's matmul supported.
Needs needs_matmul_multi(const std::vector<Form>& forms) {
  return [forms](const BackendHandle& be) -> std::string {
    for (const Form& f : forms)
      if (!weight_form(SL_OP_MATMUL, f.dtype, f.bits)(be).empty()) return "unsupported";
    return "";
  };
}

void run_matmul_multi(Runner& r) {
  const bool quick = r.options().quick;
  const std::vector<Form> forms = {{SL_DTYPE_F32}, {SL_DTYPE_F16}, {SL_DTYPE_BF16}, {SL_DTYPE_U32, 3, 32}, {SL_DTYPE_U32, 4, 64},
                                   {SL_DTYPE_U32, 8, 64}};
  // Counts 1 to 4 (q/k/v, gate/up and the most the ABI allows), output rows that are not multiples of 4.
  const std::vector<std::vector<uint32_t>> row_sets = {{7}, {33, 13}, {70, 9, 9}, {13, 1, 33, 5}};
  std::vector<uint32_t> row_counts = {1, 3, 9};
  if (!quick) row_counts.push_back(40);
  for (const Form& f : forms) {
    r.op(std::string("matmul_multi ") + form_name(f.dtype, f.bits), needs_matmul_multi({f}), [&] {
      const bool matrix_units = r.matrix_units();  // of this pass's backend
      const uint32_t cols = f.bits ? 128 : 70;
      for (uint32_t n_rows : row_counts)
        for (const auto& rows : row_sets)
          for (bool biases : {false, true})
            check_multi(r, std::vector<Form>(rows.size(), f), rows, cols, n_rows, biases, matrix_units);
      if (!quick)  // q/k/v of a small model, at decode and prefill sizes
        for (uint32_t n_rows : {1u, 40u})
          check_multi(r, {f, f, f}, {300, 100, 100}, f.bits ? 512 : 1024, n_rows, true, matrix_units);
    });
  }
  // Different forms in one call (a per-module quantization may give q and v other bits).
  const std::vector<Form> mixed = {{SL_DTYPE_U32, 4, 64}, {SL_DTYPE_U32, 8, 64}, {SL_DTYPE_F16}, {SL_DTYPE_BF16}};
  r.op("matmul_multi mixed forms", needs_matmul_multi(mixed), [&] {
    const bool matrix_units = r.matrix_units();
    for (uint32_t n_rows : row_counts)
      for (bool biases : {false, true}) check_multi(r, mixed, {33, 9, 70, 1}, 128, n_rows, biases, matrix_units);
  });
}

void run_add_rms_norm(Runner& r) {
  for (sl_dtype d : {SL_DTYPE_F32, SL_DTYPE_F16, SL_DTYPE_BF16}) {
    const Needs needs = weight_form(SL_OP_RMS_NORM, d, 0);
    r.op(std::string("add_rms_norm ") + form_name(d, 0), needs, [&] {
      std::vector<std::pair<uint32_t, uint32_t>> shapes = {{1, 7}, {3, 64}, {70, 33}, {2, 1000}};
      if (!r.options().quick) shapes.push_back({5, 4096});
      for (auto [rows, dim] : shapes)
        for (float offset : {0.0f, 1.0f}) {
          r.new_case(std::to_string(rows) + "x" + std::to_string(dim) + " offset " + std::to_string(int(offset)));
          Weight w = r.weight(d, 1, dim, 0.5f);
          const auto x = r.random(std::size_t(rows) * dim, 2.0f, 0.3f), delta = r.random(x.size(), 0.7f);
          auto dx = r.upload(x), dd = r.upload(delta), out = r.zeros(x.size());
          sl_error err{};
          r.expect_ok(r.ops().add_rms_norm(dx.get(), dd.get(), &w.w, offset, out.get(), rows, dim, 1e-6f, &err), err,
                      "add_rms_norm");
          const auto got_x = r.download(dx, x.size()), got = r.download(out, x.size());
          for (uint32_t row = 0; row < rows; ++row) {
            std::vector<float> sum(dim);
            double ss = 0;
            for (uint32_t i = 0; i < dim; ++i) {
              sum[i] = x[row * dim + i] + delta[row * dim + i];  // the one rounding add makes
              r.check(got_x[row * dim + i], sum[i], 1e-30, "sum row " + std::to_string(row));
              ss += double(sum[i]) * sum[i];
            }
            const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
            for (uint32_t i = 0; i < dim; ++i) {
              const double ref = sum[i] * inv * (double(w.values[i]) + offset);
              r.check(got[row * dim + i], ref, 2 * kRel * std::abs(ref) + kFloor, "row " + std::to_string(row));
            }
          }
        }
    });
  }
}

}  // namespace

void run_fused(Runner& r) {
  run_matmul_multi(r);
  run_add_rms_norm(r);
}

}  // namespace sluice::conformance
