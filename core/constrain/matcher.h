#pragma once
// Walks a grammar over a tokenizer's vocabulary, one token at a time: which tokens may come next
// (a mask), taking one (advancing), and whether the output is complete (only then may it end).
//
// State: a set of stacks (a grammar may be ambiguous for a while, e.g. anyOf of two objects),
// each a position plus a chain of return positions in an arena. Masks: per stack-top position,
// the tokens decided by that position alone (they never leave its rule) are computed once by one
// walk over the vocabulary trie and cached; for the few that leave the rule mid-token (say `",`
// closing a string) the cache keeps what follows the exit as a small trie, walked each step from
// the real stack below.
//
// Budget: a token may leave no more bytes to write (the shortest way to a complete output) than
// tokens will be left after it. So an output finishes within max_tokens instead of being cut off
// mid-value, whenever the schema's shortest value fits the budget at all.
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "constrain/grammar.h"
#include "constrain/prefix_trie.h"
#include "constrain/token_mask.h"
#include "constrain/vocab_index.h"
#include "util/result.h"

namespace sluice::constrain {

struct MatcherLimits {
  uint32_t max_stack_depth = 96;     // nested rules at once (bounds recursive schemas)
  uint32_t max_stacks = 64;          // alternatives tracked at once
  std::size_t cache_bytes = 32u << 20;  // per grammar: cached per-position masks (past it, built each time)
};

// A grammar compiled for one vocabulary, shared by every request that uses it (masks cached here).
class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const VocabIndex> vocab, MatcherLimits limits = {})
      : grammar_(std::move(grammar)), vocab_(std::move(vocab)), limits_(limits) {}
  const Grammar& grammar() const { return grammar_; }
  const VocabIndex& vocab() const { return *vocab_; }
  const MatcherLimits& limits() const { return limits_; }

  struct Entry {
    TokenMask allowed;  // accepted whatever lies below the position's rule
    // Allowed tokens that stay in the rule and move the end of the output, by how many bytes: the
    // same in any context (checked against the budget of tokens left).
    std::vector<std::pair<int32_t, uint32_t>> increasing, decreasing;
    // Allowed tokens that end exactly where the rule ends: the output's end is then the stack
    // below's (never further than before).
    std::vector<int32_t> ends_rule;
    // Tokens that leave the rule mid-token: what follows the exit, walked from the stack below.
    PrefixTrie exits;
  };
  std::shared_ptr<const Entry> entry(uint32_t position) const;

 private:
  std::shared_ptr<const Entry> compute(uint32_t position) const;

  Grammar grammar_;
  std::shared_ptr<const VocabIndex> vocab_;
  MatcherLimits limits_;
  mutable std::mutex mu_;
  mutable std::unordered_map<uint32_t, std::shared_ptr<const Entry>> cache_;
  mutable std::size_t cache_used_ = 0;
};

// The runtime stacks: shared by the matcher and the cache's walk.
struct Head {
  uint32_t pos;   // kAccepted: the whole output is complete
  uint32_t rest;  // top frame of return positions, or kRoot / kContext
  bool operator==(const Head&) const = default;
};
struct Frame {
  uint32_t ret, parent, depth, below;  // below: fewest bytes to finish every frame from here down
};
inline constexpr uint32_t kAccepted = 0xFFFFFFFFu;
inline constexpr uint32_t kRoot = 0xFFFFFFFFu;
inline constexpr uint32_t kContext = 0xFFFFFFFEu;  // the unknown stack below a cached position

class Stepper {
 public:
  Stepper(const Grammar& g, const MatcherLimits& limits, std::vector<Frame>& frames) : g_(g), limits_(limits), frames_(frames) {}
  // The heads after reading byte b; `left_rule` is set when some branch ended the rule of a
  // kContext-rooted stack (it would continue in the unknown context).
  void step(std::span<const Head> in, unsigned char b, std::vector<Head>& out, bool& left_rule);
  // Expands a head to the positions that read bytes (calls entered, ended rules returned from).
  void expand(Head h, std::vector<Head>& out, bool& left_rule);
  // The heads of the stack below h's rule (h's rule ended), and the fewest bytes from there.
  void pop(const Head& h, std::vector<Head>& out);
  uint32_t below(const Head& h) const { return h.rest < kContext ? frames_[h.rest].below : 0; }
  uint32_t distance(const Head& h) const;
  uint32_t distance(std::span<const Head> heads) const;

 private:
  const Grammar& g_;
  const MatcherLimits& limits_;
  std::vector<Frame>& frames_;
  std::vector<Head> visited_, todo_;
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  // The tokens allowed next. remaining_tokens: what the request may still generate. A token may
  // leave at most as many bytes to write as tokens will be left after it: every byte is a token in
  // the vocabularies served, so one byte along a shortest completion is always allowed and an output
  // whose shortest completion fits max_tokens is always finished. When it does not fit, every token
  // that shortens the way is allowed (multi-byte tokens may still finish it).
  void fill_mask(TokenMask& mask, int remaining_tokens);
  // Takes a token; an error when the grammar does not allow it (the state is then unchanged).
  Status accept(int32_t token);
  Status accept_bytes(std::string_view bytes);
  bool complete() const;        // the text so far is a whole output
  bool must_stop() const;       // complete, and nothing may follow
  uint32_t distance() const;    // fewest bytes to a complete output

 private:
  bool simulate(std::string_view bytes);
  // The tokens allowed when at most `room` bytes may remain to write after them.
  void fill_mask_within(TokenMask& mask, uint32_t room);
  // Sets the tokens of `trie` that `start` accepts and that leave at most `room` bytes to write.
  void walk(const PrefixTrie& trie, const std::vector<Head>& start, uint32_t room, TokenMask& mask);

  std::shared_ptr<const CompiledGrammar> g_;
  std::vector<Frame> frames_;
  std::vector<Head> heads_;
  std::vector<Head> scratch_a_, scratch_b_;
  std::vector<std::vector<Head>> levels_;
  std::vector<std::size_t> level_marks_;
};

}  // namespace sluice::constrain
