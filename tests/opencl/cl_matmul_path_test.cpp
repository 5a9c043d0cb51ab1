// The OpenCL backend's choice of matmul kernel (backends/opencl/cl_matmul_path.h), without a device:
// the batched 4-bit decode kernel takes 2..q4_batch_max_rows rows of the forms it reads, and nothing else.
#include <gtest/gtest.h>

#include "cl_matmul_path.h"

namespace sluice::ocl {
namespace {

MatmulShape q4(uint32_t n_rows, uint32_t cols = 4096, uint32_t group = 64) { return {n_rows, cols, 4, group}; }

TEST(MatmulPath, OneRowOfFourBitWeightsIsTheDecodeKernel) {
  EXPECT_EQ(matmul_path(q4(1), Tuning{}), MatmulPath::kQ4Decode);
  EXPECT_EQ(matmul_path(q4(1, 4096, 32), Tuning{}), MatmulPath::kQ4Decode);
}

TEST(MatmulPath, BatchesOfFourBitRowsReadTheWeightsOnceAChunk) {
  const Tuning t;
  for (uint32_t n : {2u, 3u, 8u, 9u, 16u, 33u, 64u}) EXPECT_EQ(matmul_path(q4(n), t), MatmulPath::kQ4Batch) << n;
  // Past the tuned limit: a prefill-sized product, the GEMM.
  EXPECT_EQ(matmul_path(q4(65), t), MatmulPath::kGemm);
  EXPECT_EQ(matmul_path(q4(512), t), MatmulPath::kGemm);
}

TEST(MatmulPath, FormsTheBatchKernelCannotReadKeepTheGeneralPaths) {
  const Tuning t;
  // 8-bit, 2-bit and float weights: the general matvec up to 8 rows, then the GEMM.
  EXPECT_EQ(matmul_path({4, 4096, 8, 64}, t), MatmulPath::kMatvec);
  EXPECT_EQ(matmul_path({4, 4096, 0, 0}, t), MatmulPath::kMatvec);
  EXPECT_EQ(matmul_path({9, 4096, 2, 64}, t), MatmulPath::kGemm);
  // Groups of 16 or 48 columns: a 32-column step would straddle two groups.
  EXPECT_EQ(matmul_path(q4(4, 4096, 16), t), MatmulPath::kMatvec);
  EXPECT_EQ(matmul_path(q4(4, 96 * 16, 48), t), MatmulPath::kMatvec);
  EXPECT_EQ(matmul_path(q4(1, 96 * 16, 48), t), MatmulPath::kMatvec);
  EXPECT_EQ(matmul_path(q4(20, 96 * 16, 48), t), MatmulPath::kGemm);
}

TEST(MatmulPath, Mxfp4WeightsTakeTheirOwnMatvecThenTheGemm) {
  // MXFP4 (ABI 2.3) has 4-bit codes in groups of 32, but no affine words: never the 4-bit kernels.
  const Tuning t;
  for (uint32_t n : {1u, 2u, 8u}) EXPECT_EQ(matmul_path({n, 2880, 4, 32, true}, t), MatmulPath::kMatvec) << n;
  for (uint32_t n : {9u, 64u, 512u}) EXPECT_EQ(matmul_path({n, 2880, 4, 32, true}, t), MatmulPath::kGemm) << n;
}

TEST(MatmulPath, TuningTurnsTheBatchKernelOffOrMovesItsLimit) {
  Tuning off;
  off.q4_batch_max_rows = 0;
  EXPECT_EQ(matmul_path(q4(4), off), MatmulPath::kMatvec);
  EXPECT_EQ(matmul_path(q4(16), off), MatmulPath::kGemm);
  EXPECT_EQ(matmul_path(q4(1), off), MatmulPath::kQ4Decode);
  Tuning up_to_16;
  up_to_16.q4_batch_max_rows = 16;
  EXPECT_EQ(matmul_path(q4(16), up_to_16), MatmulPath::kQ4Batch);
  EXPECT_EQ(matmul_path(q4(17), up_to_16), MatmulPath::kGemm);
}

TEST(MatmulPath, ChunksFitSmallBatchesAndStopAtTheTunedSize) {
  Tuning t;  // chunk 8
  EXPECT_EQ(q4_batch_chunk(2, t), 2u);
  EXPECT_EQ(q4_batch_chunk(3, t), 4u);
  EXPECT_EQ(q4_batch_chunk(5, t), 8u);
  EXPECT_EQ(q4_batch_chunk(8, t), 8u);
  EXPECT_EQ(q4_batch_chunk(40, t), 8u);
  t.q4_batch_chunk = 16;
  EXPECT_EQ(q4_batch_chunk(9, t), 16u);
  EXPECT_EQ(q4_batch_chunk(64, t), 16u);
  t.q4_batch_chunk = 2;
  EXPECT_EQ(q4_batch_chunk(64, t), 2u);
  EXPECT_EQ(q4_batch_program(8, 2), "matvec_batch_t8_r2");
}

TEST(MatmulPath, WideBatchesTakeTheirOwnTeamShapeWhereTuned) {
  Tuning t;  // no wide shape: every batch the one team shape
  EXPECT_EQ(q4_batch_team_rows(2, t), 2u);
  EXPECT_EQ(q4_batch_team_rows(64, t), 2u);
  t.q4_batch_wide_rows = 8;
  t.q4_batch_wide_team_rows = 4;
  EXPECT_EQ(q4_batch_team_rows(7, t), 2u);
  EXPECT_EQ(q4_batch_team_rows(8, t), 4u);
  EXPECT_EQ(q4_batch_team_rows(32, t), 4u);
}

TEST(MatmulPath, BatchesTakeTheDp4aKernelWhereTheDeviceRunsDp4aUnlessTunedOff) {
  Tuning t;
  EXPECT_TRUE(q4_batch_dp4a(true, t));
  EXPECT_FALSE(q4_batch_dp4a(false, t));  // PoCL, other vendors, tune.dp4a=0: the float kernel
  t.q4_batch_dp4a = 0;
  EXPECT_FALSE(q4_batch_dp4a(true, t));
}

}  // namespace
}  // namespace sluice::ocl
