// Which kernel multiplies a batch of activation rows by a weight (cl_matmul.cpp), decided from the
// shapes and the tuning alone — no device — so that tests/opencl/cl_matmul_path_test.cpp checks the
// choice in CI where the NVIDIA paths never run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "cl_tuning.h"

namespace sluice::ocl {

enum class MatmulPath {
  kQ4Decode,  // one row, 4-bit: matvec_q4_rows / matvec_q4_dp4a (q4_shape picks the teams)
  kQ4Batch,   // 2..q4_batch_max_rows rows, 4-bit: matvec_q4_batch, the weights read once a chunk of rows
  kMatvec,    // up to kMatvecMaxRows rows of any other form: matvec / matvec_quant
  kGemm,      // more rows: the tensor-core GEMM where it applies, else dequantize + CLBlast
};

inline constexpr uint32_t kMatvecMaxRows = 8;  // MAX_T in kernels_cl/matvec.cl

struct MatmulShape {
  uint32_t n_rows = 0, cols = 0, bits = 0, group_size = 0;
};

// The 4-bit decode kernels' form: 32-column steps of four words, a step inside one group.
inline bool q4_steps_form(const MatmulShape& s) {
  return s.bits == 4 && (uint64_t(s.cols) * 4 / 32) % 4 == 0 && s.group_size % 32 == 0;
}

inline MatmulPath matmul_path(const MatmulShape& s, const Tuning& t) {
  if (q4_steps_form(s) && s.n_rows == 1) return MatmulPath::kQ4Decode;
  if (q4_steps_form(s) && s.n_rows >= 2 && s.n_rows <= t.q4_batch_max_rows) return MatmulPath::kQ4Batch;
  if (s.n_rows <= kMatvecMaxRows) return MatmulPath::kMatvec;
  return MatmulPath::kGemm;
}

// matvec_q4_batch's activation rows a work-group for a batch of n_rows: the tuned chunk, or the
// smallest of 2, 4, 8 that holds a smaller batch (accumulators past the batch would be registers spent
// for nothing).
inline uint32_t q4_batch_chunk(uint32_t n_rows, const Tuning& t) {
  uint32_t chunk = 2;
  while (chunk < t.q4_batch_chunk && chunk < n_rows) chunk *= 2;
  return chunk;
}

// The program holding matvec_q4_batch for a chunk and a team's weight rows (cl_device.cpp builds it).
inline std::string q4_batch_program(uint32_t chunk, uint32_t team_rows) {
  return "matvec_batch_t" + std::to_string(chunk) + "_r" + std::to_string(team_rows);
}

}  // namespace sluice::ocl
