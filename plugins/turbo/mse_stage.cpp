#include "turbo/mse_stage.h"

#include <algorithm>
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

MseStage::MseStage(uint32_t head_dim, uint32_t bits, uint64_t seed, ScaleMode mode)
    : head_dim_(head_dim), bits_(bits), mode_(mode) {
  if (head_dim == 0 || head_dim % 16 != 0 || head_dim > 1024)
    throw std::invalid_argument("head_dim must be a multiple of 16 up to 1024 (got " + std::to_string(head_dim) + ")");
  if (bits < 1 || bits > kMaxBits) throw std::invalid_argument("bits must be 1 to 4");
  uint64_t state = seed;
  for (uint32_t at = 0; at < head_dim;) {
    uint32_t n = 256;
    while (n > head_dim - at) n /= 2;
    const CodebookEntry* cb = find_codebook(n, bits);
    if (!cb) throw std::invalid_argument("no codebook for block size " + std::to_string(n));
    MseBlock b{at, n, row_bytes_, BlockRotation(n, splitmix64(state)), cb, {}, make_lut(cb->centroids, bits)};
    for (uint32_t k = 0; k + 1 < (1u << bits); ++k) b.boundaries[k] = 0.5f * (cb->centroids[k] + cb->centroids[k + 1]);
    row_bytes_ += 2 + n * bits / 8;
    blocks_.push_back(std::move(b));
    at += n;
  }
  switch (bits) {
    case 1: dot_ = dot_impl<1>; axpy_ = axpy_impl<1>; unpack_ = unpack_impl<1>; break;
    case 2: dot_ = dot_impl<2>; axpy_ = axpy_impl<2>; unpack_ = unpack_impl<2>; break;
    case 3: dot_ = dot_impl<3>; axpy_ = axpy_impl<3>; unpack_ = unpack_impl<3>; break;
    default: dot_ = dot_impl<4>; axpy_ = axpy_impl<4>; unpack_ = unpack_impl<4>; break;
  }
}

void MseStage::rotate(const float* x, float* y) const {
  for (const auto& b : blocks_) b.rotation.forward(x + b.offset, y + b.offset);
}

void MseStage::unrotate(const float* y, float* x) const {
  for (const auto& b : blocks_) b.rotation.inverse(y + b.offset, x + b.offset);
}

void MseStage::encode_rotated(const float* y, std::byte* row, float* yhat) const {
  uint8_t idx[256];
  const uint32_t levels = 1u << bits_;
  for (const auto& b : blocks_) {
    const float* yb = y + b.offset;
    double norm2 = 0;
    for (uint32_t j = 0; j < b.n; ++j) norm2 += static_cast<double>(yb[j]) * yb[j];
    std::byte* out = row + b.byte_offset;
    if (!(norm2 > 0) || !std::isfinite(norm2)) {  // zero or non-finite input: store a zero block
      std::memset(out, 0, 2 + b.n * bits_ / 8);
      if (yhat) std::fill_n(yhat + b.offset, b.n, 0.0f);
      continue;
    }
    const float to_z = static_cast<float>(std::sqrt(b.n / norm2));
    double cc = 0, yc = 0;
    for (uint32_t j = 0; j < b.n; ++j) {
      const float z = yb[j] * to_z;
      uint32_t k = 0;
      while (k + 1 < levels && z > b.boundaries[k]) ++k;
      idx[j] = static_cast<uint8_t>(k);
      const double c = b.codebook->centroids[k];
      cc += c * c;
      yc += c * yb[j];
    }
    double s;
    switch (mode_) {
      case ScaleMode::kRaw: s = std::sqrt(norm2 / b.n); break;
      case ScaleMode::kLeastSquares: s = yc / cc; break;
      case ScaleMode::kUnbiased: s = yc > 0 ? norm2 / yc : std::sqrt(norm2 / cc); break;
      default: s = std::sqrt(norm2 / cc); break;
    }
    write_f16(out, static_cast<float>(s));
    auto* packed = reinterpret_cast<uint8_t*>(out + 2);
    switch (bits_) {
      case 1: pack_indices<1>(idx, b.n, packed); break;
      case 2: pack_indices<2>(idx, b.n, packed); break;
      case 3: pack_indices<3>(idx, b.n, packed); break;
      default: pack_indices<4>(idx, b.n, packed); break;
    }
    if (yhat) {
      const float stored = read_f16(out);
      for (uint32_t j = 0; j < b.n; ++j) yhat[b.offset + j] = stored * b.codebook->centroids[idx[j]];
    }
  }
}

void MseStage::reconstruct_rotated(const std::byte* row, float* yhat) const { unpack_(*this, row, yhat); }

template <int B>
float MseStage::dot_impl(const MseStage& s, const std::byte* row, const float* q) {
  float sum = 0.0f;
  for (const auto& b : s.blocks_) {
    const std::byte* p = row + b.byte_offset;
    sum += read_f16(p) * dot_packed<B>(reinterpret_cast<const uint8_t*>(p + 2), q + b.offset, b.n, b.lut);
  }
  return sum;
}

template <int B>
void MseStage::axpy_impl(const MseStage& s, float a, const std::byte* row, float* acc) {
  for (const auto& b : s.blocks_) {
    const std::byte* p = row + b.byte_offset;
    axpy_packed<B>(a * read_f16(p), reinterpret_cast<const uint8_t*>(p + 2), acc + b.offset, b.n, b.lut);
  }
}

template <int B>
void MseStage::unpack_impl(const MseStage& s, const std::byte* row, float* y) {
  for (const auto& b : s.blocks_) {
    const std::byte* p = row + b.byte_offset;
    unpack_scaled<B>(read_f16(p), reinterpret_cast<const uint8_t*>(p + 2), y + b.offset, b.n, b.lut);
  }
}

}  // namespace sluice::turbo
