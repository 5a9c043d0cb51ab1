#include "constrain/matcher.h"

#include <algorithm>

namespace sluice::constrain {
namespace {

void push_unique(std::vector<Head>& out, Head h, uint32_t cap) {
  if (std::find(out.begin(), out.end(), h) != out.end()) return;
  // Past the cap an alternative is dropped: the mask only narrows, so outputs stay valid.
  if (out.size() < cap) out.push_back(h);
}

}  // namespace

// ---- Stepper: one byte over a set of stacks ----

uint32_t Stepper::distance(const Head& h) const {
  if (h.pos == kAccepted) return 0;
  const uint32_t below = h.rest < kContext ? frames_[h.rest].below : 0;
  return std::min(kUnreachable, g_.positions[h.pos].min_to_end + below);
}

uint32_t Stepper::distance(std::span<const Head> heads) const {
  uint32_t best = kUnreachable;
  for (const Head& h : heads) best = std::min(best, distance(h));
  return best;
}

void Stepper::expand(Head h, std::vector<Head>& out, bool& left_rule) {
  if (h.pos != kAccepted) {
    // The common case: a position that only reads bytes.
    const Position& p = g_.positions[h.pos];
    if (p.calls.empty() && !p.final) {
      push_unique(out, h, limits_.max_stacks);
      return;
    }
  }
  visited_.clear();
  // Depth-first over calls and returns; visited guards the loops a rule that may be empty makes.
  std::vector<Head>& todo = todo_;
  todo.clear();
  todo.push_back(h);
  while (!todo.empty()) {
    const Head cur = todo.back();
    todo.pop_back();
    if (std::find(visited_.begin(), visited_.end(), cur) != visited_.end()) continue;
    visited_.push_back(cur);
    if (cur.pos == kAccepted) {
      push_unique(out, cur, limits_.max_stacks);
      continue;
    }
    const Position& p = g_.positions[cur.pos];
    if (!p.bytes.empty()) push_unique(out, cur, limits_.max_stacks);
    const uint32_t depth = cur.rest < kContext ? frames_[cur.rest].depth : 0;
    const uint32_t below = cur.rest < kContext ? frames_[cur.rest].below : 0;
    if (depth < limits_.max_stack_depth)
      for (const CallEdge& c : p.calls) {
        frames_.push_back({c.target, cur.rest, depth + 1, std::min(kUnreachable, g_.positions[c.target].min_to_end + below)});
        todo.push_back({g_.rule_start[c.rule], static_cast<uint32_t>(frames_.size() - 1)});
      }
    if (p.final) {
      if (cur.rest == kRoot) todo.push_back({kAccepted, kRoot});
      else if (cur.rest == kContext) left_rule = true;
      else todo.push_back({frames_[cur.rest].ret, frames_[cur.rest].parent});
    }
  }
}

void Stepper::pop(const Head& h, std::vector<Head>& out) {
  out.clear();
  bool left = false;
  if (h.rest == kRoot) out.push_back({kAccepted, kRoot});
  else if (h.rest != kContext) expand({frames_[h.rest].ret, frames_[h.rest].parent}, out, left);
}

void Stepper::step(std::span<const Head> in, unsigned char b, std::vector<Head>& out, bool& left_rule) {
  out.clear();
  for (const Head& h : in) {
    if (h.pos == kAccepted) continue;
    const int64_t next = g_.positions[h.pos].next(b);
    if (next >= 0) expand({static_cast<uint32_t>(next), h.rest}, out, left_rule);
  }
}

// ---- CompiledGrammar: per-position masks, computed once ----

std::shared_ptr<const CompiledGrammar::Entry> CompiledGrammar::entry(uint32_t position) const {
  {
    std::lock_guard lock(mu_);
    if (auto it = cache_.find(position); it != cache_.end()) return it->second;
  }
  auto e = compute(position);
  std::lock_guard lock(mu_);
  const std::size_t bytes = e->allowed.words().size() * 8 + (e->increasing.size() + e->decreasing.size()) * 8 + e->ends_rule.size() * 4 +
                            e->exits.nodes().size() * sizeof(PrefixTrie::Node) + e->exits.size() * 4;
  if (cache_used_ + bytes <= limits_.cache_bytes) {
    cache_.emplace(position, e);
    cache_used_ += bytes;
  }
  return e;
}

std::shared_ptr<const CompiledGrammar::Entry> CompiledGrammar::compute(uint32_t position) const {
  auto e = std::make_shared<Entry>();
  e->allowed = TokenMask(vocab_->size());
  const PrefixTrie& trie = vocab_->trie();
  const auto nodes = trie.nodes();
  const auto ids = trie.ids();
  std::vector<Frame> frames;
  Stepper stepper(grammar_, limits_, frames);
  // Per trie depth: the heads after that many bytes, whether a branch ended the rule right there,
  // and the arena size to roll back to.
  std::vector<std::vector<Head>> level(1, std::vector<Head>{{position, kContext}});
  std::vector<char> exit_at(1, 0);
  std::vector<std::size_t> mark(1, 0);
  std::vector<std::pair<std::string, int32_t>> exits;
  const int64_t start_distance = grammar_.positions[position].min_to_end;
  // A token that the rule does not take whole: what follows each exit on its path, for the walk
  // from the real stack below.
  auto add_exits = [&](int32_t id, std::size_t depth) {
    const std::string& bytes = vocab_->bytes(id);
    for (std::size_t k = 1; k <= depth; ++k)
      if (exit_at[k] && k < bytes.size()) exits.emplace_back(bytes.substr(k), id);
  };
  for (uint32_t i = 1; i < nodes.size();) {
    const auto& node = nodes[i];
    const std::size_t d = node.depth;
    if (level.size() <= d) {
      level.resize(d + 1);
      exit_at.resize(d + 1);
      mark.resize(d + 1);
    }
    frames.resize(mark[d - 1]);
    bool left = false;
    stepper.step(level[d - 1], node.byte, level[d], left);
    exit_at[d] = left;
    const bool alive = !level[d].empty();
    // How much further the output's end is after the token: the same in every context for a token
    // that stays in the rule.
    const int64_t delta = alive ? static_cast<int64_t>(stepper.distance(level[d])) - start_distance : 0;
    for (int32_t id : trie.ids_at(i)) {
      if (left) {
        e->allowed.set(id);
        e->ends_rule.push_back(id);
      } else if (alive) {
        e->allowed.set(id);
        if (delta > 0) e->increasing.push_back({id, static_cast<uint32_t>(delta)});
        if (delta < 0) e->decreasing.push_back({id, static_cast<uint32_t>(-delta)});
      } else {
        add_exits(id, d - 1);
      }
    }
    if (alive) {
      mark[d] = frames.size();
      ++i;
      continue;
    }
    // Nothing continues in the rule past here: longer tokens depend on the exits on their path.
    const uint32_t first = nodes[i].first + nodes[i].here;
    const uint32_t last = node.end < nodes.size() ? nodes[node.end].first : static_cast<uint32_t>(ids.size());
    bool any_exit = false;
    for (std::size_t k = 1; k <= d; ++k) any_exit = any_exit || exit_at[k];
    if (any_exit)
      for (uint32_t k = first; k < last; ++k) add_exits(ids[k], d);
    i = node.end;
  }
  e->exits = PrefixTrie(std::move(exits));
  return e;
}

// ---- Matcher ----

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar) : g_(std::move(grammar)) {
  const Grammar& g = g_->grammar();
  Stepper stepper(g, g_->limits(), frames_);
  bool left = false;
  stepper.expand({g.rule_start[g.root], kRoot}, heads_, left);
}

