#include "constrain/grammar.h"

#include <algorithm>
#include <map>

namespace sluice::constrain {

uint32_t GrammarBuilder::state() {
  if (nfa_.size() >= limits_.max_nfa_states && overflow_.empty())
    overflow_ = "the schema compiles to more than " + std::to_string(limits_.max_nfa_states) + " automaton states";
  // Past the limit states are still handed out (the build finishes and finish() reports the error).
  nfa_.emplace_back();
  return static_cast<uint32_t>(nfa_.size() - 1);
}

Result<uint32_t> GrammarBuilder::declare(std::string name) {
  if (rules_.size() >= limits_.max_rules)
    return make_error("the schema needs more than " + std::to_string(limits_.max_rules) + " rules");
  rules_.push_back({std::move(name), {0, 0}, false});
  return static_cast<uint32_t>(rules_.size() - 1);
}

Status GrammarBuilder::define(uint32_t rule, Frag body) {
  if (rule >= rules_.size() || rules_[rule].defined) return make_error("internal: rule defined twice");
  rules_[rule].body = body;
  rules_[rule].defined = true;
  return {};
}

GrammarBuilder::Frag GrammarBuilder::bytes(const ByteSet& set) {
  const uint32_t a = state(), b = state();
  nfa_[a].bytes.push_back({set, b});
  return {a, b};
}

GrammarBuilder::Frag GrammarBuilder::literal(std::string_view text) {
  const uint32_t first = state();
  uint32_t at = first;
  for (char c : text) {
    const uint32_t next = state();
    nfa_[at].bytes.push_back({ByteSet::of(static_cast<unsigned char>(c)), next});
    at = next;
  }
  return {first, at};
}

GrammarBuilder::Frag GrammarBuilder::empty() {
  const uint32_t a = state();
  return {a, a};
}

GrammarBuilder::Frag GrammarBuilder::call(uint32_t rule) {
  const uint32_t a = state(), b = state();
  nfa_[a].calls.push_back({rule, b});
  return {a, b};
}

GrammarBuilder::Frag GrammarBuilder::seq(std::initializer_list<Frag> parts) { return seq(std::vector<Frag>(parts)); }

GrammarBuilder::Frag GrammarBuilder::seq(const std::vector<Frag>& parts) {
  if (parts.empty()) return empty();
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) eps(parts[i].out, parts[i + 1].in);
  return {parts.front().in, parts.back().out};
}

GrammarBuilder::Frag GrammarBuilder::alt(const std::vector<Frag>& options) {
  const uint32_t a = state(), b = state();
  for (const Frag& f : options) {
    eps(a, f.in);
    eps(f.out, b);
  }
  return {a, b};
}

GrammarBuilder::Frag GrammarBuilder::optional(Frag f) {
  const uint32_t a = state(), b = state();
  eps(a, f.in);
  eps(f.out, b);
  eps(a, b);
  return {a, b};
}

GrammarBuilder::Frag GrammarBuilder::star(Frag f) {
  const uint32_t a = state(), b = state();
  eps(a, f.in);
  eps(f.out, a);
  eps(a, b);
  return {a, b};
}

GrammarBuilder::Frag GrammarBuilder::repeat(const Make& make, int min, int max) {
  std::vector<Frag> parts;
  for (int i = 0; i < min && overflow_.empty(); ++i) parts.push_back(make());
  if (max < 0) {
    parts.push_back(star(make()));
  } else {
    // The optional tail nests (a(b(c)?)?)? so that each copy is reached only after the one before.
    Frag tail = empty();
    bool any = false;
    for (int i = max; i > min && overflow_.empty(); --i) {
      tail = any ? optional(seq({make(), tail})) : optional(make());
      any = true;
    }
    parts.push_back(tail);
  }
  return seq(parts);
}

