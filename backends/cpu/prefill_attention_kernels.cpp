// The two float products of prefill attention (prefill_attention_kernels.h).
//
// Register tiles. With AVX-512 a tile is 8 query rows × 32 columns (two 16-float vectors): 16
// accumulators of the 32 registers, and per step of the inner loop 2 loads and 8 broadcasts feed 16
// FMAs. Narrower builds take 4 rows × 16 columns (AVX: 8 of 16 ymm registers) or 2 × 16 (SSE).
#include "prefill_attention_kernels.h"

#include <algorithm>
#include <cstring>

namespace sluice::cpu {
namespace {

// 16 floats; the unaligned, aliasing form for loads and stores through float pointers.
using v16 = float __attribute__((vector_size(64)));
using v16_mem = float __attribute__((vector_size(64), aligned(4), may_alias));
constexpr std::size_t kLanes = 16;
static_assert(PackedKeys::kKeyTile == kLanes, "a key tile is one vector of scores");

#if defined(__AVX512F__)
constexpr std::size_t kRows = 8, kVecs = 2;
#elif defined(__AVX__)
constexpr std::size_t kRows = 4, kVecs = 1;
#else
constexpr std::size_t kRows = 2, kVecs = 1;
#endif
// Keys per pass of the value product: a block of V rows (256 × 128 floats = 128 KiB) stays in L2 while
// every tile of queries runs over it.
constexpr std::size_t kValueKeyBlock = 256;

inline v16 load(const float* p) { return *reinterpret_cast<const v16_mem*>(p); }
inline void store(float* p, v16 v) { *reinterpret_cast<v16_mem*>(p) = v; }

// R query rows against V key tiles; `width` of the 16·V scores a row are stored.
template <std::size_t R, std::size_t V>
void score_tile(const float* q, std::size_t q_stride, const PackedKeys& keys, std::size_t first_tile, float scale, float* s,
                std::size_t s_stride, std::size_t width) {
  const std::size_t dim = keys.dim;
  const float* tiles[V];
  for (std::size_t v = 0; v < V; ++v) tiles[v] = keys.tile(first_tile + v);
  v16 acc[R][V];
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t v = 0; v < V; ++v) acc[r][v] = v16{};
  for (std::size_t d = 0; d < dim; ++d) {
    v16 k[V];
    for (std::size_t v = 0; v < V; ++v) k[v] = load(tiles[v] + d * kLanes);
    for (std::size_t r = 0; r < R; ++r) {
      const float x = q[r * q_stride + d];
      for (std::size_t v = 0; v < V; ++v) acc[r][v] += x * k[v];
    }
  }
  for (std::size_t r = 0; r < R; ++r) {
    if (width == V * kLanes) {
      for (std::size_t v = 0; v < V; ++v) store(s + r * s_stride + v * kLanes, acc[r][v] * scale);
    } else {
      float row[V * kLanes];
      for (std::size_t v = 0; v < V; ++v) store(row + v * kLanes, acc[r][v] * scale);
      std::memcpy(s + r * s_stride, row, width * sizeof(float));
    }
  }
}

template <std::size_t R>
void score_rows(const float* q, std::size_t q_stride, const PackedKeys& keys, std::size_t seen, float scale, float* s,
                std::size_t s_stride) {
  std::size_t j0 = 0;
  for (; j0 + kVecs * kLanes <= seen; j0 += kVecs * kLanes)
    score_tile<R, kVecs>(q, q_stride, keys, j0 / kLanes, scale, s + j0, s_stride, kVecs * kLanes);
  for (; j0 < seen; j0 += kLanes)
    score_tile<R, 1>(q, q_stride, keys, j0 / kLanes, scale, s + j0, s_stride, std::min(kLanes, seen - j0));
}

// o (R rows × 16·V columns from column c) += p[rows][j0, j1) · v[j0, j1) of those columns; `first`:
// the tile starts from zero instead of o.
template <std::size_t R, std::size_t V>
void value_tile(const float* p, std::size_t p_stride, const float* v, std::size_t dim, std::size_t j0, std::size_t j1, float* o,
                std::size_t o_stride, bool first) {
  v16 acc[R][V];
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t c = 0; c < V; ++c) acc[r][c] = first ? v16{} : load(o + r * o_stride + c * kLanes);
  for (std::size_t j = j0; j < j1; ++j) {
    v16 vv[V];
    for (std::size_t c = 0; c < V; ++c) vv[c] = load(v + j * dim + c * kLanes);
    for (std::size_t r = 0; r < R; ++r) {
      const float w = p[r * p_stride + j];
      for (std::size_t c = 0; c < V; ++c) acc[r][c] += w * vv[c];
    }
  }
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t c = 0; c < V; ++c) store(o + r * o_stride + c * kLanes, acc[r][c]);
}