bool Matcher::complete() const {
  return std::any_of(heads_.begin(), heads_.end(), [](const Head& h) { return h.pos == kAccepted; });
}

bool Matcher::must_stop() const {
  return std::all_of(heads_.begin(), heads_.end(), [](const Head& h) { return h.pos == kAccepted; });
}

uint32_t Matcher::distance() const {
  std::vector<Frame>& frames = const_cast<std::vector<Frame>&>(frames_);  // read only
  Stepper stepper(g_->grammar(), g_->limits(), frames);
  return stepper.distance(heads_);
}

void Matcher::walk(const PrefixTrie& trie, const std::vector<Head>& start, uint32_t room, TokenMask& mask) {
  // Every string against the real stacks, sharing prefixes; a subtree is skipped once it is dead or
  // even its longest string could not shorten the way enough (one byte shortens it by one at most).
  const auto nodes = trie.nodes();
  const std::size_t mark = frames_.size();
  Stepper stepper(g_->grammar(), g_->limits(), frames_);
  if (levels_.empty()) levels_.resize(1);
  levels_[0] = start;
  level_marks_.assign(1, mark);
  for (uint32_t i = 1; i < nodes.size();) {
    const auto& node = nodes[i];
    const std::size_t d = node.depth;
    if (levels_.size() <= d) levels_.resize(d + 1);
    if (level_marks_.size() <= d) level_marks_.resize(d + 1);
    frames_.resize(level_marks_[d - 1]);
    bool left = false;
    stepper.step(levels_[d - 1], node.byte, levels_[d], left);
    const uint32_t nd = levels_[d].empty() ? kUnreachable : stepper.distance(levels_[d]);
    if (levels_[d].empty() || nd > room + (node.max_depth - node.depth)) {
      i = node.end;
      continue;
    }
    level_marks_[d] = frames_.size();
    if (nd <= room)
      for (int32_t id : trie.ids_at(i)) mask.set(id);
    ++i;
  }
  frames_.resize(mark);
}