namespace {

// The NFA states reachable by epsilon edges, sorted.
template <class States>
std::vector<uint32_t> closure(const States& nfa, std::vector<uint32_t> seeds) {
  std::vector<uint32_t> out;
  std::vector<char> seen;
  auto mark = [&](uint32_t s) {
    // Sparse membership over a huge state space: a sorted check is enough for small sets.
    if (std::find(out.begin(), out.end(), s) != out.end()) return false;
    out.push_back(s);
    return true;
  };
  std::vector<uint32_t> todo;
  for (uint32_t s : seeds)
    if (mark(s)) todo.push_back(s);
  while (!todo.empty()) {
    const uint32_t s = todo.back();
    todo.pop_back();
    for (uint32_t t : nfa[s].eps)
      if (mark(t)) todo.push_back(t);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Result<Grammar> GrammarBuilder::finish(uint32_t root) {
  if (!overflow_.empty()) return make_error(overflow_);
  Grammar g;
  g.root = root;
  g.rule_start.assign(rules_.size(), 0);
  for (std::size_t r = 0; r < rules_.size(); ++r) {
    if (!rules_[r].defined) return make_error("internal: rule '" + rules_[r].name + "' was never defined");
    g.rule_names.push_back(rules_[r].name);
  }
  // Per rule: subset construction. Call edges are symbols too (one per callee rule).
  struct PendingCall {
    uint32_t position;
    uint32_t rule;
    std::vector<uint32_t> targets;
  };
  for (std::size_t r = 0; r < rules_.size(); ++r) {
    const uint32_t exit = rules_[r].body.out;
    std::map<std::vector<uint32_t>, uint32_t> ids;
    std::vector<std::vector<uint32_t>> sets;
    auto id_of = [&](std::vector<uint32_t> set) -> uint32_t {
      auto [it, added] = ids.emplace(set, 0);
      if (added) {
        it->second = static_cast<uint32_t>(g.positions.size());
        Position p;
        p.final = std::binary_search(set.begin(), set.end(), exit);
        g.positions.push_back(std::move(p));
        sets.push_back(std::move(set));
      }
      return it->second;
    };
    const uint32_t base = static_cast<uint32_t>(g.positions.size());
    g.rule_start[r] = id_of(closure(nfa_, {rules_[r].body.in}));
    for (std::size_t i = 0; i < sets.size(); ++i) {
      if (g.positions.size() > limits_.max_positions)
        return make_error("the schema compiles to more than " + std::to_string(limits_.max_positions) + " grammar positions");
      const std::vector<uint32_t> set = sets[i];  // copy: sets grows below
      const uint32_t here = base + static_cast<uint32_t>(i);
      std::vector<uint32_t> previous;
      int run_start = -1;
      for (int b = 0; b <= 256; ++b) {
        std::vector<uint32_t> targets;
        if (b < 256)
          for (uint32_t s : set)
            for (const auto& [label, t] : nfa_[s].bytes)
              if (label.has(static_cast<unsigned char>(b))) targets.push_back(t);
        std::sort(targets.begin(), targets.end());
        targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
        if (b < 256 && run_start >= 0 && targets == previous) continue;
        if (run_start >= 0 && !previous.empty()) {
          const uint32_t to = id_of(closure(nfa_, previous));
          g.positions[here].bytes.push_back({static_cast<unsigned char>(run_start), static_cast<unsigned char>(b - 1), to});
        }
        previous = std::move(targets);
        run_start = b;
      }
      std::map<uint32_t, std::vector<uint32_t>> by_rule;
      for (uint32_t s : set)
        for (const CallEdge& c : nfa_[s].calls) by_rule[c.rule].push_back(c.target);
      for (auto& [callee, targets] : by_rule) {
        const uint32_t to = id_of(closure(nfa_, targets));
        g.positions[here].calls.push_back({callee, to});
      }
    }
  }
  // Fewest bytes to the end of each rule: relax until nothing changes (costs are positive, calls
  // cost their rule's shortest text).
  for (bool changed = true; changed;) {
    changed = false;
    for (Position& p : g.positions) {
      uint32_t best = p.final ? 0 : p.min_to_end;
      for (const ByteRange& r : p.bytes) best = std::min(best, 1 + g.positions[r.target].min_to_end);
      for (const CallEdge& c : p.calls)
        best = std::min(best, g.positions[g.rule_start[c.rule]].min_to_end + g.positions[c.target].min_to_end);
      best = std::min(best, kUnreachable);
      if (best < p.min_to_end) {
        p.min_to_end = best;
        changed = true;
      }
    }
  }
  if (g.positions[g.rule_start[root]].min_to_end >= kUnreachable)
    return make_error("the schema admits no finite value (a $ref cycle with no way out?)");
  return g;
}

}  // namespace sluice::constrain
