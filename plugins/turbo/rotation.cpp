#include "turbo/rotation.h"

#include <cmath>

#include "util/vec.h"

namespace sluice::turbo {

void fwht(float* v, uint32_t n) {
  uint32_t h = 1;
#ifdef SLUICE_CPU_AVX2
  // Stages h = 1, 2, 4 inside each register: r = a·sign + swapped(a).
  const __m256 s1 = _mm256_setr_ps(1, -1, 1, -1, 1, -1, 1, -1);
  const __m256 s2 = _mm256_setr_ps(1, 1, -1, -1, 1, 1, -1, -1);
  const __m256 s4 = _mm256_setr_ps(1, 1, 1, 1, -1, -1, -1, -1);
  for (uint32_t i = 0; i < n; i += 8) {
    __m256 a = _mm256_loadu_ps(v + i);
    a = _mm256_fmadd_ps(a, s1, _mm256_permute_ps(a, 0xB1));
    a = _mm256_fmadd_ps(a, s2, _mm256_permute_ps(a, 0x4E));
    a = _mm256_fmadd_ps(a, s4, _mm256_permute2f128_ps(a, a, 0x01));
    _mm256_storeu_ps(v + i, a);
  }
  h = 8;
  for (; h < n; h *= 2)
    for (uint32_t i = 0; i < n; i += 2 * h)
      for (uint32_t j = i; j < i + h; j += 8) {
        const __m256 a = _mm256_loadu_ps(v + j), b = _mm256_loadu_ps(v + j + h);
        _mm256_storeu_ps(v + j, _mm256_add_ps(a, b));
        _mm256_storeu_ps(v + j + h, _mm256_sub_ps(a, b));
      }
#endif
  for (; h < n; h *= 2)
    for (uint32_t i = 0; i < n; i += 2 * h)
      for (uint32_t j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
}

BlockRotation::BlockRotation(uint32_t n, uint64_t seed) : scaled_signs_(n) {
  uint64_t state = seed;
  const float scale = 1.0f / std::sqrt(static_cast<float>(n));
  for (uint32_t i = 0; i < n; ++i) scaled_signs_[i] = (splitmix64(state) >> 63) ? -scale : scale;
}

void BlockRotation::forward(const float* x, float* y) const {
  const uint32_t n = size();
  for (uint32_t i = 0; i < n; ++i) y[i] = x[i] * scaled_signs_[i];
  fwht(y, n);
}

void BlockRotation::inverse(const float* y, float* x) const {
  const uint32_t n = size();
  if (x != y)
    for (uint32_t i = 0; i < n; ++i) x[i] = y[i];
  fwht(x, n);
  for (uint32_t i = 0; i < n; ++i) x[i] *= scaled_signs_[i];
}

}  // namespace sluice::turbo