bool Matcher::simulate(std::string_view bytes) {
  Stepper stepper(g_->grammar(), g_->limits(), frames_);
  scratch_a_ = heads_;
  bool left = false;
  for (char c : bytes) {
    stepper.step(scratch_a_, static_cast<unsigned char>(c), scratch_b_, left);
    if (scratch_b_.empty()) return false;
    std::swap(scratch_a_, scratch_b_);
  }
  return true;
}

Status Matcher::accept_bytes(std::string_view bytes) {
  const std::size_t mark = frames_.size();
  if (bytes.empty() || !simulate(bytes)) {
    frames_.resize(mark);
    return make_error("the grammar does not allow these bytes here");
  }
  heads_ = scratch_a_;
  return {};
}

Status Matcher::accept(int32_t token) {
  const VocabIndex& v = g_->vocab();
  if (token < 0 || static_cast<std::size_t>(token) >= v.size()) return make_error("token id out of range");
  if (v.bytes(token).empty()) return make_error("token " + std::to_string(token) + " cannot appear in constrained output");
  return accept_bytes(v.bytes(token));
}

void Matcher::fill_mask(TokenMask& mask, int remaining_tokens) {
  fill_mask_within(mask, remaining_tokens > 0 ? static_cast<uint32_t>(remaining_tokens - 1) : kUnreachable);
  if (!mask.any() && !heads_.empty()) {
    // The shortest completion is longer in bytes than the tokens left: tokens of several bytes may
    // still make it, so every token that shortens the way is allowed (the output ends at max_tokens
    // if they do not).
    Stepper stepper(g_->grammar(), g_->limits(), frames_);
    const uint32_t dist = stepper.distance(heads_);
    if (dist > 0 && dist < kUnreachable) fill_mask_within(mask, dist - 1);
  }
}

void Matcher::fill_mask_within(TokenMask& mask, uint32_t room) {
  const VocabIndex& v = g_->vocab();
  if (mask.size() != v.size()) mask = TokenMask(v.size());
  mask.clear();
  if (complete())
    for (int32_t id : v.stop_ids())
      if (id >= 0 && static_cast<std::size_t>(id) < v.size()) mask.set(id);
  Stepper stepper(g_->grammar(), g_->limits(), frames_);
  std::vector<const Head*> live;
  for (const Head& h : heads_)
    if (h.pos != kAccepted) live.push_back(&h);
  std::vector<Head> below;
  if (live.size() == 1) {
    // One stack: the cached entry's distances apply as they are.
    const Head& h = *live[0];
    const uint32_t dist = stepper.distance(h);
    auto entry = g_->entry(h.pos);
    const uint32_t after_rule = stepper.below(h);  // where a token that ends the rule leaves the output
    if (dist <= room) {
      mask.add(entry->allowed);
      for (const auto& [t, delta] : entry->increasing)
        if (dist + delta > room) mask.reset(t);
    } else {
      // Tight: only tokens that shorten the way enough.
      for (const auto& [t, delta] : entry->decreasing)
        if (dist - delta <= room) mask.set(t);
      if (after_rule <= room)
        for (int32_t t : entry->ends_rule) mask.set(t);
    }
    if (entry->exits.size()) {
      stepper.pop(h, below);
      walk(entry->exits, below, room, mask);
    }
    return;
  }
  // Several stacks (an ambiguous stretch, as anyOf's alternatives share a start): the union of their
  // entries, tokens that might overrun the budget checked whole; where some stack's shortest way
  // does not fit, the whole vocabulary is walked against all of them.
  for (const Head* h : live)
    if (stepper.distance(*h) > room) return walk(v.trie(), heads_, room, mask);
  std::vector<int32_t> recheck;
  std::vector<Head> one;
  for (const Head* h : live) {
    auto entry = g_->entry(h->pos);
    mask.add(entry->allowed);
    for (const auto& [t, delta] : entry->increasing)
      if (stepper.distance(*h) + delta > room) recheck.push_back(t);
    if (entry->exits.size()) {
      stepper.pop(*h, below);
      walk(entry->exits, below, room, mask);
    }
  }
  const std::size_t mark = frames_.size();
  for (int32_t t : recheck) {
    const bool fits = simulate(v.bytes(t)) && stepper.distance(scratch_a_) <= room;
    frames_.resize(mark);
    if (fits) mask.set(t);
    else mask.reset(t);
  }
}

}  // namespace sluice::constrain
