#pragma once
// What `--turbo-kv` selects: the recommended TurboQuant K/V pair, as a --kv-codec value.
// Header-only, no dependencies, so the server and CLI can include it (${CMAKE_SOURCE_DIR}/plugins).
//
// Measured on tiny-code-qwen2 (perf/results/kv_codecs_quality.md; ctx 512, 60 chunks, f16 = 5.6090):
//   keys are the sensitive side — k=turbo4 alone costs +0.71%, v=turbo4 alone +0.17%,
//   k=turbo3 alone +2.98%, v=turbo3 alone +0.51%.
//   Today (every cached token compressed):  turbo4 / turbo4      4.25 bits  +0.91%   ← within 1%
//                                           k=turbo4,v=turbo3    3.75 bits  +1.47%
//   With the newest 16 tokens kept in f16 (a proposed host change, measured with a patched backend):
//                                           turbo4 / turbo4      +0.32%
//                                           k=turbo4,v=turbo3    +0.41%   ← the better trade
// So: turbo4 for both while the host compresses every token, k=turbo4,v=turbo3 once it keeps a
// recent window of at least kRecommendedRecentWindow tokens uncompressed.
#include <cstdint>

namespace sluice::turbo {

inline constexpr uint32_t kRecommendedRecentWindow = 16;

inline const char* recommended_turbo_kv(uint32_t host_recent_window_tokens = 0) {
  return host_recent_window_tokens >= kRecommendedRecentWindow ? "k=turbo4,v=turbo3" : "turbo4";
}

}  // namespace sluice::turbo