template <std::size_t R>
void value_rows(const float* p, std::size_t p_stride, const float* v, std::size_t dim, std::size_t j0, std::size_t j1, float* o,
                std::size_t o_stride, bool first) {
  std::size_t c0 = 0;
  for (; c0 + kVecs * kLanes <= dim; c0 += kVecs * kLanes)
    value_tile<R, kVecs>(p, p_stride, v + c0, dim, j0, j1, o + c0, o_stride, first);
  for (; c0 + kLanes <= dim; c0 += kLanes) value_tile<R, 1>(p, p_stride, v + c0, dim, j0, j1, o + c0, o_stride, first);
  for (std::size_t r = 0; c0 < dim && r < R; ++r)  // the last dim % 16 columns (head sizes like 72 or 80)
    for (std::size_t c = c0; c < dim; ++c) {
      float sum = first ? 0.0f : o[r * o_stride + c];
      for (std::size_t j = j0; j < j1; ++j) sum += p[r * p_stride + j] * v[j * dim + c];
      o[r * o_stride + c] = sum;
    }
}

}  // namespace

void pack_keys(const float* keys, std::size_t n_keys, std::size_t dim, PackedKeys& out) {
  const std::size_t tiles = (n_keys + kLanes - 1) / kLanes;
  out.n_keys = n_keys;
  out.dim = dim;
  out.values.assign(tiles * kLanes * dim, 0.0f);
  for (std::size_t j = 0; j < n_keys; ++j) {
    float* col = out.values.data() + (j / kLanes) * kLanes * dim + j % kLanes;
    for (std::size_t d = 0; d < dim; ++d) col[d * kLanes] = keys[j * dim + d];
  }
}

void score_keys(const float* q, std::size_t q_stride, std::size_t n_queries, const PackedKeys& keys, std::size_t key_count,
                float scale, float* s, std::size_t s_stride) {
  for (std::size_t i0 = 0; i0 < n_queries; i0 += kRows) {
    const std::size_t rows = std::min(kRows, n_queries - i0);
    const std::size_t seen = std::min(keys.n_keys, key_count + i0 + rows - 1);  // what the tile's last row sees
    const float* qi = q + i0 * q_stride;
    float* si = s + i0 * s_stride;
    switch (rows) {
      case 8: score_rows<8>(qi, q_stride, keys, seen, scale, si, s_stride); break;
      case 7: score_rows<7>(qi, q_stride, keys, seen, scale, si, s_stride); break;
      case 6: score_rows<6>(qi, q_stride, keys, seen, scale, si, s_stride); break;
      case 5: score_rows<5>(qi, q_stride, keys, seen, scale, si, s_stride); break;
      case 4: score_rows<4>(qi, q_stride, keys, seen, scale, si, s_stride); break;
      case 3: score_rows<3>(qi, q_stride, keys, seen, scale, si, s_stride); break;
      case 2: score_rows<2>(qi, q_stride, keys, seen, scale, si, s_stride); break;
      default: score_rows<1>(qi, q_stride, keys, seen, scale, si, s_stride); break;
    }
  }
}

void weigh_values(const float* p, std::size_t p_stride, std::size_t n_queries, const float* v, std::size_t n_keys,
                  std::size_t dim, std::size_t key_count, float* o, std::size_t o_stride) {
  const std::size_t last_seen = std::min(n_keys, key_count + n_queries - 1);
  for (std::size_t k0 = 0; k0 == 0 || k0 < last_seen; k0 += kValueKeyBlock) {
    for (std::size_t i0 = 0; i0 < n_queries; i0 += kRows) {
      const std::size_t rows = std::min(kRows, n_queries - i0);
      const std::size_t seen = std::min(n_keys, key_count + i0 + rows - 1);
      // Keys of this block the tile sees; a tile that sees none of them still starts from zero once.
      const std::size_t j1 = std::min(seen, k0 + kValueKeyBlock);
      if (k0 > 0 && j1 <= k0) continue;
      const std::size_t j0 = std::min(k0, j1);
      const float* pi = p + i0 * p_stride;
      float* oi = o + i0 * o_stride;
      const bool first = k0 == 0;
      switch (rows) {
        case 8: value_rows<8>(pi, p_stride, v, dim, j0, j1, oi, o_stride, first); break;
        case 7: value_rows<7>(pi, p_stride, v, dim, j0, j1, oi, o_stride, first); break;
        case 6: value_rows<6>(pi, p_stride, v, dim, j0, j1, oi, o_stride, first); break;
        case 5: value_rows<5>(pi, p_stride, v, dim, j0, j1, oi, o_stride, first); break;
        case 4: value_rows<4>(pi, p_stride, v, dim, j0, j1, oi, o_stride, first); break;
        case 3: value_rows<3>(pi, p_stride, v, dim, j0, j1, oi, o_stride, first); break;
        case 2: value_rows<2>(pi, p_stride, v, dim, j0, j1, oi, o_stride, first); break;
        default: value_rows<1>(pi, p_stride, v, dim, j0, j1, oi, o_stride, first); break;
      }
    }
  }
}

}  // namespace sluice::cpu
