#include "constrain/grammar.h"

#include <algorithm>
#include <array>
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
    return seq(parts);
  }
  // The optional copies in a row, each place able to jump straight to one shared end: closures stay
  // small (nested optionals, (a(b(c)?)?)?, would make every closure as long as the rest of the chain).
  Frag head = seq(parts);
  const uint32_t end = state();
  uint32_t at = head.out;
  for (int i = min; i < max && overflow_.empty(); ++i) {
    eps(at, end);
    const Frag f = make();
    eps(at, f.in);
    at = f.out;
  }
  eps(at, end);
  return {head.in, end};
}

namespace {

// The NFA states reachable by epsilon edges, sorted. `mark` (one slot per NFA state) and `stamp`
// make membership O(1) without clearing between calls.
template <class States>
std::vector<uint32_t> closure(const States& nfa, const std::vector<uint32_t>& seeds, std::vector<uint32_t>& mark, uint32_t& stamp) {
  ++stamp;
  std::vector<uint32_t> out, todo;
  for (uint32_t s : seeds)
    if (mark[s] != stamp) {
      mark[s] = stamp;
      out.push_back(s);
      todo.push_back(s);
    }
  while (!todo.empty()) {
    const uint32_t s = todo.back();
    todo.pop_back();
    for (uint32_t t : nfa[s].eps)
      if (mark[t] != stamp) {
        mark[t] = stamp;
        out.push_back(t);
        todo.push_back(t);
      }
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
  std::vector<uint32_t> mark(nfa_.size(), 0);
  uint32_t stamp = 0;
  std::size_t work = 0;  // NFA states visited: bounds the subset construction's time
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
    g.rule_start[r] = id_of(closure(nfa_, {rules_[r].body.in}, mark, stamp));
    std::array<std::vector<uint32_t>, 256> targets;
    for (std::size_t i = 0; i < sets.size(); ++i) {
      if (g.positions.size() > limits_.max_positions)
        return make_error("the schema compiles to more than " + std::to_string(limits_.max_positions) + " grammar positions");
      const std::vector<uint32_t> set = sets[i];  // copy: sets grows below
      work += set.size();
      if (work > limits_.max_work)
        return make_error("the schema is too complex to compile (its automaton grows past " + std::to_string(limits_.max_work) + " steps)");
      const uint32_t here = base + static_cast<uint32_t>(i);
      for (auto& t : targets) t.clear();
      for (uint32_t s : set)
        for (const auto& [label, t] : nfa_[s].bytes)
          for (int b = 0; b < 256; ++b)
            if (label.has(static_cast<unsigned char>(b))) targets[b].push_back(t);
      // Runs of bytes that lead to the same set become one range.
      int run_start = -1;
      for (int b = 0; b <= 256; ++b) {
        if (b < 256) {
          std::sort(targets[b].begin(), targets[b].end());
          targets[b].erase(std::unique(targets[b].begin(), targets[b].end()), targets[b].end());
          if (run_start >= 0 && targets[b] == targets[run_start]) continue;
        }
        if (run_start >= 0 && !targets[run_start].empty()) {
          const uint32_t to = id_of(closure(nfa_, targets[run_start], mark, stamp));
          g.positions[here].bytes.push_back({static_cast<unsigned char>(run_start), static_cast<unsigned char>(b - 1), to});
        }
        run_start = b;
      }
      std::map<uint32_t, std::vector<uint32_t>> by_rule;
      for (uint32_t s : set)
        for (const CallEdge& c : nfa_[s].calls) by_rule[c.rule].push_back(c.target);
      for (auto& [callee, call_targets] : by_rule) {
        const uint32_t to = id_of(closure(nfa_, call_targets, mark, stamp));
        g.positions[here].calls.push_back({callee, to});
      }
    }
  }
  // Fewest bytes to the end of each rule: relax until nothing changes (costs are positive, calls
  // cost their rule's shortest text).
  // Positions are numbered from a rule's start onward and distances flow back from its end, so a
  // backward sweep settles a chain in one pass (a forward one would take a pass per position).
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = g.positions.rbegin(); it != g.positions.rend(); ++it) {
      Position& p = *it;
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
