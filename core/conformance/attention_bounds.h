#pragma once
// Error bounds of attention outputs derived from the arithmetic a backend may use, shared by the
// conformance suite (core/conformance) and the backend tests (tests/backend).
#include <cmath>
#include <cstdint>

namespace sluice::conformance {
// How far an attention output may be from float64 math when the backend attends prefill runs with
// f16 inputs and f32 sums (tensor cores: the OpenCL backend on NVIDIA, kernels_cl/attention_mma.cl).
// q and k rounded (2⁻¹⁰ a product) move each score by at most δ = scale·(2⁻¹⁰ + dim·2⁻²³)·most, most
// the largest Σ|q·k| of a key, and so each normalised weight by a factor within e^(±2δ); the weights
// and v rounded (2⁻¹¹ each), exp approximated (2⁻²⁰) and f32 sums over n keys (n·2⁻²³):
// |error| ≤ mag·(e^(2δ) − 1 + 2⁻¹⁰ + 2⁻²⁰ + n·2⁻²³), mag = Σ|w·v| of the output.
inline double f16_attention_tolerance(double scale, uint32_t dim, double most, double n_keys, double mag) {
  const double delta = scale * (std::ldexp(1.0, -10) + dim * std::ldexp(1.0, -23)) * most;
  return mag * (std::expm1(2 * delta) + std::ldexp(1.0, -10) + std::ldexp(1.0, -20) + n_keys * std::ldexp(1.0, -23));
}

}  // namespace sluice::conformance
