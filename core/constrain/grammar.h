#pragma once
// A grammar over bytes as a recursive transition network: each rule is a small deterministic
// automaton whose edges read a byte range or call another rule (which returns to the edge's
// target). Built rule by rule from NFA fragments (RuleBuilder), then determinized and measured
// (the fewest bytes from each position to the end of its rule, which closes an output in time).
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "constrain/byte_set.h"
#include "util/result.h"

namespace sluice::constrain {

inline constexpr uint32_t kUnreachable = std::numeric_limits<uint32_t>::max() / 4;

struct ByteRange {
  unsigned char lo, hi;
  uint32_t target;
};

struct CallEdge {
  uint32_t rule;
  uint32_t target;  // where the caller continues once the rule has ended
};

struct Position {
  std::vector<ByteRange> bytes;  // sorted, disjoint
  std::vector<CallEdge> calls;
  bool final = false;            // the rule may end here
  uint32_t min_to_end = kUnreachable;  // fewest bytes to the end of the rule from here

  // The position a byte leads to, or -1.
  int64_t next(unsigned char b) const {
    for (const ByteRange& r : bytes)
      if (b >= r.lo && b <= r.hi) return r.target;
    return -1;
  }
};

// Bounds on what one untrusted schema may compile to.
struct GrammarLimits {
  std::size_t max_positions = 200000;   // deterministic states over all rules
  std::size_t max_rules = 4096;
  std::size_t max_nfa_states = 400000;  // while building
  std::size_t max_work = 4000000;       // NFA states visited while determinizing (bounds its time)
};

struct Grammar {
  std::vector<Position> positions;
  std::vector<uint32_t> rule_start;  // rule → its start position
  std::vector<std::string> rule_names;
  uint32_t root = 0;
};

// Builds the rules of one grammar. A fragment is a piece of one rule's NFA with one entry and one
// exit; fragments combine (seq, alt, repeat) as in Thompson's construction. Repetition takes a
// function making a fresh copy of the fragment each time.
class GrammarBuilder {
 public:
  struct Frag {
    uint32_t in, out;
  };
  using Make = std::function<Frag()>;

  explicit GrammarBuilder(GrammarLimits limits = {}) : limits_(limits) {}

  // A new rule (its body defined later with define); the id is usable in calls at once, so
  // rules may refer to themselves.
  Result<uint32_t> declare(std::string name);
  Status define(uint32_t rule, Frag body);
  bool defined(uint32_t rule) const { return rules_[rule].defined; }

  Frag bytes(const ByteSet& set);
  Frag literal(std::string_view text);
  Frag empty();
  Frag call(uint32_t rule);
  Frag seq(std::initializer_list<Frag> parts);
  Frag seq(const std::vector<Frag>& parts);
  Frag alt(const std::vector<Frag>& options);
  Frag optional(Frag f);
  Frag star(Frag f);
  // min..max copies (max < 0: unbounded).
  Frag repeat(const Make& make, int min, int max);

  // Raw NFA pieces, for shapes the combinators express badly (shared tails, tries).
  uint32_t new_state() { return state(); }
  void link(uint32_t from, uint32_t to) { eps(from, to); }
  void edge(uint32_t from, const ByteSet& set, uint32_t to) { nfa_[from].bytes.push_back({set, to}); }

  // Sticky: the first limit hit while building; checked by finish().
  const std::string& overflow() const { return overflow_; }

  // Determinizes every rule and computes distances; root is the rule whole outputs match.
  Result<Grammar> finish(uint32_t root);

 private:
  struct NState {
    std::vector<std::pair<ByteSet, uint32_t>> bytes;
    std::vector<uint32_t> eps;
    std::vector<CallEdge> calls;  // target: an NFA state here
  };
  struct RuleNfa {
    std::string name;
    Frag body{0, 0};
    bool defined = false;
  };
  uint32_t state();
  void eps(uint32_t from, uint32_t to) { nfa_[from].eps.push_back(to); }

  GrammarLimits limits_;
  std::vector<NState> nfa_;
  std::vector<RuleNfa> rules_;
  std::string overflow_;
};

}  // namespace sluice::constrain
