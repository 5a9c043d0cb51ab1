#pragma once
// The committed Lloyd–Max codebooks (codebook_tables.inc, written by gen_turbo_codebooks from
// lloyd_max.h and checked by tests/kvcodec): one per rotation block size n and bit width b, in
// z = t·√n units, so the same table serves any vector norm.
#include <cstdint>
#include <span>

namespace sluice::turbo {

inline constexpr uint32_t kBlockSizes[] = {16, 32, 64, 128, 256};
inline constexpr uint32_t kMaxBits = 4;

struct CodebookEntry {
  uint32_t block_dim, bits;
  double distortion;   // E[(z − Q(z))²]: the MSE of a unit vector quantized with this codebook
  float centroids[16]; // 2^bits used, increasing
};

std::span<const CodebookEntry> committed_codebooks();
// The codebook for block size n and b bits, or nullptr.
const CodebookEntry* find_codebook(uint32_t block_dim, uint32_t bits);

}  // namespace sluice::turbo
