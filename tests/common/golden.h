#pragma once
// Reading the goldens (../shared/models/*/golden.json): token id lists, and how far a row of logits is
// from the reference's. Shared by every golden-model test (CPU, quantized, OpenCL, MoE, tools).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <rapidjson/document.h>

namespace sluice::test {

inline std::vector<int32_t> golden_ids(const rapidjson::Value& array) {
  std::vector<int32_t> out;
  for (const auto& v : array.GetArray()) out.push_back(v.GetInt());
  return out;
}

// The golden tolerance is max_error <= 1e-3 * max_abs (largest reference logit).
struct LogitDistance {
  double max_error = 0;
  double max_abs = 0;
};

inline LogitDistance logit_distance(std::span<const float> logits, const rapidjson::Value& expected) {
  LogitDistance d;
  const auto& e = expected.GetArray();
  for (rapidjson::SizeType i = 0; i < e.Size() && i < logits.size(); ++i) {
    d.max_abs = std::max(d.max_abs, std::abs(e[i].GetDouble()));
    d.max_error = std::max(d.max_error, std::abs(e[i].GetDouble() - logits[i]));
  }
  return d;
}

}  // namespace sluice::test
