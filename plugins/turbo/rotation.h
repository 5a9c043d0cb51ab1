#pragma once
// The randomized Walsh–Hadamard rotation of one block of n = 2^k values:
//   forward  y = H·diag(s)·x / √n,   inverse  x = diag(s)·H·y / √n   (H symmetric, H·H = n·I),
// with s fixed ±1 signs drawn from a seeded generator (the same seed gives the same rotation on
// every machine). O(n log n), in place, AVX2 for the stages inside one 8-lane register.
#include <cstdint>
#include <vector>

namespace sluice::turbo {

// Unnormalised in-place Walsh–Hadamard transform; n a power of two, n ≥ 8.
void fwht(float* v, uint32_t n);

// splitmix64: a tiny, portable generator for the fixed signs and the QJL matrix.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class BlockRotation {
 public:
  BlockRotation(uint32_t n, uint64_t seed);
  uint32_t size() const { return static_cast<uint32_t>(scaled_signs_.size()); }
  const std::vector<float>& scaled_signs() const { return scaled_signs_; }  // s_i / √n
  void forward(const float* x, float* y) const;  // x and y may alias
  void inverse(const float* y, float* x) const;  // x and y may alias

 private:
  std::vector<float> scaled_signs_;
};

}  // namespace sluice::turbo
