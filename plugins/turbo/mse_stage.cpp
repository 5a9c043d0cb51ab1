#include "turbo/mse_stage.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace sluice::turbo {

float read_f16(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return cpu::f16_to_f32(h);
}

void write_f16(std::byte* p, float v) {
  const uint16_t h = cpu::f32_to_f16(std::clamp(v, -65504.0f, 65504.0f));
  std::memcpy(p, &h, 2);
}

MseStage::MseStage(uint32_t head_dim, uint32_t bits, uint64_t seed, ScaleMode mode, uint32_t rotations)
    : head_dim_(head_dim), bits_(bits), rotations_(rotations), mode_(mode) {
  if (head_dim == 0 || head_dim % 16 != 0 || head_dim > 1024)
    throw std::invalid_argument("head_dim must be a multiple of 16 up to 1024 (got " + std::to_string(head_dim) + ")");
  if (bits < 1 || bits > kMaxBits) throw std::invalid_argument("bits must be 1 to 4");
  if (rotations == 0 || rotations > kMaxRotations || (rotations & (rotations - 1)))
    throw std::invalid_argument("rotations must be 1, 2, 4, 8 or 16 (got " + std::to_string(rotations) + ")");
  uint64_t state = seed;
  for (uint32_t at = 0; at < head_dim;) {
    uint32_t n = 256;
    while (n > head_dim - at) n /= 2;
    const CodebookEntry* cb = find_codebook(n, bits);
    if (!cb) throw std::invalid_argument("no codebook for block size " + std::to_string(n));
    MseBlock b{at, n, row_bytes_, {}, cb, {}, make_lut(cb->centroids, bits)};
    for (uint32_t r = 0; r < rotations; ++r) b.rotations.emplace_back(n, splitmix64(state));
    for (uint32_t k = 0; k + 1 < (1u << bits); ++k) b.boundaries[k] = 0.5f * (cb->centroids[k] + cb->centroids[k + 1]);
    row_bytes_ += 2 + n * bits / 8;
    blocks_.push_back(std::move(b));
    at += n;
  }
  switch (bits) {
    case 1: dot_ = dot_impl<1>; axpy_ = axpy_impl<1>; unpack_ = unpack_scaled<1>; pack_ = pack_indices<1>; break;
    case 2: dot_ = dot_impl<2>; axpy_ = axpy_impl<2>; unpack_ = unpack_scaled<2>; pack_ = pack_indices<2>; break;
    case 3: dot_ = dot_impl<3>; axpy_ = axpy_impl<3>; unpack_ = unpack_scaled<3>; pack_ = pack_indices<3>; break;
    default: dot_ = dot_impl<4>; axpy_ = axpy_impl<4>; unpack_ = unpack_scaled<4>; pack_ = pack_indices<4>; break;
  }
}

MseStage::Header MseStage::header(const std::byte* p) const {
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (rotations_ == 1) return {cpu::f16_to_f32(h), 0};
  return {cpu::f16_to_f32(static_cast<uint16_t>((h >> 4) << 3)), h & 15u};
}

void MseStage::write_header(std::byte* p, float scale, uint32_t rotation) const {
  if (rotations_ == 1) {
    write_f16(p, scale);
    return;
  }
  const uint32_t h = cpu::f32_to_f16(std::clamp(scale, 0.0f, 65504.0f)) & 0x7fffu;
  const uint32_t h12 = std::min<uint32_t>((h + 4) >> 3, 0xfffu);  // round to 12 bits
  const auto field = static_cast<uint16_t>(h12 << 4 | rotation);
  std::memcpy(p, &field, 2);
}

float MseStage::quantize_block(const MseBlock& b, const float* y, uint8_t* idx, double* err) const {
  const double norm2 = cpu::dot_f32(y, y, b.n);
  if (!(norm2 > 0) || !std::isfinite(norm2)) {  // zero or non-finite input: a zero block
    std::memset(idx, 0, b.n);
    *err = std::isfinite(norm2) ? norm2 : 0.0;
    return 0.0f;
  }
  const float to_z = static_cast<float>(std::sqrt(b.n / norm2));
  const uint32_t levels = 1u << bits_;
  double cc = 0, yc = 0;
  uint32_t j = 0;
#ifdef SLUICE_CPU_AVX2
  const __m256 lo = _mm256_load_ps(b.lut.lo), hi = _mm256_load_ps(b.lut.hi), scale = _mm256_set1_ps(to_z);
  __m256 ccv = _mm256_setzero_ps(), ycv = _mm256_setzero_ps();
  alignas(32) int32_t lanes[8];
  for (; j + 8 <= b.n; j += 8) {
    const __m256 yv = _mm256_loadu_ps(y + j), z = _mm256_mul_ps(yv, scale);
    __m256i k = _mm256_setzero_si256();
    for (uint32_t t = 0; t + 1 < levels; ++t)  // count the boundaries below z
      k = _mm256_sub_epi32(k, _mm256_castps_si256(_mm256_cmp_ps(z, _mm256_set1_ps(b.boundaries[t]), _CMP_GT_OQ)));
    __m256 c = _mm256_permutevar8x32_ps(lo, k);
    if (bits_ == 4) c = _mm256_blendv_ps(c, _mm256_permutevar8x32_ps(hi, k), _mm256_castsi256_ps(_mm256_slli_epi32(k, 28)));
    ccv = _mm256_fmadd_ps(c, c, ccv);
    ycv = _mm256_fmadd_ps(c, yv, ycv);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), k);
    for (int l = 0; l < 8; ++l) idx[j + l] = static_cast<uint8_t>(lanes[l]);
  }
  cc = cpu::hsum(ccv);
  yc = cpu::hsum(ycv);
