// Matrix products with weights stored [out, in] in f32, f16 or bf16, used in place.
// Few rows (decode): each thread takes a range of output features and streams their weight rows once,
// reusing each row for every activation row — decode is bound by reading the weights.
// Many rows (prefill): weights are converted to float32 a block of rows at a time into per-call
// scratch, and OpenBLAS multiplies the block — prefill is bound by arithmetic, and the conversion
// is paid once per block for all the batch's rows. No float32 copy of the model is ever kept.
#include <algorithm>
#include <vector>

#include <cblas.h>

#include "cpu_backend.h"
#include "quant_kernels.h"
#include "util/vec.h"

namespace sluice::cpu {
namespace {

constexpr uint32_t kMatvecMaxRows = 4;          // up to this many activation rows: the streaming path
constexpr std::size_t kBlockFloats = 1u << 20;  // float32 scratch per GEMM block (4 MiB)

float dot_weight_row(const sl_weight* w, uint32_t r, const float* x) {
  const std::byte* base = weight_data(w);
  const std::size_t cols = w->cols, off = static_cast<std::size_t>(r) * cols;
  switch (w->dtype) {
    case SL_DTYPE_BF16: return dot_bf16(reinterpret_cast<const uint16_t*>(base) + off, x, cols);
    case SL_DTYPE_F16: return dot_f16(reinterpret_cast<const uint16_t*>(base) + off, x, cols);
    default: return dot_f32(reinterpret_cast<const float*>(base) + off, x, cols);
  }
}

void matvec(sl_backend* be, const float* x, uint32_t n_rows, const sl_weight* w, float* out) {
  const std::size_t n_out = w->rows, cols = w->cols;
  be->pool->parallel_for(n_out, 64, [&](std::size_t b, std::size_t e, unsigned) {
    std::size_t r = b;
#ifdef SLUICE_CPU_AVX2
    // Four rows at a time where the row length allows whole vectors.
    if (cols % 8 == 0 && (w->dtype == SL_DTYPE_BF16 || w->dtype == SL_DTYPE_F16)) {
      const auto* base = reinterpret_cast<const uint16_t*>(weight_data(w));
      for (; r + 4 <= e; r += 4) {
        const uint16_t* w0 = base + r * cols;
        for (uint32_t t = 0; t < n_rows; ++t) {
          float s[4];
          if (w->dtype == SL_DTYPE_BF16)
            dot4_u16<load_bf16x8>(w0, w0 + cols, w0 + 2 * cols, w0 + 3 * cols, x + t * cols, cols, s);
          else
            dot4_u16<load_f16x8>(w0, w0 + cols, w0 + 2 * cols, w0 + 3 * cols, x + t * cols, cols, s);
          for (int k = 0; k < 4; ++k) out[t * n_out + r + k] = s[k];
        }
      }
    }
#endif
    for (; r < e; ++r)
      for (uint32_t t = 0; t < n_rows; ++t) out[t * n_out + r] = dot_weight_row(w, static_cast<uint32_t>(r), x + t * cols);
  });
}

void gemm(sl_backend* be, const float* x, uint32_t n_rows, const sl_weight* w, float* out) {
  const std::size_t n_out = w->rows, cols = w->cols;
  // Each thread takes a range of output features; OpenBLAS runs single-threaded inside it (the
  // backend sets it so), which keeps one set of threads busy instead of two competing pools.
  const std::size_t block_rows = std::max<std::size_t>(16, kBlockFloats / cols / be->n_threads);
  be->pool->parallel_for(n_out, 16, [&](std::size_t b, std::size_t e, unsigned tid) {
    if (w->dtype == SL_DTYPE_F32) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n_rows), static_cast<int>(e - b),
                  static_cast<int>(cols), 1.0f, x, static_cast<int>(cols),
                  reinterpret_cast<const float*>(weight_data(w)) + b * cols, static_cast<int>(cols), 0.0f, out + b,
                  static_cast<int>(n_out));
      return;
    }
    std::vector<float>& block = be->scratch[tid];
    block.resize(std::min(block_rows, e - b) * cols);
    for (std::size_t r0 = b; r0 < e; r0 += block_rows) {
      const std::size_t rows = std::min(block_rows, e - r0);
      for (std::size_t r = 0; r < rows; ++r) weight_row_to_f32(w, static_cast<uint32_t>(r0 + r), block.data() + r * cols);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n_rows), static_cast<int>(rows),
                  static_cast<int>(cols), 1.0f, x, static_cast<int>(cols), block.data(), static_cast<int>(cols), 0.0f,
                  out + r0, static_cast<int>(n_out));
    }
  });
}

}  // namespace

sl_status matmul(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const sl_weight* bias,
                 sl_buffer* out, sl_error* err) {
  if (w && w->bits) {
    if (const char* why = quant_weight_problem(w); *why) return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string("matmul: ") + why);
  } else if (!weight_dtype_supported(w)) {
    return set_error(err, SL_ERR_UNSUPPORTED, "matmul: unknown weight dtype on the CPU backend");
  }
  if (static_cast<uint64_t>(n_rows) * w->cols * 4 > x->bytes || static_cast<uint64_t>(n_rows) * w->rows * 4 > out->bytes)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul: activation buffers too small for the shapes");
  try {
    if (n_rows <= kMatvecMaxRows && w->bits)
      quant_matvec(be, f32(x), n_rows, w, f32(out));
    else if (n_rows <= kMatvecMaxRows)
      matvec(be, f32(x), n_rows, w, f32(out));
    else if (w->bits && quant_gemm_supported(w))
      quant_gemm(be, f32(x), n_rows, w, f32(out));
    else
      gemm(be, f32(x), n_rows, w, f32(out));
  } catch (const std::bad_alloc&) {
    return set_error(err, SL_ERR_OUT_OF_MEMORY, "matmul: out of memory for scratch");
  }
  if (bias) {
    if (!weight_dtype_supported(bias) || bias->cols != w->rows)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul: bias does not match the weight's rows");
    std::vector<float> b(bias->cols);
    weight_row_to_f32(bias, 0, b.data());
    float* o = f32(out);
    for (uint32_t t = 0; t < n_rows; ++t)
      for (uint32_t r = 0; r < w->rows; ++r) o[static_cast<std::size_t>(t) * w->rows + r] += b[r];
  }
  return SL_OK;
}

}  // namespace sluice::cpu
