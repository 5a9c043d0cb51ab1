#pragma once
// Drafters for speculative decoding (engine/speculation.h): where the guesses come from.
// - n-gram (prompt lookup, --draft ngram): the tokens that followed the latest earlier occurrence of
//   the sequence's last few tokens — no second model; strong where output copies its context
//   (code edits, quoting, structured text);
// - a draft model (--draft-model DIR): a small model with the target's tokenizer decodes the
//   guesses one by one on its own KV cache, rolled back to the tokens the target kept.
// One Drafter serves the engine; each sequence gets its own SequenceDrafter (a draft model's KV
// pages and position for that sequence), used and destroyed on the engine thread.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/speculation.h"
#include "util/result.h"

namespace sluice {

class Runtime;

class SequenceDrafter {
 public:
  virtual ~SequenceDrafter() = default;
  // Up to n guesses for the positions after `tokens` (the sequence's prompt then generated tokens,
  // generated from n_prompt on); fewer or none when the drafter has nothing to offer.
  virtual Result<DraftTokens> propose(std::span<const int32_t> tokens, std::size_t n_prompt, int n) = 0;
  // False only when propose would surely offer nothing for `tokens` — asked before every decode step,
  // so cheap or not overridden: while it is false the engine decodes ahead without verifying.
  virtual bool may_guess(std::span<const int32_t> tokens) const {
    (void)tokens;
    return true;
  }
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::unique_ptr<SequenceDrafter> start(const SamplingParams& sampling) = 0;
  virtual std::string describe() const = 0;  // "ngram", "draft model NAME"
  virtual uint64_t memory_bytes() const { return 0; }  // a draft model's weights and KV cache
};

// Prompt lookup: the tokens after the latest earlier occurrence of the longest suffix of `tokens`
// of kMaxNgram down to kMinNgram tokens, at most n of them (empty when no suffix recurs).
struct NgramLookup {
  static constexpr std::size_t kMaxNgram = 3;
  static constexpr std::size_t kMinNgram = 1;
  static std::vector<int32_t> find(std::span<const int32_t> tokens, int n);
};

std::unique_ptr<Drafter> make_ngram_drafter();
// Opens options.draft_model beside the target (same backend, KV codec, context and --parallel);
// refused unless its tokenizer maps every id to the same token as the target's.
Result<std::unique_ptr<Drafter>> open_draft_model(const EngineOptions& options, const Runtime& target);

}  // namespace sluice
