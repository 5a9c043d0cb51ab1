// Matrix products out = x · Wᵀ (+ bias) with weights [rows = out, cols = in] in f32/f16/bf16 or
// affine-quantized (1..8 bits). A few activation rows (decode): our matvec kernels stream each weight
// row once, dequantizing in registers — decode is bound by reading the weights. More rows (prefill):
// blocks of weight rows are dequantized to float32 in device scratch and multiplied with CLBlast's
// GEMM (our tiled kernel if CLBlast fails on the device) — prefill is bound by arithmetic. On sm_80+
// NVIDIA devices 4- and 8-bit weights skip the scratch: kernels_cl/gemm_mma.cl multiplies them on
// tensor cores (f16 inputs, f32 sums), dequantizing as it stages them.
// Weights larger than one device allocation are processed in row segments that each fit in one.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <clblast.h>

#include "cl_backend.h"

namespace sluice::ocl {
namespace {

constexpr uint32_t kMatvecMaxRows = 8;            // MAX_T in matvec.cl
constexpr uint32_t kMatvecRowsPerGroup = 128 / 32;  // WG / TEAM
constexpr uint64_t kScratchBytes = 64ull << 20;   // float32 weight block for one GEMM
constexpr uint32_t kMmaDefaultRows = 128;          // MMA_BM of the tensor-core GEMM with 64-column steps

struct Segment {
  uint32_t r0, rows;
  DevPtr data, scales, biases;
};

uint64_t row_bytes(const sl_weight* w) {
  if (w->bits) return uint64_t(w->cols) * w->bits / 8;
  return uint64_t(w->cols) * (w->dtype == SL_DTYPE_F32 ? 4 : 2);
}

std::vector<Segment> segments(sl_backend* be, const sl_weight* w) {
  const uint64_t rb = row_bytes(w);
  const uint64_t groups = w->bits ? w->cols / w->group_size : 0;
  const uint64_t sb = w->scale_dtype == SL_DTYPE_F32 ? 4 : 2;
  const uint64_t limit = std::min(w->data->chunk_bytes, w->bits ? std::min(w->scales->chunk_bytes, w->biases->chunk_bytes) : w->data->chunk_bytes);
  const uint64_t per = std::max<uint64_t>(1, std::min<uint64_t>(w->rows, limit / std::max<uint64_t>(rb, groups * sb)));
  std::vector<Segment> out;
  for (uint64_t r0 = 0; r0 < w->rows; r0 += per) {
    Segment s;
    s.r0 = static_cast<uint32_t>(r0);
    s.rows = static_cast<uint32_t>(std::min<uint64_t>(per, w->rows - r0));
    s.data = read_range(be, w->data, w->offset + r0 * rb, s.rows * rb, 4);
    if (w->bits) {
      s.scales = read_range(be, w->scales, w->scales_offset + r0 * groups * sb, s.rows * groups * sb, sb);
      s.biases = read_range(be, w->biases, w->biases_offset + r0 * groups * sb, s.rows * groups * sb, sb);
    }
    out.push_back(s);
  }
  return out;
}

cl::Buffer& single(const sl_buffer* b) {
  if (b->chunks.size() != 1) throw std::runtime_error("activation buffer larger than one device allocation");
  return const_cast<cl::Buffer&>(b->chunks[0]);
}

// The dp4a decode matvec (kernels_cl/matvec.cl): NVIDIA with PTX on and dp4a (sm_61+), unless
// SLUICE_OPENCL_DP4A=0.
bool use_dp4a(const sl_backend* be) {
  static const bool off = [] {
    const char* v = std::getenv("SLUICE_OPENCL_DP4A");
    return v && *v == '0';
  }();
  return be->use_ptx && be->caps.sm >= 61 && !off;
}

void matvec(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const DevPtr& bias, uint32_t bias_dtype,
            bool has_bias, sl_buffer* out) {
  // One activation row against 4-bit weights on a device with dp4a: the activation is rounded to
  // 15-bit integers once here for every segment.
  const bool q4_decode = n_rows == 1 && w->bits == 4 && (uint64_t(w->cols) * 4 / 32) % 4 == 0 && w->group_size % 32 == 0;
  // Only for large matrices: on the H100 (perf/results/dp4a_gpu/run1) dp4a read 1.3-1.8 TB/s where the
  // float kernel read 0.94-1.09 (28672×4096 and up), matched it at 4096×4096 and lost at 1024×4096
  // (0.14 against 0.32: the extra launch that rounds x is not repaid).
  const bool dp4a = q4_decode && use_dp4a(be) && uint64_t(w->rows) * w->cols >= (uint64_t(1) << 25);
  cl::Buffer *x8 = nullptr, *x8_blocks = nullptr;
  if (dp4a) {
    const uint64_t blocks = w->cols / 32;
    x8 = &be->matvec_x8.at_least(be->context, uint64_t(w->cols) * 2);  // high and low bytes
    x8_blocks = &be->matvec_x8_blocks.at_least(be->context, blocks * 8);
    auto& q = kernel(be, "matvec", "matvec_x_int15");
    q.setArg(0, single(x));
    q.setArg(1, static_cast<cl_uint>(w->cols));
    q.setArg(2, *x8);
    q.setArg(3, *x8_blocks);
    launch(be, q, cl::NDRange(round_up(w->cols, 256)), cl::NDRange(256));
  }
  for (const auto& s : segments(be, w)) {
    const cl::NDRange global(size_t((s.rows + kMatvecRowsPerGroup - 1) / kMatvecRowsPerGroup) * 128), local(128);
    if (w->bits == 0) {
      auto& k = kernel(be, "matvec", "matvec");
      k.setArg(0, s.data.buffer);
      k.setArg(1, static_cast<cl_ulong>(s.data.offset));
      k.setArg(2, static_cast<cl_uint>(w->dtype));
      k.setArg(3, static_cast<cl_uint>(s.rows));
      k.setArg(4, static_cast<cl_uint>(w->cols));
      k.setArg(5, single(x));
      k.setArg(6, static_cast<cl_uint>(n_rows));
      k.setArg(7, single(out));
      k.setArg(8, static_cast<cl_uint>(w->rows));
      k.setArg(9, static_cast<cl_uint>(s.r0));
      k.setArg(10, bias.buffer);
      k.setArg(11, static_cast<cl_ulong>(bias.offset));
      k.setArg(12, static_cast<cl_uint>(bias_dtype));
      k.setArg(13, static_cast<cl_uint>(has_bias));
      launch(be, k, global, local);
    } else if (q4_decode) {
      // Decode's common case: R4 rows per team of q4_team() (kernels_cl/matvec.cl), the float kernel
      // or, on NVIDIA for the large matrices, the dp4a one; they share every argument but 11-14.
      const uint32_t team = q4_team(be, s.rows), rows_per_group = 128 / team * q4_rows();
      const cl::NDRange g4(size_t((s.rows + rows_per_group - 1) / rows_per_group) * 128);
      auto& k = kernel(be, q4_program(team), dp4a ? "matvec_q4_dp4a" : "matvec_q4_rows");
      k.setArg(0, s.data.buffer);
      k.setArg(1, static_cast<cl_ulong>(s.data.offset));
      k.setArg(2, static_cast<cl_ulong>(uint64_t(w->cols) * 4 / 32));
      k.setArg(3, s.scales.buffer);
      k.setArg(4, static_cast<cl_ulong>(s.scales.offset));
      k.setArg(5, s.biases.buffer);
      k.setArg(6, static_cast<cl_ulong>(s.biases.offset));
      k.setArg(7, static_cast<cl_uint>(w->scale_dtype));
      k.setArg(8, static_cast<cl_uint>(w->group_size));
      k.setArg(9, static_cast<cl_uint>(s.rows));
      k.setArg(10, static_cast<cl_uint>(w->cols));
      if (dp4a) {
        k.setArg(11, *x8);
        k.setArg(12, *x8_blocks);
        k.setArg(13, single(out));
      } else {
        k.setArg(11, single(x));
        k.setArg(12, single(out));
        k.setArg(13, static_cast<cl_uint>(w->rows));
      }
      k.setArg(14, static_cast<cl_uint>(s.r0));
      k.setArg(15, bias.buffer);
      k.setArg(16, static_cast<cl_ulong>(bias.offset));
      k.setArg(17, static_cast<cl_uint>(bias_dtype));
      k.setArg(18, static_cast<cl_uint>(has_bias));
      // The weight rows' alignment (row starts share it: a row is a multiple of 16 bytes here).
      const uint64_t at = s.data.offset;
      k.setArg(19, static_cast<cl_uint>(at % 16 == 0 ? 16 : at % 8 == 0 ? 8 : 4));
      launch(be, k, g4, local);
    } else {
      auto& k = kernel(be, "matvec", "matvec_quant");
      k.setArg(0, s.data.buffer);
      k.setArg(1, static_cast<cl_ulong>(s.data.offset));
      k.setArg(2, static_cast<cl_uint>(w->bits));
      k.setArg(3, static_cast<cl_ulong>(uint64_t(w->cols) * w->bits / 32));
      k.setArg(4, s.scales.buffer);
      k.setArg(5, static_cast<cl_ulong>(s.scales.offset));
      k.setArg(6, s.biases.buffer);
      k.setArg(7, static_cast<cl_ulong>(s.biases.offset));
      k.setArg(8, static_cast<cl_uint>(w->scale_dtype));
      k.setArg(9, static_cast<cl_uint>(w->group_size));
      k.setArg(10, static_cast<cl_uint>(s.rows));
      k.setArg(11, static_cast<cl_uint>(w->cols));
      k.setArg(12, single(x));
      k.setArg(13, static_cast<cl_uint>(n_rows));
      k.setArg(14, single(out));
      k.setArg(15, static_cast<cl_uint>(w->rows));
      k.setArg(16, static_cast<cl_uint>(s.r0));
      k.setArg(17, bias.buffer);
      k.setArg(18, static_cast<cl_ulong>(bias.offset));
      k.setArg(19, static_cast<cl_uint>(bias_dtype));
      k.setArg(20, static_cast<cl_uint>(has_bias));
      launch(be, k, global, local);
    }
  }
}

// C[m, n] (leading dimension ldc, at c_off floats) = A[m, k] · B[n, k]ᵀ.
void gemm_nt(sl_backend* be, uint32_t m, uint32_t n, uint32_t k, const cl::Buffer& a, uint64_t a_off, const cl::Buffer& b,
             uint64_t b_off, cl::Buffer& c, uint64_t c_off, uint32_t ldc) {
  static const bool no_clblast = std::getenv("SLUICE_OPENCL_NO_CLBLAST") != nullptr;
  if (be->clblast_ok && !no_clblast) {
    cl_command_queue q = be->queue();
    const auto status = clblast::Gemm<float>(clblast::Layout::kRowMajor, clblast::Transpose::kNo, clblast::Transpose::kYes, m, n, k,
                                             1.0f, a(), a_off, k, b(), b_off, k, 0.0f, c(), c_off, ldc, &q, nullptr);
    if (status == clblast::StatusCode::kSuccess) return;
    be->clblast_ok = false;  // e.g. a device CLBlast cannot compile for: our kernel from now on
  }
  auto& kn = kernel(be, "ops", "gemm_nt");
  kn.setArg(0, static_cast<cl_uint>(m));
  kn.setArg(1, static_cast<cl_uint>(n));
  kn.setArg(2, static_cast<cl_uint>(k));
  kn.setArg(3, a);
  kn.setArg(4, static_cast<cl_ulong>(a_off));
  kn.setArg(5, static_cast<cl_uint>(k));
  kn.setArg(6, b);
  kn.setArg(7, static_cast<cl_ulong>(b_off));
  kn.setArg(8, static_cast<cl_uint>(k));
  kn.setArg(9, c);
  kn.setArg(10, static_cast<cl_ulong>(c_off));
  kn.setArg(11, static_cast<cl_uint>(ldc));
  launch(be, kn, cl::NDRange(round_up(n, 16), round_up(m, 16)), cl::NDRange(16, 16));
}

// The tensor-core GEMM's shape for a weight (kernels_cl/gemm_mma.cl): columns a step (MMA_BK: 64
// where K allows, else 32) and activation rows a work-group (MMA_BM: 128, or 64 with 64-column
// steps). SLUICE_OPENCL_MMA_BK=32 and SLUICE_OPENCL_MMA_BM=64/128 force them for measuring.
struct MmaShape {
  uint32_t step, rows;
};

MmaShape mma_shape(const sl_weight* w) {
  static const long bk = env_knob("SLUICE_OPENCL_MMA_BK", [](long v) { return v == 32 || v == 64; });
  static const long bm = env_knob("SLUICE_OPENCL_MMA_BM", [](long v) { return v == 64 || v == 128; });
  const uint32_t step = bk != 32 && w->cols % 64 == 0 ? 64 : 32;
  const uint32_t rows = step == 64 ? static_cast<uint32_t>(bm ? bm : kMmaDefaultRows) : 128;
  return {step, rows};
}

std::string mma_program(MmaShape s) {
  return "gemm_mma_bk" + std::to_string(s.step) + (s.rows == 128 ? "" : "_bm" + std::to_string(s.rows));
}

// Whether the tensor-core GEMM takes this weight: an sm_80+ NVIDIA device with PTX on, 4- or 8-bit
// codes, K in whole 32-column steps, groups a power of two of at least 16 columns (a work-item's
// 16-column share of a step then has one scale, found by a shift). SLUICE_OPENCL_MMA=0 keeps the CLBlast path. The programs are built on first
// use; if that fails the CLBlast path serves from then on.
bool mma_applies(sl_backend* be, const sl_weight* w) {
  if (be->mma_state == 0) {
    static const bool off = [] {
      const char* e = std::getenv("SLUICE_OPENCL_MMA");
      return e && std::strcmp(e, "0") == 0;
    }();
    if (off || !be->use_ptx || be->caps.sm < 80) {
      be->mma_state = -1;
    } else {
      try {
        for (MmaShape shape : {MmaShape{32, 128}, MmaShape{64, 128}, MmaShape{64, 64}})
          kernel(be, mma_program(shape), "gemm_mma_quant");
        be->mma_state = 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "opencl: tensor-core GEMM unavailable, prefill uses CLBlast: %s\n", e.what());
        be->mma_state = -1;
      }
    }
  }
  const uint32_t gs = w->group_size;
  return be->mma_state == 1 && (w->bits == 4 || w->bits == 8) && w->cols % 32 == 0 && gs >= 16 && (gs & (gs - 1)) == 0;
}

// out[:, r0 + n] = x · W[n]ᵀ per segment, MMA_BM × 128 blocks of out per work-group of 256.
void gemm_mma(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, sl_buffer* out) {
  const MmaShape shape = mma_shape(w);
  // x as f16 pairs in the kernel's chunk order, once for all work-groups.
  cl::Buffer& xh = be->gemm_scratch.at_least(be->context, uint64_t(n_rows) * w->cols * 2);
  auto& pack = kernel(be, mma_program(shape), "gemm_mma_pack_x");
  pack.setArg(0, static_cast<cl_uint>(n_rows));
  pack.setArg(1, static_cast<cl_uint>(w->cols));
  pack.setArg(2, single(x));
  pack.setArg(3, xh);
  launch(be, pack, cl::NDRange(round_up(w->cols / 16, 64), n_rows), cl::NDRange(64, 1));
  uint32_t group_shift = 0;
  while ((1u << group_shift) < w->group_size) ++group_shift;
  auto& k = kernel(be, mma_program(shape), "gemm_mma_quant");
  for (const auto& s : segments(be, w)) {
    k.setArg(0, static_cast<cl_uint>(n_rows));
    k.setArg(1, static_cast<cl_uint>(s.rows));
    k.setArg(2, static_cast<cl_uint>(w->cols));
    k.setArg(3, xh);
    k.setArg(4, s.data.buffer);
    k.setArg(5, static_cast<cl_ulong>(s.data.offset / 4));
    k.setArg(6, static_cast<cl_uint>(w->bits));
    k.setArg(7, s.scales.buffer);
    k.setArg(8, static_cast<cl_ulong>(s.scales.offset));
    k.setArg(9, s.biases.buffer);
    k.setArg(10, static_cast<cl_ulong>(s.biases.offset));
    k.setArg(11, static_cast<cl_uint>(w->scale_dtype));
    k.setArg(12, static_cast<cl_uint>(group_shift));
    k.setArg(13, single(out));
    k.setArg(14, static_cast<cl_uint>(w->rows));
    k.setArg(15, static_cast<cl_uint>(s.r0));
    launch(be, k, cl::NDRange(size_t((n_rows + shape.rows - 1) / shape.rows) * 256, (s.rows + 127) / 128), cl::NDRange(256, 1));
  }
}

void gemm(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, sl_buffer* out) {
  if (w->bits && mma_applies(be, w)) return gemm_mma(be, x, n_rows, w, out);
  const uint64_t cols = w->cols;
  const uint32_t block_rows = static_cast<uint32_t>(std::max<uint64_t>(16, kScratchBytes / 4 / cols));
  for (const auto& s : segments(be, w)) {
    if (w->bits == 0 && w->dtype == SL_DTYPE_F32) {
      gemm_nt(be, n_rows, s.rows, w->cols, single(x), 0, s.data.buffer, s.data.offset / 4, single(out), s.r0, w->rows);
      continue;
    }
    cl::Buffer& scratch = be->gemm_scratch.at_least(be->context, std::min<uint64_t>(block_rows, s.rows) * cols * 4);
    for (uint32_t b0 = 0; b0 < s.rows; b0 += block_rows) {
      const uint32_t nb = std::min(block_rows, s.rows - b0);
      const cl::NDRange global(round_up(cols, 64), nb), local(64, 1);
      if (w->bits == 0) {
        auto& k = kernel(be, "ops", "dequant_rows");
        k.setArg(0, s.data.buffer);
        k.setArg(1, static_cast<cl_ulong>(s.data.offset + uint64_t(b0) * row_bytes(w)));
        k.setArg(2, static_cast<cl_uint>(w->dtype));
        k.setArg(3, static_cast<cl_uint>(cols));
        k.setArg(4, scratch);
        launch(be, k, global, local);
      } else {
        const uint64_t groups = cols / w->group_size, sb = w->scale_dtype == SL_DTYPE_F32 ? 4 : 2;
        auto& k = kernel(be, "ops", "dequant_rows_quant");
        k.setArg(0, s.data.buffer);
        k.setArg(1, static_cast<cl_ulong>(s.data.offset + uint64_t(b0) * row_bytes(w)));
        k.setArg(2, static_cast<cl_ulong>(cols * w->bits / 32));
        k.setArg(3, static_cast<cl_uint>(w->bits));
        k.setArg(4, s.scales.buffer);
        k.setArg(5, static_cast<cl_ulong>(s.scales.offset + uint64_t(b0) * groups * sb));
        k.setArg(6, s.biases.buffer);
        k.setArg(7, static_cast<cl_ulong>(s.biases.offset + uint64_t(b0) * groups * sb));
        k.setArg(8, static_cast<cl_uint>(w->scale_dtype));
        k.setArg(9, static_cast<cl_uint>(w->group_size));
        k.setArg(10, static_cast<cl_uint>(cols));
        k.setArg(11, scratch);
        launch(be, k, global, local);
      }
      gemm_nt(be, n_rows, nb, w->cols, single(x), 0, scratch, 0, single(out), s.r0 + b0, w->rows);
    }
  }
}

}  // namespace

