#pragma once
// Order statistics over repeated measurements: median with min and max (the rows), and
// nearest-rank percentiles (the server load generator's TTFT p50/p99).
#include <algorithm>
#include <cmath>
#include <vector>

namespace sluice::cli::bench {

struct Spread {
  double median = 0, min = 0, max = 0;
};

inline Spread spread(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  const double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {median, v.front(), v.back()};
}

// Nearest rank: the smallest value with at least p% of the values at or below it.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<std::size_t>(rank, 1)) - 1];
}

}  // namespace sluice::cli::bench
