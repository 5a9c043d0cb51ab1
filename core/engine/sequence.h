#pragma once
// One request while the engine serves it: its tokens (prompt, then generated), what it holds of the
// KV cache and how far that is computed, its sampler and its running result.
#include <chrono>
#include <memory>
#include <vector>

#include "engine/drafter.h"
#include "engine/engine.h"
#include "engine/sequence_kv.h"
#include "engine/sampling.h"

namespace sluice {

struct Sequence {
  using Clock = std::chrono::steady_clock;

  std::shared_ptr<GenerationRequest> request;
  int choice = 0;                      // which of the request's n choices (GenerationRequest::n)
  std::shared_ptr<TokenConstraint> constraint;  // this choice's (the request's own for choice 0)
  bool spawned = false;                // choice 0 of n > 1: the other choices exist
  Clock::time_point queued_at;
  std::vector<int32_t> tokens;         // prompt + generated: every position's token
  std::size_t n_prompt = 0;
  SequenceKv kv;                       // its pages, state and prefix-cache records; kv.n_past positions computed
  int limit = 0;                       // tokens it may still generate in total
  uint32_t claimed_pages = 0;          // KV pages its prompt and limit may need, claimed at admission
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<SequenceDrafter> drafter;  // speculative decoding's guesses (null: off)
  DraftLength draft_length{1};
  GenerationResult result;
  Clock::time_point started_at, decode_started_at;
  bool decoding = false;               // the prompt is done; each step adds one token
  bool own_prefix = false;             // computes the rest of its prompt itself: waits for no one's blocks
  int prefill_skips = 0;               // steps its prompt's next chunk did not fit (Engine::step_order)
  bool finished = false;
};

}  // namespace sluice