sl_status matmul(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const sl_weight* bias,
                 sl_buffer* out, sl_error* err) {
  if (!w || !w->data || !weight_form_supported(w->dtype, w->bits))
    return set_error(err, SL_ERR_UNSUPPORTED, "matmul: unsupported weight form on the OpenCL backend");
  if (w->bits && (!w->scales || !w->biases || w->group_size == 0 || w->cols % w->group_size ||
                  (uint64_t(w->cols) * w->bits) % 32 || !weight_form_supported(w->scale_dtype, 0)))
    return set_error(err, SL_ERR_INVALID_ARGUMENT,
                     "matmul: quantized weight needs scales, biases, and rows of whole groups and 32-bit words");
  if (static_cast<uint64_t>(n_rows) * w->cols * 4 > x->bytes || static_cast<uint64_t>(n_rows) * w->rows * 4 > out->bytes)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul: activation buffers too small for the shapes");
  if (bias && (!bias->data || bias->bits || !weight_form_supported(bias->dtype, 0) || bias->cols != w->rows))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul: bias does not match the weight's rows");
  if (n_rows == 0) return SL_OK;
  return guarded(err, "matmul", [&] {
    const uint64_t bias_bytes = bias ? uint64_t(bias->cols) * (bias->dtype == SL_DTYPE_F32 ? 4 : 2) : 0;
    const DevPtr b = bias ? read_range(be, bias->data, bias->offset, bias_bytes, bias->dtype == SL_DTYPE_F32 ? 4 : 2)
                          : DevPtr{single(out), 0};
    if (n_rows <= kMatvecMaxRows) {
      matvec(be, x, n_rows, w, b, bias ? bias->dtype : 0, bias != nullptr, out);
      return SL_OK;
    }
    gemm(be, x, n_rows, w, out);
    if (bias) {
      auto& k = kernel(be, "ops", "add_bias");
      k.setArg(0, single(out));
      k.setArg(1, b.buffer);
      k.setArg(2, static_cast<cl_ulong>(b.offset));
      k.setArg(3, static_cast<cl_uint>(bias->dtype));
      k.setArg(4, static_cast<cl_uint>(w->rows));
      launch(be, k, cl::NDRange(round_up(w->rows, 64), n_rows), cl::NDRange(64, 1));
    }
    return SL_OK;
  });
}

}  // namespace sluice::ocl
