// HEAD_MATMUL (ABI 2.4) against double-precision reference math: per head, x's head times that head's
// slice of one weight's rows, the slice transposed (as MATMUL: MLA's output out of the latent) or not
// (its query into the latent), in every plain dtype and 4- and 8-bit affine; within 2·kRel of the
// magnitudes, as MATMUL. A backend that does not take the op (before 2.4, or refusing it) is skipped:
// the host then runs MLA expanded.
#include <string>
#include <vector>

#include "conformance/runner.h"

namespace sluice::conformance {

void run_head_products(Runner& r) {
  struct Form {
    sl_dtype dtype;
    uint32_t bits;
  };
  for (const Form f : {Form{SL_DTYPE_F32, 0}, Form{SL_DTYPE_F16, 0}, Form{SL_DTYPE_BF16, 0}, Form{SL_DTYPE_U32, 4}, Form{SL_DTYPE_U32, 8}}) {
    // kv_b in miniature: 3 heads of [5 k rows | 7 v rows] over a latent of 13 (64 where quantized: whole groups).
    const uint32_t H = 3, NOPE = 5, V = 7, KL = f.bits ? 64 : 13;
    const sl_head_matmul_params k_rows{sizeof(sl_head_matmul_params), H, NOPE + V, 0, NOPE, 1};
    const sl_head_matmul_params v_rows{sizeof(sl_head_matmul_params), H, NOPE + V, NOPE, V, 0};
    const Needs needs = [&](const BackendHandle& be) {
      sl_weight w{};
      w.struct_size = sizeof(w);
      w.dtype = f.dtype;
      w.bits = f.bits;
      w.group_size = f.bits ? 32 : 0;
      w.scale_dtype = SL_DTYPE_BF16;
      w.rows = H * (NOPE + V);
      w.cols = KL;
      return be.runs_head_matmul(w, k_rows) && be.runs_head_matmul(w, v_rows) ? std::string() : std::string("unsupported");
    };
    r.op(std::string("head_matmul ") + form_name(f.dtype, f.bits), needs, [&] {
      Weight w = f.bits ? r.quant_weight(f.bits, 32, H * (NOPE + V), KL) : r.weight(f.dtype, H * (NOPE + V), KL);
      for (const sl_head_matmul_params& p : {k_rows, v_rows})
        for (uint32_t n : {1u, 9u}) {
          const uint32_t in_w = p.transpose ? p.slice_rows : KL, out_w = p.transpose ? KL : p.slice_rows;
          r.new_case(std::string(p.transpose ? "k rows (query into the latent)" : "v rows (output out of it)") + ", " + std::to_string(n) +
                     " tokens");
          const auto x = r.random(std::size_t(n) * H * in_w);
          auto in = r.upload(x), out = r.zeros(std::size_t(n) * H * out_w);
          sl_error err{};
          r.expect_ok(r.ops().head_matmul(in.get(), n, &w.w, p, out.get(), &err), err, "head_matmul");
          const auto got = r.download(out, std::size_t(n) * H * out_w);
          for (uint32_t t = 0; t < n; ++t)
            for (uint32_t h = 0; h < H; ++h)
              for (uint32_t o = 0; o < out_w; ++o) {
                double ref = 0, mag = 0;
                for (uint32_t i = 0; i < in_w; ++i) {
                  const uint32_t row = h * p.head_rows + p.row_offset + (p.transpose ? i : o), col = p.transpose ? o : i;
                  const double term = double(x[(std::size_t(t) * H + h) * in_w + i]) * w.values[std::size_t(row) * KL + col];
                  ref += term;
                  mag += std::abs(term);
                }
                r.check(got[(std::size_t(t) * H + h) * out_w + o], ref, 2 * kRel * mag + kFloor,
                        "token " + std::to_string(t) + " head " + std::to_string(h) + " out " + std::to_string(o));
              }
        }
    });
  }
}

}  // namespace sluice::conformance
