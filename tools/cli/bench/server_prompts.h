#pragma once
// The load generator's prompts: deterministic Python-like text (the bundled model is a code model),
// a long prefix shared by every other request — what a chat's system prompt or earlier turns are to
// a prompt cache — and a part of its own for each request that shares no page with any other.
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::cli::bench {

struct LoadRequest {
  int index = 0;
  bool shared_prefix = false;
  int own_words = 0;
  std::string prompt;
};

// Request i starts with the shared prefix when i is even (and the prefix is not empty); its own part
// has prompt_words[i % n] words. `run` is written at the start of the prefix and of every own part,
// so a second run against the same server finds nothing of the first in its prompt cache.
std::vector<LoadRequest> make_load_requests(int n, int shared_prefix_words, const std::vector<int>& prompt_words, uint32_t run);

}  // namespace sluice::cli::bench
