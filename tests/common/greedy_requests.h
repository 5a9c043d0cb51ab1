#pragma once
// Requests the engine tests send: a greedy request for a prompt (end-of-sequence ignored, so its
// length is max_tokens), and pseudo-random prompts of a given length, different for each seed.
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace sluice::test {

inline std::vector<int32_t> prompt_of(int seed, int length) {
  std::vector<int32_t> ids;
  for (int i = 0; i < length; ++i) ids.push_back(200 + (seed * 977 + i * 131) % 7000);
  return ids;
}

inline GenerationRequest greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

}  // namespace sluice::test
