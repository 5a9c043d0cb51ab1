#pragma once
// Lloyd–Max scalar quantizers for the coordinates of a randomly rotated unit vector.
//
// After a uniformly random rotation of a unit vector in R^n, each coordinate t has the density
//   f_n(t) ∝ (1 − t²)^((n − 3)/2)  on [−1, 1]      (a Beta((n−1)/2, (n−1)/2) law moved to [−1, 1]),
// with variance 1/n; as n grows it tends to N(0, 1/n) (Zandieh et al., arXiv 2504.19874, Lemma 1).
// The codebooks here are for z = t·√n (unit variance) and are the Lloyd–Max optimum for that exact
// density: alternate "boundaries at midpoints of neighbouring centroids" and "each centroid the
// conditional mean of its cell" until nothing moves, with the integrals done on a fine grid.
// The committed tables (codebook_tables.inc) are this function's output, written by
// gen_turbo_codebooks; tests/kvcodec recomputes them and compares.
#include <cstdint>
#include <vector>

namespace sluice::turbo {

struct LloydMaxResult {
  std::vector<double> centroids;  // 2^bits values in increasing order, z units
  double distortion = 0;          // E[(z − Q(z))²] per coordinate = E‖u − Q(u)‖² for a unit vector u
};

// block_dim: n ≥ 4 (the density above); block_dim == 0: the Gaussian limit N(0, 1).
LloydMaxResult lloyd_max(uint32_t block_dim, uint32_t bits);

}  // namespace sluice::turbo
