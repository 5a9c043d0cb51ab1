#pragma once
// TurboQuant's MSE stage (Zandieh et al., arXiv 2504.19874, Algorithm 1) over a head vector.
//
// Blocks: the head vector is cut into power-of-two blocks, largest first, each at most 256 values
// (64 → 64; 80 → 64 + 16; 96 → 64 + 32; 128 → 128; 256 → 256). A Walsh–Hadamard rotation needs a
// power-of-two size, and cutting instead of zero-padding keeps every stored bit useful (80 padded to
// 128 would cost 60% more bits). Each block has its own fixed random signs and codebook: the one
// fitted to the exact coordinate law of a rotated unit vector of that size (lloyd_max.h).
//
// Per block, stored: an f16 scale s and n b-bit codebook indices. Encoding a block x: rotate
// (y = H·D·x/√n), normalise (z = y·√n/‖y‖), index each z_j by its nearest centroid c, and pick s so
// that s·c is the reconstruction of y:
//   exact (default): s = ‖y‖ / ‖c‖  — the norm correction: the reconstruction keeps x's length;
//   raw:             s = ‖y‖ / √n    — the paper's quantizer applied to x/‖x‖, norm kept separately;
//   ls:              s = ⟨y, c⟩ / ‖c‖² — least squares;
//   unbiased:        s = ‖y‖² / ⟨y, c⟩ — ⟨y, s·c⟩ = ‖y‖²: the reconstruction's component along x is x
//                    itself, so inner products are not shrunk by the quantizer (the MSE stage
//                    alone shrinks them by about D_mse: attention logits would lose temperature).
// Everything after encoding stays in the rotated domain: ⟨q, x̂⟩ = Σ_blocks s·⟨H·D·q/√n, c⟩.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "turbo/codebook.h"
#include "turbo/packed.h"
#include "turbo/rotation.h"

namespace sluice::turbo {

enum class ScaleMode { kExact, kRaw, kLeastSquares, kUnbiased };

struct MseBlock {
  uint32_t offset, n;     // values [offset, offset + n) of the head vector
  uint32_t byte_offset;   // of the block's f16 scale in the row; indices follow
  BlockRotation rotation;
  const CodebookEntry* codebook;
  float boundaries[15];   // midpoints between neighbouring centroids (z units)
  Lut lut;
};

class MseStage {
 public:
  // Throws std::invalid_argument when head_dim is not a positive multiple of 16 or bits ∉ [1, 4].
  MseStage(uint32_t head_dim, uint32_t bits, uint64_t seed, ScaleMode mode);

  uint32_t head_dim() const { return head_dim_; }
  uint32_t bits() const { return bits_; }
  uint32_t row_bytes() const { return row_bytes_; }
  const std::vector<MseBlock>& blocks() const { return blocks_; }

  void rotate(const float* x, float* y) const;    // every block forward; may alias
  void unrotate(const float* y, float* x) const;  // every block inverse; may alias
  // Encodes a rotated vector; yhat (optional) gets the reconstruction in the rotated domain.
  void encode_rotated(const float* y, std::byte* row, float* yhat) const;
  void reconstruct_rotated(const std::byte* row, float* yhat) const;
  float dot_rotated(const std::byte* row, const float* q_rot) const { return dot_(*this, row, q_rot); }
  void axpy_rotated(float a, const std::byte* row, float* acc) const { axpy_(*this, a, row, acc); }

 private:
  using DotFn = float (*)(const MseStage&, const std::byte*, const float*);
  using AxpyFn = void (*)(const MseStage&, float, const std::byte*, float*);
  using UnpackFn = void (*)(const MseStage&, const std::byte*, float*);
  template <int B> static float dot_impl(const MseStage& s, const std::byte* row, const float* q);
  template <int B> static void axpy_impl(const MseStage& s, float a, const std::byte* row, float* acc);
  template <int B> static void unpack_impl(const MseStage& s, const std::byte* row, float* y);

  uint32_t head_dim_, bits_, row_bytes_ = 0;
  ScaleMode mode_;
  std::vector<MseBlock> blocks_;
  DotFn dot_;
  AxpyFn axpy_;
  UnpackFn unpack_;
};

float read_f16(const std::byte* p);
void write_f16(std::byte* p, float v);  // clamps to the f16 range

}  // namespace sluice::turbo
