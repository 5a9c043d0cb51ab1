#pragma once
// What `--turbo-kv` selects: the recommended TurboQuant K/V pair, as a --kv-codec value.
// Header-only, no dependencies, so the server and CLI can include it (${CMAKE_SOURCE_DIR}/plugins).
//
// Measured on tiny-code-qwen2 (perf/results/kv_codecs_quality.md; ctx 512, 60 chunks, f16 = 5.6090):
//   keys are the sensitive side — k=turbo4 alone costs +0.71%, v=turbo4 alone +0.17%,
//   k=turbo3 alone +2.98%, v=turbo3 alone +0.51% (every key compressed).
//   Every cached token compressed (--kv-recent 0):  turbo4 / turbo4      4.25 bits  +0.90%
//                                                   k=turbo4,v=turbo3    3.75 bits  +1.48%
//   With the recent window (the newest 16 keys exact, the default):
//                                                   turbo4 / turbo4      +0.33%
//                                                   k=turbo4,v=turbo3    +0.40%   ← the better trade
// So: k=turbo4,v=turbo3 when the host keeps a recent window of at least kRecommendedRecentWindow
// tokens, turbo4 for both when it compresses every token. (Measured with 16 value rotations; values
// now default to one — with the window: turbo4 +0.30%, k=turbo4,v=turbo3 +0.50% — and without it
// the pair keeps 16 value rotations, where they still pay: turbo4 +0.90% against +1.03% with one.)
#include <cstdint>

namespace sluice::turbo {

inline constexpr uint32_t kRecommendedRecentWindow = 16;

inline const char* recommended_turbo_kv(uint32_t host_recent_window_tokens = 0) {
  return host_recent_window_tokens >= kRecommendedRecentWindow ? "k=turbo4,v=turbo3" : "k=turbo4,v=turbo4:rot=16";
}

}  // namespace sluice::turbo