#endif
  for (; j < b.n; ++j) {
    const float z = y[j] * to_z;
    uint32_t k = 0;
    while (k + 1 < levels && z > b.boundaries[k]) ++k;
    idx[j] = static_cast<uint8_t>(k);
    const double c = b.codebook->centroids[k];
    cc += c * c;
    yc += c * y[j];
  }
  double s;
  switch (mode_) {
    case ScaleMode::kRaw: s = std::sqrt(norm2 / b.n); break;
    case ScaleMode::kLeastSquares: s = yc / cc; break;
    case ScaleMode::kUnbiased: s = yc > 0 ? norm2 / yc : std::sqrt(norm2 / cc); break;
    default: s = std::sqrt(norm2 / cc); break;
  }
  *err = std::max(0.0, norm2 - 2 * s * yc + s * s * cc);
  return static_cast<float>(s);
}

void MseStage::encode(const float* x, std::byte* row) const {
  std::array<float, 256> y;
  std::array<uint8_t, 256> idx, best_idx;
  for (const auto& b : blocks_) {
    double best = INFINITY;
    float best_scale = 0.0f;
    uint32_t best_rot = 0;
    for (uint32_t r = 0; r < rotations_; ++r) {
      b.rotations[r].forward(x + b.offset, y.data());
      double err;
      const float s = quantize_block(b, y.data(), idx.data(), &err);
      if (r == 0 || err < best) {
        best = err;
        best_scale = s;
        best_rot = r;
        std::copy_n(idx.begin(), b.n, best_idx.begin());
      }
    }
    write_header(row + b.byte_offset, best_scale, best_rot);
    pack_(best_idx.data(), b.n, reinterpret_cast<uint8_t*>(row + b.byte_offset + 2));
  }
}

void MseStage::decode(const std::byte* row, float* x) const {
  for (const auto& b : blocks_) {
    const std::byte* p = row + b.byte_offset;
    const Header h = header(p);
    unpack_(h.scale, reinterpret_cast<const uint8_t*>(p + 2), x + b.offset, b.n, b.lut);
    b.rotations[h.rotation].inverse(x + b.offset, x + b.offset);
  }
}

void MseStage::rotate_all(const float* x, float* domain) const {
  for (uint32_t r = 0; r < rotations_; ++r)
    for (const auto& b : blocks_) b.rotations[r].forward(x + b.offset, domain + r * head_dim_ + b.offset);
}

void MseStage::unrotate_sum(const float* domain, float* x) const {
  for (const auto& b : blocks_) b.rotations[0].inverse(domain + b.offset, x + b.offset);
  std::array<float, 256> tmp;
  for (uint32_t r = 1; r < rotations_; ++r)
    for (const auto& b : blocks_) {
      b.rotations[r].inverse(domain + r * head_dim_ + b.offset, tmp.data());
      for (uint32_t j = 0; j < b.n; ++j) x[b.offset + j] += tmp[j];
    }
}

void MseStage::rotate(const float* x, float* y) const {
  for (const auto& b : blocks_) b.rotations[0].forward(x + b.offset, y + b.offset);
}

void MseStage::unrotate(const float* y, float* x) const {
  for (const auto& b : blocks_) b.rotations[0].inverse(y + b.offset, x + b.offset);
}

void MseStage::encode_rotated(const float* y, std::byte* row, float* yhat) const {
  std::array<uint8_t, 256> idx;
  for (const auto& b : blocks_) {
    double err;
    const float s = quantize_block(b, y + b.offset, idx.data(), &err);
    std::byte* p = row + b.byte_offset;
    write_header(p, s, 0);
    pack_(idx.data(), b.n, reinterpret_cast<uint8_t*>(p + 2));
    if (yhat) {
      const float stored = header(p).scale;
      for (uint32_t j = 0; j < b.n; ++j) yhat[b.offset + j] = stored * b.codebook->centroids[idx[j]];
    }
  }
}

void MseStage::reconstruct_rotated(const std::byte* row, float* yhat) const {
  for (const auto& b : blocks_) {
    const std::byte* p = row + b.byte_offset;
    unpack_(header(p).scale, reinterpret_cast<const uint8_t*>(p + 2), yhat + b.offset, b.n, b.lut);
  }
}

template <int B>
float MseStage::dot_impl(const MseStage& s, const std::byte* row, const float* q) {
  float sum = 0.0f;
  for (const auto& b : s.blocks_) {
    const std::byte* p = row + b.byte_offset;
    const Header h = s.header(p);
    sum += h.scale * dot_packed<B>(reinterpret_cast<const uint8_t*>(p + 2), q + h.rotation * s.head_dim_ + b.offset, b.n, b.lut);
  }
  return sum;
}

template <int B>
void MseStage::axpy_impl(const MseStage& s, float a, const std::byte* row, float* acc) {
  for (const auto& b : s.blocks_) {
    const std::byte* p = row + b.byte_offset;
    const Header h = s.header(p);
    axpy_packed<B>(a * h.scale, reinterpret_cast<const uint8_t*>(p + 2), acc + h.rotation * s.head_dim_ + b.offset, b.n, b.lut);
  }
}

}  // namespace sluice::turbo
