// Float matrix products on register tiles (float_products.h).
//
// With AVX-512 a register tile is 8 rows of the left operand × 32 columns (two 16-float vectors): 16
// accumulators of the 32 registers, and each step of the inner loop feeds 16 FMAs from 2 loads and 8
// broadcasts. Narrower builds take 4 rows × 16 columns (AVX: 8 of 16 ymm registers) or 2 × 16 (SSE).
#include "float_products.h"

#include <algorithm>
#include <cstring>

namespace sluice::cpu {
namespace {

// 16 floats; the unaligned, aliasing form for loads and stores through float pointers.
using v16 = float __attribute__((vector_size(64)));
using v16_mem = float __attribute__((vector_size(64), aligned(4), may_alias));
constexpr std::size_t kLanes = 16;
static_assert(PackedRows::kTile == kLanes, "a packed tile is one vector of products");

#if defined(__AVX512F__)
constexpr std::size_t kRows = 8, kVecs = 2;
#elif defined(__AVX__)
constexpr std::size_t kRows = 4, kVecs = 1;
#else
constexpr std::size_t kRows = 2, kVecs = 1;
#endif
// Rows of v per pass of times_rows: a block (256 × 128 floats = 128 KiB) stays in L2 while every tile of
// p's rows runs over it.
constexpr std::size_t kVBlock = 256;

inline v16 load(const float* p) { return *reinterpret_cast<const v16_mem*>(p); }
inline void store(float* p, v16 v) { *reinterpret_cast<v16_mem*>(p) = v; }

// R rows of a against V packed tiles (from tile `first_tile`); `width` of the 16·V products a row stored.
template <std::size_t R, std::size_t V>
void packed_tile(const float* a, std::size_t a_stride, const PackedRows& packed, std::size_t first_tile, float scale, float* c,
                 std::size_t c_stride, std::size_t width) {
  const float* tiles[V];
  for (std::size_t t = 0; t < V; ++t) tiles[t] = packed.tile(first_tile + t);
  v16 acc[R][V];
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < V; ++t) acc[r][t] = v16{};
  for (std::size_t d = 0; d < packed.dim; ++d) {
    v16 column[V];
    for (std::size_t t = 0; t < V; ++t) column[t] = load(tiles[t] + d * kLanes);
    for (std::size_t r = 0; r < R; ++r) {
      const float x = a[r * a_stride + d];
      for (std::size_t t = 0; t < V; ++t) acc[r][t] += x * column[t];
    }
  }
  for (std::size_t r = 0; r < R; ++r) {
    if (width == V * kLanes) {
      for (std::size_t t = 0; t < V; ++t) store(c + r * c_stride + t * kLanes, acc[r][t] * scale);
    } else {
      float row[V * kLanes];
      for (std::size_t t = 0; t < V; ++t) store(row + t * kLanes, acc[r][t] * scale);
      std::memcpy(c + r * c_stride, row, width * sizeof(float));
    }
  }
}

// R rows of a against the first `count` packed rows.
template <std::size_t R>
void packed_span(const float* a, std::size_t a_stride, const PackedRows& packed, std::size_t count, float scale, float* c,
                 std::size_t c_stride) {
  std::size_t j0 = 0;
  for (; j0 + kVecs * kLanes <= count; j0 += kVecs * kLanes)
    packed_tile<R, kVecs>(a, a_stride, packed, j0 / kLanes, scale, c + j0, c_stride, kVecs * kLanes);
  for (; j0 < count; j0 += kLanes)
    packed_tile<R, 1>(a, a_stride, packed, j0 / kLanes, scale, c + j0, c_stride, std::min(kLanes, count - j0));
}

// o (R rows × 16·V columns) = (first ? 0 : o) + p[rows][j0, j1) · v[j0, j1) of those columns.
template <std::size_t R, std::size_t V>
void rows_tile(const float* p, std::size_t p_stride, const float* v, std::size_t dim, std::size_t j0, std::size_t j1, float* o,
               std::size_t o_stride, bool first) {
  v16 acc[R][V];
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < V; ++t) acc[r][t] = first ? v16{} : load(o + r * o_stride + t * kLanes);
  for (std::size_t j = j0; j < j1; ++j) {
    v16 row[V];
    for (std::size_t t = 0; t < V; ++t) row[t] = load(v + j * dim + t * kLanes);
    for (std::size_t r = 0; r < R; ++r) {
      const float w = p[r * p_stride + j];
      for (std::size_t t = 0; t < V; ++t) acc[r][t] += w * row[t];
    }
  }
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < V; ++t) store(o + r * o_stride + t * kLanes, acc[r][t]);
}

