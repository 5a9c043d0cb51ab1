// Mixture-of-Experts row movement against the host's arithmetic:
// - GET_ROWS: every row an exact copy of the source row it names, repeats and any order allowed;
// - SCATTER_ADD_ROWS: each destination row the source rows that name it, weighted and added in order
//   (a float32 multiply and add a term: within (2·terms + 1) units of rounding of the magnitudes), rows
//   no index names untouched (bit for bit);
// - COPY_COLUMNS: the named columns of every output row an exact copy of its source row's, the other
//   columns untouched (bit for bit); refuses columns or rows that do not fit;
// - GET_ROWS and SCATTER_ADD_ROWS refuse a row index outside their tensors with an error status instead of touching memory.
#include <cmath>
#include <string>
#include <vector>

#include "conformance/runner.h"
#include "plugin/plugin_registry.h"

namespace sluice::conformance {
namespace {

std::vector<int32_t> random_rows(std::mt19937& rng, uint32_t n, uint32_t n_rows) {
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n_rows) - 1);
  std::vector<int32_t> rows(n);
  for (auto& r : rows) r = pick(rng);
  return rows;
}

void run_gather_rows(Runner& r) {
  r.op("gather_rows", Needs{}, [&] {
    for (uint32_t dim : {1u, 33u, 256u})
      for (uint32_t n : {1u, 7u, 50u}) {
        r.new_case(std::to_string(n) + " rows of " + std::to_string(dim) + " from 37");
        const uint32_t src_rows = 37;
        const auto src = r.random(std::size_t(src_rows) * dim);
        const auto rows = random_rows(r.rng(), n, src_rows);  // repeats and any order
        auto dsrc = r.upload(src), dst = r.zeros(std::size_t(n) * dim);
        sl_error err{};
        r.expect_ok(r.ops().gather_rows(dsrc.get(), rows.data(), n, dim, dst.get(), &err), err, "gather_rows");
        const auto got = r.download(dst, std::size_t(n) * dim);
        for (uint32_t i = 0; i < n; ++i)
          for (uint32_t c = 0; c < dim; ++c)
            r.check(got[std::size_t(i) * dim + c], src[std::size_t(rows[i]) * dim + c], 1e-30, "row " + std::to_string(i));
      }
    r.new_case("a row past the source");
    auto dsrc = r.zeros(4 * 8), dst = r.zeros(2 * 8);
    const int32_t bad[] = {1, 4};
    sl_error err{};
    if (r.ops().gather_rows(dsrc.get(), bad, 2, 8, dst.get(), &err) == SL_OK)
      throw CaseFailed{"gather_rows of row 4 from a 4-row source returned SL_OK"};
  });
}

void run_scatter_add_rows(Runner& r) {
  r.op("scatter_add_rows", Needs{}, [&] {
    for (uint32_t dim : {1u, 33u, 256u})
      for (uint32_t n : {1u, 7u, 50u}) {
        r.new_case(std::to_string(n) + " rows of " + std::to_string(dim) + " into 19");
        const uint32_t dst_rows = 19;
        const auto src = r.random(std::size_t(n) * dim), dst0 = r.random(std::size_t(dst_rows) * dim);
        const auto weights = r.random(n, 0.5f, 0.25f);
        const auto rows = random_rows(r.rng(), n, dst_rows);  // repeats: later rows add to earlier sums
        auto dsrc = r.upload(src), dst = r.upload(dst0);
        sl_error err{};
        r.expect_ok(r.ops().scatter_add_rows(dsrc.get(), rows.data(), weights.data(), n, dim, dst.get(), dst_rows, &err), err,
                    "scatter_add_rows");
        const auto got = r.download(dst, dst0.size());
        for (uint32_t row = 0; row < dst_rows; ++row)
          for (uint32_t c = 0; c < dim; ++c) {
            const std::size_t at = std::size_t(row) * dim + c;
            double ref = dst0[at], mag = std::abs(ref);
            uint32_t terms = 0;
            for (uint32_t i = 0; i < n; ++i) {
              if (static_cast<uint32_t>(rows[i]) != row) continue;
              const double t = double(weights[i]) * src[std::size_t(i) * dim + c];
              ref += t;
              mag += std::abs(t);
              ++terms;
            }
            const double bound = terms ? (2.0 * terms + 1.0) * std::ldexp(1.0, -24) * mag + 1e-30 : 1e-30;
            r.check(got[at], ref, bound, "row " + std::to_string(row) + (terms ? "" : " (named by no index)"));
          }
      }
    r.new_case("a row past the destination");
    auto dsrc = r.zeros(2 * 8), dst = r.zeros(4 * 8);
    const int32_t bad[] = {0, -1};
    const float w[] = {1.0f, 1.0f};
    sl_error err{};
    if (r.ops().scatter_add_rows(dsrc.get(), bad, w, 2, 8, dst.get(), 4, &err) == SL_OK)
      throw CaseFailed{"scatter_add_rows to row -1 returned SL_OK"};
  });
}

