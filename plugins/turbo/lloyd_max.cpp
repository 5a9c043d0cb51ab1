#include "turbo/lloyd_max.h"

#include <algorithm>
#include <cmath>

namespace sluice::turbo {
namespace {

// Cumulative integrals of f, z·f and z²·f on a uniform grid over [lo, hi], so that the mass, first
// and second moments of any interval come from two interpolated look-ups.
class Moments {
 public:
  Moments(uint32_t n) {
    if (n == 0) {
      lo_ = -12.0;
      hi_ = 12.0;
    } else {
      lo_ = -std::sqrt(static_cast<double>(n));
      hi_ = -lo_;
    }
    step_ = (hi_ - lo_) / kCells;
    auto density = [&](double z) {
      if (n == 0) return std::exp(-0.5 * z * z);
      const double t2 = z * z / n;
      return t2 >= 1.0 ? 0.0 : std::exp(0.5 * (static_cast<double>(n) - 3.0) * std::log1p(-t2));
    };
    for (int m = 0; m < 3; ++m) cum_[m].assign(kCells + 1, 0.0);
    // Simpson's rule on each cell.
    for (uint32_t i = 0; i < kCells; ++i) {
      const double a = lo_ + i * step_, b = a + step_, c = 0.5 * (a + b);
      const double fa = density(a), fb = density(b), fc = density(c);
      const double w = step_ / 6.0;
      cum_[0][i + 1] = cum_[0][i] + w * (fa + 4 * fc + fb);
      cum_[1][i + 1] = cum_[1][i] + w * (a * fa + 4 * c * fc + b * fb);
      cum_[2][i + 1] = cum_[2][i] + w * (a * a * fa + 4 * c * c * fc + b * b * fb);
    }
    const double total = cum_[0][kCells];
    for (auto& c : cum_)
      for (auto& v : c) v /= total;
  }
  double lo() const { return lo_; }
  double hi() const { return hi_; }
  // ∫_{-inf}^{z} z^m f(z) dz
  double cumulative(int m, double z) const {
    if (z <= lo_) return 0.0;
    if (z >= hi_) return cum_[m][kCells];
    const double x = (z - lo_) / step_;
    const auto i = std::min<uint32_t>(static_cast<uint32_t>(x), kCells - 1);
    const double frac = x - i;
    return cum_[m][i] + frac * (cum_[m][i + 1] - cum_[m][i]);
  }

 private:
  static constexpr uint32_t kCells = 1u << 20;
  double lo_, hi_, step_;
  std::vector<double> cum_[3];
};

}  // namespace

LloydMaxResult lloyd_max(uint32_t block_dim, uint32_t bits) {
  const Moments mom(block_dim);
  const uint32_t levels = 1u << bits;
  LloydMaxResult r;
  r.centroids.resize(levels);
  // Start from evenly spaced points over ±2.5σ.
  for (uint32_t k = 0; k < levels; ++k) r.centroids[k] = -2.5 + 5.0 * (k + 0.5) / levels;
  std::vector<double> edges(levels + 1);
  for (int iter = 0; iter < 20000; ++iter) {
    edges[0] = mom.lo() - 1;
    edges[levels] = mom.hi() + 1;
    for (uint32_t k = 1; k < levels; ++k) edges[k] = 0.5 * (r.centroids[k - 1] + r.centroids[k]);
    double moved = 0;
    for (uint32_t k = 0; k < levels; ++k) {
      const double mass = mom.cumulative(0, edges[k + 1]) - mom.cumulative(0, edges[k]);
      const double first = mom.cumulative(1, edges[k + 1]) - mom.cumulative(1, edges[k]);
      if (mass <= 0) continue;
      const double c = first / mass;
      moved = std::max(moved, std::fabs(c - r.centroids[k]));
      r.centroids[k] = c;
    }
    if (moved < 1e-13) break;
  }
  // Symmetrise (the density is even; the iteration keeps symmetry up to rounding).
  for (uint32_t k = 0; k < levels / 2; ++k) {
    const double m = 0.5 * (r.centroids[levels - 1 - k] - r.centroids[k]);
    r.centroids[k] = -m;
    r.centroids[levels - 1 - k] = m;
  }
  for (uint32_t k = 1; k < levels; ++k) edges[k] = 0.5 * (r.centroids[k - 1] + r.centroids[k]);
  double d = 0;
  for (uint32_t k = 0; k < levels; ++k) {
    const double c = r.centroids[k];
    const double m0 = mom.cumulative(0, edges[k + 1]) - mom.cumulative(0, edges[k]);
    const double m1 = mom.cumulative(1, edges[k + 1]) - mom.cumulative(1, edges[k]);
    const double m2 = mom.cumulative(2, edges[k + 1]) - mom.cumulative(2, edges[k]);
    d += m2 - 2 * c * m1 + c * c * m0;
  }
  r.distortion = d;
  return r;
}

}  // namespace sluice::turbo