// R rows of p against v's rows [j0, j1), every column.
template <std::size_t R>
void rows_span(const float* p, std::size_t p_stride, const float* v, std::size_t dim, std::size_t j0, std::size_t j1, float* o,
               std::size_t o_stride, bool first) {
  std::size_t c0 = 0;
  for (; c0 + kVecs * kLanes <= dim; c0 += kVecs * kLanes)
    rows_tile<R, kVecs>(p, p_stride, v + c0, dim, j0, j1, o + c0, o_stride, first);
  for (; c0 + kLanes <= dim; c0 += kLanes) rows_tile<R, 1>(p, p_stride, v + c0, dim, j0, j1, o + c0, o_stride, first);
  for (std::size_t r = 0; c0 < dim && r < R; ++r)  // the last dim % 16 columns (head sizes like 72 or 80)
    for (std::size_t col = c0; col < dim; ++col) {
      float sum = first ? 0.0f : o[r * o_stride + col];
      for (std::size_t j = j0; j < j1; ++j) sum += p[r * p_stride + j] * v[j * dim + col];
      o[r * o_stride + col] = sum;
    }
}

// Calls f.template operator()<R>() for the tile height R = rows (1 ≤ rows ≤ 8): the register tiles are
// templates on their height, the last tile of a matrix is shorter.
template <typename F>
void with_rows(std::size_t rows, F&& f) {
  switch (rows) {
    case 8: return f.template operator()<8>();
    case 7: return f.template operator()<7>();
    case 6: return f.template operator()<6>();
    case 5: return f.template operator()<5>();
    case 4: return f.template operator()<4>();
    case 3: return f.template operator()<3>();
    case 2: return f.template operator()<2>();
    default: return f.template operator()<1>();
  }
}

}  // namespace

void pack_rows(const float* rows, std::size_t n_rows, std::size_t dim, PackedRows& out) {
  const std::size_t tiles = (n_rows + kLanes - 1) / kLanes;
  out.n_rows = n_rows;
  out.dim = dim;
  out.values.assign(tiles * kLanes * dim, 0.0f);
  for (std::size_t j = 0; j < n_rows; ++j) {
    float* column = out.values.data() + (j / kLanes) * kLanes * dim + j % kLanes;
    for (std::size_t d = 0; d < dim; ++d) column[d * kLanes] = rows[j * dim + d];
  }
}

void times_packed_rows(const float* a, std::size_t a_stride, std::size_t n_a, const PackedRows& packed, std::size_t first_count,
                       float scale, float* c, std::size_t c_stride) {
  for (std::size_t i0 = 0; i0 < n_a; i0 += kRows) {
    const std::size_t rows = std::min(kRows, n_a - i0);
    const std::size_t count = std::min(packed.n_rows, first_count + i0 + rows - 1);  // what the tile's last row meets
    with_rows(rows, [&]<std::size_t R>() { packed_span<R>(a + i0 * a_stride, a_stride, packed, count, scale, c + i0 * c_stride, c_stride); });
  }
}

void times_rows(const float* p, std::size_t p_stride, std::size_t n_p, const float* v, std::size_t n_v, std::size_t dim,
                std::size_t first_count, float* o, std::size_t o_stride) {
  const std::size_t last_count = std::min(n_v, first_count + n_p - 1);
  for (std::size_t k0 = 0; k0 == 0 || k0 < last_count; k0 += kVBlock) {
    for (std::size_t i0 = 0; i0 < n_p; i0 += kRows) {
      const std::size_t rows = std::min(kRows, n_p - i0);
      const std::size_t count = std::min(n_v, first_count + i0 + rows - 1);
      // The tile's rows of v in this block; a tile that meets none of them still starts from zero once.
      const std::size_t j1 = std::min(count, k0 + kVBlock);
      if (k0 > 0 && j1 <= k0) continue;
      const std::size_t j0 = std::min(k0, j1);
      with_rows(rows, [&]<std::size_t R>() {
        rows_span<R>(p + i0 * p_stride, p_stride, v, dim, j0, j1, o + i0 * o_stride, o_stride, k0 == 0);
      });
    }
  }
}

}  // namespace sluice::cpu
