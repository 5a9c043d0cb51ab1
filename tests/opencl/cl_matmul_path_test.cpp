// The OpenCL backend's choice of matmul kernel (backends/opencl/cl_matmul_path.h), without a device:
// the batched 4-bit decode kernel takes 2..q4_batch_max_rows rows of the forms it reads, and nothing else;
// its tensor-core form where the device runs it, in a shape fitted to the batch.
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

// The tensor-core tests set the fields they are about: the defaults are the measured device's.
Tuning mma_tuning(uint32_t min_rows, uint32_t m_warps, uint32_t unroll) {
  Tuning t;
  t.q4_batch_mma_min_rows = min_rows;
  t.q4_batch_mma_m_warps = m_warps;
  t.q4_batch_mma_unroll = unroll;
  t.q4_batch_mma_warps = 8;
  t.q4_batch_mma_m_tiles = 1;
  t.q4_batch_mma_groups_per_cu = 1;
  t.q4_batch_mma_interleave = 0;
  return t;
}

TEST(MatmulPath, BatchesTakeTensorCoresWhereTheDeviceRunsThemFromTheTunedRows) {
  Tuning t = mma_tuning(2, 4, 2);
  for (uint32_t n : {2u, 9u, 32u}) EXPECT_TRUE(q4_batch_mma(q4(n), true, t)) << n;
  EXPECT_FALSE(q4_batch_mma(q4(8), false, t));  // PoCL, other vendors, pre-sm_80, a failed build
  t.q4_batch_mma_min_rows = 4;
  EXPECT_FALSE(q4_batch_mma(q4(3), true, t));
  EXPECT_TRUE(q4_batch_mma(q4(4), true, t));
  t.q4_batch_mma = 0;
  EXPECT_FALSE(q4_batch_mma(q4(16), true, t));
  // Whole 32-column steps inside one group only.
  EXPECT_FALSE(q4_batch_mma(q4(8, 96 * 16, 48), true, mma_tuning(2, 4, 2)));
  EXPECT_FALSE(q4_batch_mma(q4(8, 4096, 16), true, mma_tuning(2, 4, 2)));
}

MatmulShape q4w(uint32_t n_rows, uint32_t out_rows, uint32_t cols = 4096, uint32_t group = 64) {
  return {n_rows, cols, 4, group, false, out_rows};
}

TEST(MatmulPath, TensorCoreBatchShapeFitsTheBatchTheGroupsAndLocalMemory) {
  Tuning t = mma_tuning(2, 4, 2);  // 8 warps, one m tile, two steps in flight
  const uint32_t cus = 132;
  Q4BatchMmaShape s = q4_batch_mma_shape(q4w(2, 14336), cus, t);
  EXPECT_EQ(s.n_tiles, 1u);
  EXPECT_EQ(s.step, 64u);
  EXPECT_EQ(q4_batch_mma_program(s), "matvec_batch_mma_n1_m1_s4_w8_g64_u2_i0");
  EXPECT_EQ(q4_batch_mma_shape(q4w(8, 14336), cus, t).n_tiles, 1u);
  EXPECT_EQ(q4_batch_mma_shape(q4w(9, 14336), cus, t).n_tiles, 2u);
  EXPECT_EQ(q4_batch_mma_shape(q4w(17, 14336), cus, t).n_tiles, 4u);
  EXPECT_EQ(q4_batch_mma_shape(q4w(64, 14336), cus, t).n_tiles, 4u);  // chunks of 32 rows
  EXPECT_EQ(q4_batch_mma_shape(q4w(64, 14336), cus, t).chunk_rows(), 32u);
  // Steps of 32 columns where groups of 32 (or a row of an odd number of 32s) forbid 64.
  EXPECT_EQ(q4_batch_mma_shape(q4w(4, 14336, 4096, 32), cus, t).step, 32u);
  EXPECT_EQ(q4_batch_mma_shape(q4w(4, 14336, 4096 + 32, 32), cus, t).step, 32u);
  EXPECT_EQ(q4_batch_mma_shape(q4w(4, 14336, 4096 + 32, 64), cus, t).step, 32u);
  // Two m tiles a warp unless the warps' sums would pass 32 KB of local memory.
  t.q4_batch_mma_m_tiles = 2;
  EXPECT_EQ(q4_batch_mma_shape(q4w(32, 14336), cus, t).m_tiles, 2u);  // 8 × 2 × 4 × 512 = 32 KB
  t.q4_batch_mma_warps = 16;
  EXPECT_EQ(q4_batch_mma_shape(q4w(32, 14336), cus, t).m_tiles, 1u);
  EXPECT_EQ(q4_batch_mma_shape(q4w(8, 14336), cus, t).m_tiles, 2u);
  t.q4_batch_mma_unroll = 4;
  // (Two m tiles: four m-warps would make 112 work-groups of 128 rows, fewer than 132 compute units.)
  EXPECT_EQ(q4_batch_mma_program(q4_batch_mma_shape(q4w(8, 14336), cus, t)), "matvec_batch_mma_n1_m2_s2_w16_g64_u4_i0");
  t.q4_batch_mma_interleave = 1;
  EXPECT_EQ(q4_batch_mma_program(q4_batch_mma_shape(q4w(8, 14336), cus, t)), "matvec_batch_mma_n1_m2_s2_w16_g64_u4_i1");
}