void run_copy_columns(Runner& r) {
  r.op("copy_columns", Needs{}, [&] {
    struct Case {
      uint32_t x_rows, x_cols, out_cols, src_col, dst_col, width, repeat;
    };
    // MLA's moves: K's rotary part shared by 4 heads, K's and V's halves of kv_b's per-head rows; odd widths.
    for (const Case& c : {Case{5, 24, 24, 16, 0, 8, 4}, Case{20, 32, 24, 0, 8, 16, 1}, Case{20, 32, 16, 16, 0, 16, 1},
                          Case{3, 7, 65, 2, 60, 5, 7}, Case{33, 1, 1, 0, 0, 1, 1}}) {
      const uint32_t out_rows = c.x_rows * c.repeat;
      r.new_case(std::to_string(c.width) + " columns from " + std::to_string(c.src_col) + " of [" + std::to_string(c.x_rows) + ", " +
                 std::to_string(c.x_cols) + "] to " + std::to_string(c.dst_col) + " of [" + std::to_string(out_rows) + ", " +
                 std::to_string(c.out_cols) + "], repeat " + std::to_string(c.repeat));
      const auto x = r.random(std::size_t(c.x_rows) * c.x_cols), out0 = r.random(std::size_t(out_rows) * c.out_cols);
      auto dx = r.upload(x), dout = r.upload(out0);
      sl_copy_columns_params p{sizeof(sl_copy_columns_params), c.src_col, c.dst_col, c.width, c.repeat};
      sl_error err{};
      r.expect_ok(r.ops().copy_columns(dx.get(), c.x_cols, dout.get(), out_rows, c.out_cols, p, &err), err, "copy_columns");
      const auto got = r.download(dout, out0.size());
      for (uint32_t row = 0; row < out_rows; ++row)
        for (uint32_t col = 0; col < c.out_cols; ++col) {
          const bool moved = col >= c.dst_col && col < c.dst_col + c.width;
          const float want = moved ? x[std::size_t(row / c.repeat) * c.x_cols + c.src_col + (col - c.dst_col)] : out0[std::size_t(row) * c.out_cols + col];
          r.check(got[std::size_t(row) * c.out_cols + col], want, 1e-30, "row " + std::to_string(row) + " column " + std::to_string(col));
        }
    }
    r.new_case("columns past the source");
    auto dx = r.zeros(4 * 8), dout = r.zeros(4 * 8);
    sl_copy_columns_params p{sizeof(sl_copy_columns_params), 5, 0, 4, 1};
    sl_error err{};
    if (r.ops().copy_columns(dx.get(), 8, dout.get(), 4, 8, p, &err) == SL_OK)
      throw CaseFailed{"copy_columns of columns 5..9 from 8 columns returned SL_OK"};
  });
}

}  // namespace

void run_row_moves(Runner& r) {
  run_copy_columns(r);
  run_gather_rows(r);
  run_scatter_add_rows(r);
}

}  // namespace sluice::conformance
