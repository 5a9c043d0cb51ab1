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
  visited_.clear();
  // Depth-first over calls and returns; visited guards the loops a rule that may be empty makes.
  std::vector<Head> todo{h};
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
  const std::size_t bytes = e->allowed.words().size() * 8 + e->needs_context.size() * 4 + e->increasing.size() * 8;
  if (cache_used_ + bytes <= limits_.cache_bytes) {
    cache_.emplace(position, e);
    cache_used_ += bytes;
  }
  return e;
}

std::size_t CompiledGrammar::cached_positions() const {
  std::lock_guard lock(mu_);
  return cache_.size();
}

std::shared_ptr<const CompiledGrammar::Entry> CompiledGrammar::compute(uint32_t position) const {
  auto e = std::make_shared<Entry>();
  e->allowed = TokenMask(vocab_->size());
  const auto nodes = vocab_->nodes();
  const auto ids = vocab_->sorted_ids();
  std::vector<Frame> frames;
  Stepper stepper(grammar_, limits_, frames);
  // Per trie depth: the heads after that many bytes, whether a branch left the rule at or above
  // that depth, and the arena size to roll back to.
  std::vector<std::vector<Head>> level(1, std::vector<Head>{{position, kContext}});
  std::vector<char> left_above(1, 0);
  std::vector<std::size_t> mark(1, 0);
  const int64_t start_distance = grammar_.positions[position].min_to_end;
  for (uint32_t i = 1; i < nodes.size();) {
    const auto& node = nodes[i];
    const std::size_t d = node.depth;
    if (level.size() <= d) {
      level.resize(d + 1);
      left_above.resize(d + 1);
      mark.resize(d + 1);
    }
    frames.resize(mark[d - 1]);
    bool left = false;
    stepper.step(level[d - 1], node.byte, level[d], left);
    const bool above = left_above[d - 1];
    const bool alive = !level[d].empty();
    const auto [tb, te] = vocab_->tokens_at(i);
    // How much further the output's end is after the token: the same in every context for a token
    // that stays in the rule; one that ends the rule never moves it further (the rest of the stack
    // was already counted).
    int64_t delta = alive ? static_cast<int64_t>(stepper.distance(level[d])) - start_distance : 0;
    if (left) delta = std::min<int64_t>(delta, 0);
    for (uint32_t k = tb; k < te; ++k) {
      if (alive || left) {
        e->allowed.set(ids[k]);
        if (delta > 0) e->increasing.push_back({ids[k], static_cast<uint32_t>(delta)});
      } else if (above) {
        e->needs_context.push_back(ids[k]);
      }
    }
    if (alive) {
      left_above[d] = above || left;
      mark[d] = frames.size();
      ++i;
      continue;
    }
    if (above || left) {
      // Nothing continues here inside the rule: every longer token depends on the context.
      const auto [sb, se] = vocab_->tokens_below(i);
      for (uint32_t k = te; k < se; ++k) e->needs_context.push_back(ids[k]);
      (void)sb;
    }
    i = node.end;
  }
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

void Matcher::exact_walk(TokenMask& mask, uint32_t room) {
  // Every token against the real stacks, sharing prefixes; a subtree is skipped once it is dead or
  // even its longest token could not shorten the way enough (one byte shortens it by one at most).
  const VocabIndex& v = g_->vocab();
  const auto nodes = v.nodes();
  const auto ids = v.sorted_ids();
  const std::size_t mark = frames_.size();
  Stepper stepper(g_->grammar(), g_->limits(), frames_);
  std::vector<std::vector<Head>> level(1, heads_);
  std::vector<std::size_t> level_mark(1, mark);
  for (uint32_t i = 1; i < nodes.size();) {
    const auto& node = nodes[i];
    const std::size_t d = node.depth;
    if (level.size() <= d) {
      level.resize(d + 1);
      level_mark.resize(d + 1);
    }
    frames_.resize(level_mark[d - 1]);
    bool left = false;
    stepper.step(level[d - 1], node.byte, level[d], left);
    const uint32_t nd = level[d].empty() ? kUnreachable : stepper.distance(level[d]);
    if (level[d].empty() || nd > room + (node.max_depth - node.depth)) {
      i = node.end;
      continue;
    }
    level_mark[d] = frames_.size();
    if (nd <= room) {
      const auto [tb, te] = v.tokens_at(i);
      for (uint32_t k = tb; k < te; ++k) mask.set(ids[k]);
    }
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
  const VocabIndex& v = g_->vocab();
  if (mask.size() != v.size()) mask = TokenMask(v.size());
  mask.clear();
  if (complete())
    for (int32_t id : v.stop_ids())
      if (id >= 0 && static_cast<std::size_t>(id) < v.size()) mask.set(id);
  const std::size_t mark = frames_.size();
  Stepper stepper(g_->grammar(), g_->limits(), frames_);
  // The budget: a token may leave at most as many bytes to write as tokens will be left after it.
  // Every byte is a token in the vocabularies served, so one byte along a shortest completion is
  // always allowed, and an output that fits its max_tokens when it starts is always finished.
  const uint32_t room = remaining_tokens > 0 ? static_cast<uint32_t>(remaining_tokens - 1) : kUnreachable;
  auto fits_after = [&](std::string_view bytes) {
    const bool ok = simulate(bytes) && stepper.distance(scratch_a_) <= room;
    frames_.resize(mark);
    return ok;
  };
  std::vector<const Head*> live;
  bool tight = false;  // some stack's shortest completion does not fit: every token's distance matters
  for (const Head& h : heads_)
    if (h.pos != kAccepted) {
      live.push_back(&h);
      tight = tight || stepper.distance(h) > room;
    }
  if (tight) return exact_walk(mask, room);
  if (live.size() == 1) {
    // One stack: the cached entry's distances apply as they are.
    const Head& h = *live[0];
    const uint32_t dist = stepper.distance(h);
    auto entry = g_->entry(h.pos);
    mask.add(entry->allowed);
    for (const auto& [t, delta] : entry->increasing)
      if (dist + delta > room) mask.reset(t);
    for (int32_t t : entry->needs_context)
      if (!mask.test(t) && fits_after(v.bytes(t))) mask.set(t);
    return;
  }
  // Several stacks: the union of their entries, and every token that might not fit checked whole.
  std::vector<int32_t> recheck;
  std::vector<uint32_t> seen;
  for (const Head* h : live) {
    if (std::find(seen.begin(), seen.end(), h->pos) != seen.end()) continue;
    seen.push_back(h->pos);
    auto entry = g_->entry(h->pos);
    mask.add(entry->allowed);
    for (const auto& [t, delta] : entry->increasing) recheck.push_back(t);
    recheck.insert(recheck.end(), entry->needs_context.begin(), entry->needs_context.end());
  }
  std::sort(recheck.begin(), recheck.end());
  recheck.erase(std::unique(recheck.begin(), recheck.end()), recheck.end());
  for (int32_t t : recheck) {
    if (fits_after(v.bytes(t))) mask.set(t);
    else mask.reset(t);
  }
}

}  // namespace sluice::constrain
