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
  kQ4Batch,   // 2..q4_batch_max_rows rows, 4-bit: matvec_q4_batch(_dp4a/_mma), the weights read once a chunk of rows
  kMatvec,    // up to kMatvecMaxRows rows of any other form: matvec / matvec_quant / matvec_mxfp4
  kGemm,      // more rows: the tensor-core GEMM where it applies, else dequantize + CLBlast
};

inline constexpr uint32_t kMatvecMaxRows = 8;  // MAX_T in kernels_cl/matvec.cl

struct MatmulShape {
  uint32_t n_rows = 0, cols = 0, bits = 0, group_size = 0;
  bool mxfp4 = false;      // ABI 2.3's MXFP4 (bits 4, blocks of 32), not affine codes
  uint32_t out_rows = 0;   // the weight's rows (the product's outputs a row)
};

// The 4-bit affine decode kernels' form: 32-column steps of four words, a step inside one group.
inline bool q4_steps_form(const MatmulShape& s) {
  return s.bits == 4 && !s.mxfp4 && (uint64_t(s.cols) * 4 / 32) % 4 == 0 && s.group_size % 32 == 0;
}

// MATMUL_ID (ABI 2.5) takes matvec_id_q4 — several rows of an expert a team, the slot's activations
// loaded once a step for all of them — where the rows are 4-bit in the decode kernels' steps
// (whole uint4 steps of 32 columns inside one group); matvec_id otherwise (any form, a row a team).
inline bool matmul_id_takes_q4_rows(uint32_t bits, uint64_t words_per_row, uint32_t group_size) {
  return bits == 4 && words_per_row % 4 == 0 && group_size != 0 && group_size % 32 == 0;
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

// Weight rows a team of 32 takes for a batch of n_rows: more rows share each activation load among
// more weight rows, which pays once the batch is wide (on the H100 from 8 rows: 53 against 60 µs for
// a 14336 × 4096 weight and 8 rows, but 30 against 23 µs for 2 rows; perf/results/batching_gpu.md).
inline uint32_t q4_batch_team_rows(uint32_t n_rows, const Tuning& t) {
  return t.q4_batch_wide_rows && n_rows >= t.q4_batch_wide_rows ? t.q4_batch_wide_team_rows : t.q4_batch_team_rows;
}

// Whether a batch takes matvec_q4_batch_dp4a (the activation rows rounded to their 15-bit forms, the
// codes multiplied with dp4a) rather than the float matvec_q4_batch: where the device runs dp4a (NVIDIA
// with inline PTX, unless tune.dp4a=0 — use_dp4a) and the tuning allows it.
inline bool q4_batch_dp4a(bool dp4a_device, const Tuning& t) { return dp4a_device && t.q4_batch_dp4a != 0; }

// Whether the producer of a decode batch's activation rows (rms_norm, add_rms_norm, gated_activation)
// writes their 15-bit forms for the product after it, as it does for one row: where that product
// takes matvec_q4_batch_dp4a — 2..q4_batch_max_rows rows on a dp4a device with the tuning's dp4a batch
// kernel, fewer rows than the tensor-core kernel takes or no tensor cores (mma_device as q4_batch_mma
// sees it). The product then needs no launch of its own to round x (matvec_x_int15_rows).
inline bool batch_int15_by_producer(uint32_t n_rows, uint64_t cols, bool dp4a_device, bool mma_device, const Tuning& t) {
  if (!q4_batch_dp4a(dp4a_device, t) || n_rows < 2 || n_rows > t.q4_batch_max_rows || cols % 32 || cols > UINT32_MAX) return false;
  return !(mma_device && t.q4_batch_mma != 0 && n_rows >= t.q4_batch_mma_min_rows);
}

// Whether a batch takes matvec_q4_batch_mma (kernels_cl/matvec_batch_mma.cl, tensor cores): where the
// device runs mma.sync (sm_80+ NVIDIA with inline PTX, the program built — mma_device), the tuning
// allows it and the batch has q4_batch_mma_min_rows rows or more; it reads whole 32-column steps.
inline bool q4_batch_mma(const MatmulShape& s, bool mma_device, const Tuning& t) {
  return mma_device && t.q4_batch_mma != 0 && s.n_rows >= t.q4_batch_mma_min_rows && s.cols % 32 == 0 && s.group_size % 32 == 0;
}

// Whether products of one x (q/k/v, gate/up: 2..3 weights) of a batch take one launch, as parts
// (BATCH_PARTS_ARGS in kernels_cl/common.cl — the tensor-core, dp4a and float batch kernels alike):
// the tuning allows it (q4_batch_multi), every product takes the batch path, and the weights share
// cols, group size and the scales' form (one program, one step). Which kernel is q4_batch_mma's to
// say, for all of them at once; where their buffers and biases allow is the backend's (cl_matmul.cpp).
inline bool q4_batch_parts(const MatmulShape* s, uint32_t count, uint32_t scale_dtypes_differ, const Tuning& t) {
  if (count < 2 || count > 3 || !t.q4_batch_multi || scale_dtypes_differ) return false;
  for (uint32_t i = 0; i < count; ++i)
    if (matmul_path(s[i], t) != MatmulPath::kQ4Batch || s[i].n_rows != s[0].n_rows || s[i].cols != s[0].cols ||
        s[i].group_size != s[0].group_size)
      return false;
  return true;
}

// Its compile-time shape for a batch (program "matvec_batch_mma_n4_m1_s4_w8_g64_u2_i0"): n tiles of 8
// activation rows a chunk (the fewest of 1, 2, 4 that hold the batch; wider batches in chunks of 32),
// m tiles of 16 weight rows a warp, warps side by side in m (they share x through L1: more of them, fewer
// bytes of x from L2 — but fewer work-groups, so they halve until the launch has
// q4_batch_mma_groups_per_cu work-groups a compute unit or one warp is left), warps a work-group,
// columns a step (64 where the groups and the row allow, else 32), steps in flight a warp, whether a
// step's MMAs are interleaved over the tiles (kernels_cl/matvec_batch_mma.cl, BM_ILV). The warps'
// sums meet in local memory, warps × m × n × 512 bytes: m falls to 1 where that would pass 32 KB.
struct Q4BatchMmaShape {
  uint32_t n_tiles = 1, m_tiles = 1, m_warps = 1, warps = 8, step = 64, unroll = 2, interleave = 0;
  uint32_t chunk_rows() const { return 8 * n_tiles; }
  uint32_t rows_per_group() const { return 16 * m_tiles * m_warps; }
  bool operator==(const Q4BatchMmaShape&) const = default;
};

inline Q4BatchMmaShape q4_batch_mma_shape(const MatmulShape& s, uint32_t compute_units, const Tuning& t) {
  Q4BatchMmaShape m;
  while (m.n_tiles < 4 && m.chunk_rows() < s.n_rows) m.n_tiles *= 2;
  m.warps = t.q4_batch_mma_warps;
  m.m_tiles = t.q4_batch_mma_m_tiles;
  if (m.warps * m.m_tiles * m.n_tiles * 512 > (32u << 10)) m.m_tiles = 1;
  const uint64_t chunks = (uint64_t(s.n_rows) + m.chunk_rows() - 1) / m.chunk_rows();
  const uint64_t wanted = uint64_t(compute_units) * t.q4_batch_mma_groups_per_cu;
  m.m_warps = std::min(t.q4_batch_mma_m_warps, m.warps);
  while (m.m_warps > 1 && (uint64_t(s.out_rows) + m.rows_per_group() - 1) / m.rows_per_group() * chunks < wanted) m.m_warps /= 2;
  m.step = s.group_size % 64 == 0 && s.cols % 64 == 0 ? 64 : 32;
  m.unroll = t.q4_batch_mma_unroll;
  m.interleave = t.q4_batch_mma_interleave;
  return m;
}

inline std::string q4_batch_mma_program(const Q4BatchMmaShape& m) {
  return "matvec_batch_mma_n" + std::to_string(m.n_tiles) + "_m" + std::to_string(m.m_tiles) + "_s" + std::to_string(m.m_warps) + "_w" +
         std::to_string(m.warps) + "_g" + std::to_string(m.step) + "_u" + std::to_string(m.unroll) + "_i" + std::to_string(m.interleave);
}

// The program holding matvec_q4_batch for a chunk and a team's weight rows (cl_device.cpp builds it).
inline std::string q4_batch_program(uint32_t chunk, uint32_t team_rows) {
  return "matvec_batch_t" + std::to_string(chunk) + "_r" + std::to_string(team_rows);
}

}  // namespace sluice::ocl