// Products of one x (q/k/v, gate/up) of a batch in one launch: 2 or 3 of them, each on the batch
// path, one cols, group size and scale form — whichever batch kernel then runs them (tensor cores from
// q4_batch_mma_min_rows rows, the dp4a or float kernel under it); q4_batch_multi=0 turns it off.
TEST(MatmulPath, BatchProductsOfOneInputShareALaunchWhereTheirShapesAgree) {
  Tuning t = mma_tuning(4, 2, 1);
  t.q4_batch_max_rows = 32;
  const MatmulShape qkv[3] = {q4w(8, 4096), q4w(8, 1024), q4w(8, 1024)};
  EXPECT_TRUE(q4_batch_parts(qkv, 3, 0, t));
  EXPECT_TRUE(q4_batch_parts(qkv, 2, 0, t));
  EXPECT_TRUE(q4_batch_mma(qkv[0], true, t));             // …on tensor cores
  EXPECT_FALSE(q4_batch_parts(qkv, 1, 0, t));   // one product: the launch of its own
  EXPECT_FALSE(q4_batch_parts(qkv, 3, 1, t));   // scales of two forms
  const MatmulShape two[3] = {q4w(2, 4096), q4w(2, 1024), q4w(2, 1024)};
  EXPECT_TRUE(q4_batch_parts(two, 3, 0, t));    // under q4_batch_mma_min_rows: parts of the dp4a or float kernel
  EXPECT_FALSE(q4_batch_mma(two[0], true, t));
  const MatmulShape one[3] = {q4w(1, 4096), q4w(1, 1024), q4w(1, 1024)};
  EXPECT_FALSE(q4_batch_parts(one, 3, 0, t));   // one row: the one-row kernels' own parts
  const MatmulShape wide[3] = {q4w(33, 4096), q4w(33, 1024), q4w(33, 1024)};
  EXPECT_FALSE(q4_batch_parts(wide, 3, 0, t));  // past q4_batch_max_rows: the GEMM
  const MatmulShape rows_differ[2] = {q4w(8, 4096), q4w(4, 1024)};
  EXPECT_FALSE(q4_batch_parts(rows_differ, 2, 0, t));
  const MatmulShape mixed[2] = {q4w(8, 4096), q4w(8, 4096, 4096, 128)};
  EXPECT_FALSE(q4_batch_parts(mixed, 2, 0, t)); // groups differ
  const MatmulShape cols[2] = {q4w(8, 4096), q4w(8, 4096, 2048)};
  EXPECT_FALSE(q4_batch_parts(cols, 2, 0, t));
  t.q4_batch_multi = 0;
  EXPECT_FALSE(q4_batch_parts(qkv, 3, 0, t));
  EXPECT_FALSE(q4_batch_parts(two, 3, 0, t));
}

