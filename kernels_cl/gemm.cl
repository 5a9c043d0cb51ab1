// C[m, n] = sum_k A[m, k] * B[n, k] (row-major A [M, K], B [N, K], C with leading dimension ldc):
// prefill's x · Wᵀ when CLBlast is unavailable. 16×16 tiles staged through local memory.
#define GEMM_TS 16

__kernel __attribute__((reqd_work_group_size(GEMM_TS, GEMM_TS, 1)))
void gemm_nt(uint M, uint N, uint K, __global const float* A, ulong a_off, uint lda, __global const float* B,
             ulong b_off, uint ldb, __global float* C, ulong c_off, uint ldc) {
  __local float as[GEMM_TS][GEMM_TS + 1];
  __local float bs[GEMM_TS][GEMM_TS + 1];
  const uint n = get_global_id(0), m = get_global_id(1);
  const uint ln = get_local_id(0), lm = get_local_id(1);
  const uint m0 = get_group_id(1) * GEMM_TS, n0 = get_group_id(0) * GEMM_TS;
  A += a_off;
  B += b_off;
  C += c_off;
  float acc = 0.0f;
  for (uint k0 = 0; k0 < K; k0 += GEMM_TS) {
    // Work-item (lm, ln) loads A[m0 + lm, k0 + ln] and B[n0 + lm, k0 + ln].
    as[lm][ln] = (m0 + lm < M && k0 + ln < K) ? A[(ulong)(m0 + lm) * lda + k0 + ln] : 0.0f;
    bs[lm][ln] = (n0 + lm < N && k0 + ln < K) ? B[(ulong)(n0 + lm) * ldb + k0 + ln] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint k = 0; k < GEMM_TS; ++k) acc += as[lm][k] * bs[ln][k];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (m < M && n < N) C[(ulong)m * ldc + n] = acc;
}
