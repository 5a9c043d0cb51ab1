#pragma once
// One request while the engine serves it: its tokens (prompt, then generated), its KV pages, how
// far its KV is computed, its sampler and its running result.
#include <chrono>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/page_pool.h"
#include "engine/sampling.h"

namespace sluice {

struct Sequence {
  using Clock = std::chrono::steady_clock;

  std::shared_ptr<GenerationRequest> request;
  Clock::time_point queued_at;
  std::vector<int32_t> tokens;         // prompt + generated: every position's token
  std::size_t n_prompt = 0;
  std::vector<int32_t> pages;          // KV page of each run of page_tokens positions
  int32_t n_past = 0;                  // positions whose K/V are stored
  std::vector<int32_t> recent;         // recent-window pages, parallel to pages (KvCache::update_recent)
  int32_t first_own = 0;               // positions below came from the prefix cache
  int limit = 0;                       // tokens it may still generate in total
  std::unique_ptr<Sampler> sampler;
  GenerationResult result;
  // Prefix cache: blocks [0, n_published) are published; chain hash of the last one.
  std::size_t n_published = 0;
  PagePool::BlockHash last_hash = PagePool::kRootHash;
  Clock::time_point started_at, decode_started_at;
  bool decoding = false;               // the prompt is done; each step adds one token
  bool finished = false;
};

}  // namespace sluice
