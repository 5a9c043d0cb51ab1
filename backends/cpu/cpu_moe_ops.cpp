// Row movement for Mixture-of-Experts layers: gathering the tokens routed to an expert, and adding
// the expert's weighted output back into their rows.
#include "cpu_backend.h"
#include "util/vec.h"

namespace sluice::cpu {

sl_status gather_rows(sl_backend*, const sl_buffer* src, const int32_t* rows, uint32_t n, uint32_t dim, sl_buffer* dst,
                      sl_error* err) {
  const uint64_t src_rows = src->bytes / 4 / (dim ? dim : 1);
  if (!fits(dst->bytes / 4, 0, static_cast<uint64_t>(n) * dim)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "gather_rows: destination too small");
  for (uint32_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || static_cast<uint64_t>(rows[i]) >= src_rows)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "gather_rows: row " + std::to_string(rows[i]) + " out of range");
    std::memcpy(f32(dst) + static_cast<std::size_t>(i) * dim, f32(src) + static_cast<std::size_t>(rows[i]) * dim, dim * 4ull);
  }
  return SL_OK;
}

sl_status scatter_add_rows(sl_backend*, const sl_buffer* src, const int32_t* rows, const float* weights, uint32_t n,
                           uint32_t dim, sl_buffer* dst, sl_error* err) {
  const uint64_t dst_rows = dst->bytes / 4 / (dim ? dim : 1);
  if (!fits(src->bytes / 4, 0, static_cast<uint64_t>(n) * dim)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "scatter_add_rows: source too small");
  for (uint32_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || static_cast<uint64_t>(rows[i]) >= dst_rows)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "scatter_add_rows: row " + std::to_string(rows[i]) + " out of range");
    axpy(weights[i], f32(src) + static_cast<std::size_t>(i) * dim, f32(dst) + static_cast<std::size_t>(rows[i]) * dim, dim);
  }
  return SL_OK;
}

}  // namespace sluice::cpu
