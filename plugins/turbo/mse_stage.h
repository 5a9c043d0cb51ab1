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
//
// Rotation choice (rotations = R > 1): each block has R fixed sign vectors D_0 … D_{R−1}. The encoder
// quantizes the block under every one and keeps the candidate with the smallest error; its id takes
// the low 4 bits of the block header and the scale keeps 12 (the f16 pattern without its sign bit
// and its 3 lowest mantissa bits: 0.2% mean relative error, negligible next to the quantizer's).
// Same bits per value; on random and on real K/V rows best-of-16 lowers the MSE by ~29% (best-of-4:
// ~20%). The fused state then holds the query rotated R ways (R × head_dim floats), values
// accumulate into R rotated accumulators, and finishing rotates each back once and sums them.
// R = 1 is the paper's quantizer exactly, with a plain f16 scale.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "turbo/codebook.h"
#include "turbo/packed.h"
#include "turbo/rotation.h"

namespace sluice::turbo {

enum class ScaleMode { kExact = 0, kRaw = 1, kLeastSquares = 2, kUnbiased = 3 };  // values: the OpenCL source's SL_TQ_SCALE_MODE

struct MseBlock {
  uint32_t offset, n;     // values [offset, offset + n) of the head vector
  uint32_t byte_offset;   // of the block's 16-bit header (scale, rotation id) in the row; indices follow
  std::vector<BlockRotation> rotations;  // the R candidates
  const CodebookEntry* codebook;
  float boundaries[15];   // midpoints between neighbouring centroids (z units)
  Lut lut;
};

class MseStage {
 public:
  static constexpr uint32_t kMaxRotations = 16;
  // Throws std::invalid_argument when head_dim is not a positive multiple of 16 up to 1024, bits ∉
  // [1, 4] or rotations ∉ {1, 2, 4, 8, 16}.
  MseStage(uint32_t head_dim, uint32_t bits, uint64_t seed, ScaleMode mode, uint32_t rotations = 1);

  uint32_t head_dim() const { return head_dim_; }
  uint32_t bits() const { return bits_; }
  uint32_t rotations() const { return rotations_; }
  ScaleMode scale_mode() const { return mode_; }
  uint32_t row_bytes() const { return row_bytes_; }
  const std::vector<MseBlock>& blocks() const { return blocks_; }
  // The fused domain: slot r (head_dim floats) holds every block under its candidate rotation r.
  uint32_t domain_dim() const { return rotations_ * head_dim_; }

  void encode(const float* x, std::byte* row) const;       // picks each block's best rotation
  void decode(const std::byte* row, float* x) const;       // back to head_dim floats
  void rotate_all(const float* x, float* domain) const;    // x under every candidate
  void unrotate_sum(const float* domain, float* x) const;  // Σ_r inverse_r(domain slot r)
  float dot(const std::byte* row, const float* domain_q) const { return dot_(*this, row, domain_q); }
  void axpy(float a, const std::byte* row, float* domain_acc) const { axpy_(*this, a, row, domain_acc); }

  // With one rotation (turbo-prod): the rotated domain is head_dim floats.
  void rotate(const float* x, float* y) const;    // may alias
  void unrotate(const float* y, float* x) const;  // may alias
  // Encodes a rotated vector; yhat (optional) gets the reconstruction in the rotated domain.
  void encode_rotated(const float* y, std::byte* row, float* yhat) const;
  void reconstruct_rotated(const std::byte* row, float* yhat) const;

  // A block header: scale and rotation id.
  struct Header {
    float scale;
    uint32_t rotation;
  };
  Header header(const std::byte* p) const;

 private:
  using DotFn = float (*)(const MseStage&, const std::byte*, const float*);
  using AxpyFn = void (*)(const MseStage&, float, const std::byte*, float*);
  using UnpackFn = void (*)(float, const uint8_t*, float*, uint32_t, const Lut&);
  using PackFn = void (*)(const uint8_t*, uint32_t, uint8_t*);
  template <int B> static float dot_impl(const MseStage& s, const std::byte* row, const float* q);
  template <int B> static void axpy_impl(const MseStage& s, float a, const std::byte* row, float* acc);
  // Quantizes one rotated block: indices, scale and the squared error of the reconstruction.
  float quantize_block(const MseBlock& b, const float* y, uint8_t* idx, double* err) const;
  void write_header(std::byte* p, float scale, uint32_t rotation) const;

  uint32_t head_dim_, bits_, rotations_, row_bytes_ = 0;
  ScaleMode mode_;
  std::vector<MseBlock> blocks_;
  DotFn dot_;
  AxpyFn axpy_;
  UnpackFn unpack_;
  PackFn pack_;
};

float read_f16(const std::byte* p);
void write_f16(std::byte* p, float v);  // clamps to the f16 range

}  // namespace sluice::turbo
