#pragma once
// The two float products of prefill attention on the CPU: scores S = scale · Q Kᵀ, then O = P V.
//
// Ours rather than a BLAS's because a BLAS picks its kernels from the processor it recognizes: on a
// machine it does not (OpenBLAS 0.3.21 on a virtualised Sapphire Rapids takes its generic SSE3 kernel,
// "Prescott") these two products were 15 % of a 512-token prefill. The kernels below are written once
// on GCC's vector extension (16 floats: one AVX-512 register, two AVX ones, four SSE ones), so every
// build gets the widest registers its -march allows.
//
// Both products know the causal shape of a prefill block: query row i sees the first key_count + i keys
// (the block's first query sees key_count), so tiles of keys no row of a tile of queries sees are
// skipped — half the work in the block that ends at the diagonal.
#include <cstddef>
#include <vector>

namespace sluice::cpu {

// The keys as the score product reads them: tiles of kKeyTile keys, each [dim][kKeyTile] (one key's
// values down a column), the last tile padded with zero keys.
struct PackedKeys {
  static constexpr std::size_t kKeyTile = 16;
  std::vector<float> values;
  std::size_t n_keys = 0, dim = 0;
  const float* tile(std::size_t t) const { return values.data() + t * kKeyTile * dim; }
};

// Packs n_keys rows of `dim` floats (row-major, contiguous) into `out`, reusing its storage.
void pack_keys(const float* keys, std::size_t n_keys, std::size_t dim, PackedKeys& out);

// s[i·s_stride + j] = scale · Σ_d q[i·q_stride + d] · key_j[d] for each row i < n_queries and every key j
// the row sees (j < min(keys.n_keys, key_count + i)). Entries past a row's own keys may be written too
// (scores of keys its tile's later rows see, never at or past keys.n_keys): the caller masks them.
void score_keys(const float* q, std::size_t q_stride, std::size_t n_queries, const PackedKeys& keys, std::size_t key_count,
                float scale, float* s, std::size_t s_stride);

// o[i·o_stride + d] = Σ_j p[i·p_stride + j] · v[j·dim + d] over the keys row i sees (j < min(n_keys,
// key_count + i)), for d < dim; o is overwritten. The rows of p must hold zeros from their own count up to
// their tile's (what a causal softmax leaves there): a tile of rows runs over its last row's keys.
void weigh_values(const float* p, std::size_t p_stride, std::size_t n_queries, const float* v, std::size_t n_keys,
                  std::size_t dim, std::size_t key_count, float* o, std::size_t o_stride);

}  // namespace sluice::cpu
