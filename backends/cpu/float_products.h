#pragma once
// Float matrix products on the CPU, ours rather than a BLAS's: prefill attention's two (S = scale·QKᵀ,
// then O = PV) and the prefill product of float weights (bf16, f16, f32, MXFP4 converted to float32 by
// blocks of rows: Y = X Wᵀ).
//
// Why not a BLAS: it picks its kernels from the processor it recognizes, and on one it does not
// (OpenBLAS 0.3.21 on a virtualised Sapphire Rapids takes its generic SSE3 kernel, "Prescott") attention's
// products alone were 15 % of a 512-token prefill, and a bf16 model prefilled at 42–58 tokens/s against
// ~220 on these tiles — within a few % of OpenBLAS's own AVX-512 kernel forced on the same processor
// (perf/NOTES.md). These are written once on GCC's vector extension (16
// floats: one AVX-512 register, two AVX ones, four SSE ones), so every build gets the widest registers its
// -march allows.
//
// Both know the causal shape of a prefill block: row i of the left operand meets the first
// first_count + i rows of the right one (a block's first query sees first_count keys), so tiles that no
// row of a tile of rows meets are skipped — half the work of the block that ends at the diagonal. A plain
// product passes first_count = all of them.
#include <cstddef>
#include <vector>

namespace sluice::cpu {

// Rows as times_packed_rows reads them: tiles of kTile rows, each [dim][kTile] (one row's values down a
// column), the last tile padded with zero rows.
struct PackedRows {
  static constexpr std::size_t kTile = 16;
  std::vector<float> values;
  std::size_t n_rows = 0, dim = 0;
  const float* tile(std::size_t t) const { return values.data() + t * kTile * dim; }
};

// Packs n_rows rows of `dim` floats (row-major, contiguous) into `out`, reusing its storage.
void pack_rows(const float* rows, std::size_t n_rows, std::size_t dim, PackedRows& out);

// c[i·c_stride + j] = scale · Σ_d a[i·a_stride + d] · row_j[d] for each i < n_a and every packed row j
// that row i meets (j < min(packed.n_rows, first_count + i)). Entries past a row's own count may be
// written too (products with rows its tile's later rows meet, never at or past packed.n_rows): a
// causal caller masks them.
void times_packed_rows(const float* a, std::size_t a_stride, std::size_t n_a, const PackedRows& packed, std::size_t first_count,
                       float scale, float* c, std::size_t c_stride);

// o[i·o_stride + d] = Σ_j p[i·p_stride + j] · v[j·dim + d] over the rows of v that row i meets
// (j < min(n_v, first_count + i)), for d < dim; o is overwritten. The rows of p must hold zeros from
// their own count up to their tile's (what a causal softmax leaves there): a tile of rows runs over
// its last row's count.
void times_rows(const float* p, std::size_t p_stride, std::size_t n_p, const float* v, std::size_t n_v, std::size_t dim,
                std::size_t first_count, float* o, std::size_t o_stride);

}  // namespace sluice::cpu