// A decode batch's producers (norms, the activation) write the rows' 15-bit forms only where the
// product after them takes the dp4a batch kernel: a dp4a device with the kernel tuned on, 2 rows up
// to q4_batch_max_rows, under the tensor-core kernel's rows (or no tensor cores), whole 32-column blocks.
TEST(MatmulPath, ABatchsProducersRoundItsRowsOnlyForTheDp4aBatchKernel) {
  Tuning t = mma_tuning(4, 2, 1);
  t.q4_batch_max_rows = 32;
  t.q4_batch_dp4a = 1;
  EXPECT_TRUE(batch_int15_by_producer(2, 4096, true, true, t));
  EXPECT_TRUE(batch_int15_by_producer(3, 4096, true, true, t));
  EXPECT_FALSE(batch_int15_by_producer(4, 4096, true, true, t));   // tensor cores take 4 rows and more
  EXPECT_TRUE(batch_int15_by_producer(4, 4096, true, false, t));   // …where the device has them
  EXPECT_TRUE(batch_int15_by_producer(32, 4096, true, false, t));
  EXPECT_FALSE(batch_int15_by_producer(33, 4096, true, false, t)); // past the batch kernels: the GEMM
  EXPECT_FALSE(batch_int15_by_producer(1, 4096, true, false, t));  // one row: the one-row pair (int15_scratch)
  EXPECT_FALSE(batch_int15_by_producer(2, 4100, true, false, t));  // not whole blocks
  EXPECT_FALSE(batch_int15_by_producer(2, 4096, false, false, t)); // no dp4a (PoCL, other vendors)
  t.q4_batch_mma = 0;
  EXPECT_TRUE(batch_int15_by_producer(8, 4096, true, true, t));    // tensor cores tuned off
  t.q4_batch_dp4a = 0;
  EXPECT_FALSE(batch_int15_by_producer(2, 4096, true, true, t));   // the float batch kernel reads x itself
}

TEST(MatmulPath, TensorCoreBatchWarpsSideBySideInMOnlyWhileTheLaunchFillsTheDevice) {
  const Tuning t = mma_tuning(2, 4, 2);  // four m-warps wanted, one work-group a compute unit at least
  const uint32_t cus = 132;
  // 14336 rows: 224 work-groups of 64 rows.
  EXPECT_EQ(q4_batch_mma_shape(q4w(32, 14336), cus, t).m_warps, 4u);
  EXPECT_EQ(q4_batch_mma_shape(q4w(32, 14336), cus, t).rows_per_group(), 64u);
  // 4096 rows: 64 or 128 work-groups would leave compute units idle — one warp a row tile, 256.
  EXPECT_EQ(q4_batch_mma_shape(q4w(32, 4096), cus, t).m_warps, 1u);
  // …unless the batch spans chunks: 64 rows are two chunks, 128 work-groups of 32 rows each.
  EXPECT_EQ(q4_batch_mma_shape(q4w(64, 4096), cus, t).m_warps, 2u);
  // A smaller device fills with fewer work-groups.
  EXPECT_EQ(q4_batch_mma_shape(q4w(32, 4096), 16, t).m_warps, 4u);
  Tuning more = t;
  more.q4_batch_mma_groups_per_cu = 2;  // 14336 rows: 224 < 264, so two m-warps (448)
  EXPECT_EQ(q4_batch_mma_shape(q4w(32, 14336), cus, more).m_warps, 2u);
  more.q4_batch_mma_m_warps = 1;
  EXPECT_EQ(q4_batch_mma_shape(q4w(32, 14336), 1, more).m_warps, 1u);
  Tuning kept = t;
  kept.q4_batch_mma_groups_per_cu = 0;  // the tuned m-warps whatever the launch
  EXPECT_EQ(q4_batch_mma_shape(q4w(2, 37), cus, kept).m_warps, 4u);
  Tuning two_warps = t;
  two_warps.q4_batch_mma_warps = 2;  // never more m-warps than warps
  EXPECT_EQ(q4_batch_mma_shape(q4w(32, 14336), 1, two_warps).m_warps, 2u);
}

// MATMUL_ID: the rows-a-team kernel takes 4-bit experts in whole steps of 32 columns inside a group
// (Gemma 4's and Qwen3.5's experts: 2816 / 2048 / 704 / 512 columns, groups of 64), nothing else.
TEST(MatmulPath, ProductsByExpertIdTakeTheRowsATeamKernelOnlyForFourBitSteps) {
  EXPECT_TRUE(matmul_id_takes_q4_rows(4, 2816 * 4 / 32, 64));
  EXPECT_TRUE(matmul_id_takes_q4_rows(4, 512 * 4 / 32, 32));
  EXPECT_FALSE(matmul_id_takes_q4_rows(4, 2816 * 4 / 32, 16));  // a group inside a step
  EXPECT_FALSE(matmul_id_takes_q4_rows(4, 8, 0));
  EXPECT_FALSE(matmul_id_takes_q4_rows(4, 88 * 4 / 32, 32));  // 11 words a row (cols 88): no whole steps
  EXPECT_FALSE(matmul_id_takes_q4_rows(8, 2048 * 8 / 32, 64));
  EXPECT_FALSE(matmul_id_takes_q4_rows(0, 0, 0));  // plain weights
}

}  // namespace
}  // namespace sluice::ocl
