// HEAD_MATMUL (ABI 2.4): a product per head with that head's slice of one weight's rows — MLA's
// absorbed products with kv_b_proj. A slice is small (DeepSeek-V3's: 128 rows of 512), so each
// head's rows are dequantized once into float32 and every token of the step reuses them; heads run in
// parallel on the pool.
#include <cstddef>
#include <vector>

#include "cpu_backend.h"
#include "util/mxfp4.h"

namespace sluice::cpu {

sl_status head_matmul(sl_backend* be, const sl_buffer* x, uint32_t n_tokens, const sl_weight* w, const sl_head_matmul_params& p,
                      sl_buffer* out, sl_error* err) {
  if (mxfp4::is_mxfp4(*w) || (w->bits == 0 && !weight_dtype_supported(w)))
    return set_error(err, SL_ERR_UNSUPPORTED, "head_matmul: unsupported weight form on the CPU backend");
  const std::size_t cols = w->cols, rows = p.slice_rows, H = p.n_heads;
  const std::size_t in_w = p.transpose ? rows : cols, out_w = p.transpose ? cols : rows;
  if (x->bytes / 4 < n_tokens * H * in_w || out->bytes / 4 < n_tokens * H * out_w)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "head_matmul: x or the output is smaller than the heads need");
  const float* in = f32(x);
  float* o = f32(out);
  be->pool->parallel_for(H, 1, [&](std::size_t b, std::size_t e, unsigned) {
    std::vector<float> slice(rows * cols);
    for (std::size_t h = b; h < e; ++h) {
      for (std::size_t r = 0; r < rows; ++r)
        weight_row_to_f32(w, static_cast<uint32_t>(h * p.head_rows + p.row_offset + r), slice.data() + r * cols);
      for (std::size_t t = 0; t < n_tokens; ++t) {
        const float* xt = in + (t * H + h) * in_w;
        float* ot = o + (t * H + h) * out_w;
        if (p.transpose) {  // ot[c] = sum_r xt[r] * slice[r, c]: rows of the slice scaled and summed
          for (std::size_t c = 0; c < cols; ++c) ot[c] = 0.0f;
          for (std::size_t r = 0; r < rows; ++r) {
            const float a = xt[r];
            const float* s = slice.data() + r * cols;
            for (std::size_t c = 0; c < cols; ++c) ot[c] += a * s[c];
          }
        } else {  // ot[r] = sum_c xt[c] * slice[r, c]
          for (std::size_t r = 0; r < rows; ++r) {
            const float* s = slice.data() + r * cols;
            float sum = 0.0f;
            for (std::size_t c = 0; c < cols; ++c) sum += xt[c] * s[c];
            ot[r] = sum;
          }
        }
      }
    }
  });
  return SL_OK;
}

}  // namespace sluice::cpu
