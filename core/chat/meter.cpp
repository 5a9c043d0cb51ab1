// Budget accounting for one render (steps, depth, wall time, sizes) and the end-of-render cleanup of
// reference cycles.
#include "chat/meter.h"

#include <string>

namespace sluice::chat {
namespace {

thread_local RenderMeter* current_meter = nullptr;

// Reading the clock on every step would cost more than the step; every 4096 steps is ~0.5 ms of work.
constexpr std::uint64_t kClockInterval = 4096;

}  // namespace

RenderMeter::RenderMeter(const RenderBudget& budget)
    : budget_(budget), deadline_(std::chrono::steady_clock::now() + budget.max_wall_time), previous_(current_meter) {
  current_meter = this;
}

void RenderMeter::start_clock() {
  deadline_ = std::chrono::steady_clock::now() + budget_.max_wall_time;
  next_clock_check_ = steps_;
}

void RenderMeter::hold(std::size_t bytes) {
  if (held_ + static_cast<std::int64_t>(bytes) > static_cast<std::int64_t>(budget_.max_held_bytes))
    fail("TemplateRuntimeError: the template exceeded its memory budget (" + std::to_string(budget_.max_held_bytes) +
         " bytes of strings held at once)");
  held_ += static_cast<std::int64_t>(bytes);
}

RenderMeter::~RenderMeter() {
  current_meter = previous_;
  // Emptying every mutated container breaks any cycle through it; what they held is freed here
  // (iteratively: see release_nested in value.cpp).
  std::vector<Value> released;
  for (auto& l : mutated_lists_) {
    for (auto& v : l->items) released.push_back(std::move(v));
    l->items.clear();
  }
  for (auto& d : mutated_dicts_) {
    for (auto& [k, v] : d->items) {
      released.push_back(std::move(k));
      released.push_back(std::move(v));
    }
    d->items.clear();
  }
}

void RenderMeter::step(std::uint64_t n) {
  steps_ += n;
  if (steps_ > budget_.max_steps)
    fail("TemplateRuntimeError: the template exceeded its step budget (" + std::to_string(budget_.max_steps) + " steps)");
  if (steps_ >= next_clock_check_) {
    next_clock_check_ = steps_ + kClockInterval;
    if (std::chrono::steady_clock::now() > deadline_)
      fail("TemplateRuntimeError: the template exceeded its time budget (" +
           std::to_string(budget_.max_wall_time.count()) + " ms)");
  }
}

void RenderMeter::enter() {
  if (depth_ >= budget_.max_depth)
    fail("RecursionError: maximum template recursion depth exceeded (" + std::to_string(budget_.max_depth) + " levels)");
  ++depth_;
  if (depth_ > peak_depth_) peak_depth_ = depth_;
  step(1);
}

void RenderMeter::track_mutable(const ListPtr& list) {
  if (list->tracked) return;
  list->tracked = true;
  mutated_lists_.push_back(list);
}

void RenderMeter::track_mutable(const DictPtr& dict) {
  if (dict->tracked) return;
  dict->tracked = true;
  mutated_dicts_.push_back(dict);
}

RenderMeter* active_meter() { return current_meter; }

void charge_steps(std::uint64_t n) {
  if (current_meter) current_meter->step(n);
}

void check_size(std::size_t bytes, const char* what) {
  const std::size_t limit = current_meter ? current_meter->budget().max_output_bytes : RenderBudget{}.max_output_bytes;
  if (bytes > limit)
    fail(std::string("TemplateRuntimeError: ") + what + " exceeds the size budget (" + std::to_string(limit) + " bytes)");
}

void hold_string_bytes(std::size_t bytes) {
  if (current_meter) current_meter->hold(bytes);
}

void release_string_bytes(std::size_t bytes) noexcept {
  if (current_meter) current_meter->release(bytes);
}

void check_string_value(std::size_t bytes) {
  if (current_meter) check_size(bytes, "a string");
}

std::size_t checked_size(std::int64_t count, std::size_t unit, const char* what) {
  if (count <= 0 || unit == 0) return 0;
  std::size_t total;
  if (__builtin_mul_overflow(static_cast<std::size_t>(count), unit, &total))
    fail(std::string("OverflowError: ") + what + " is too long");
  check_size(total, what);
  return total;
}

}  // namespace sluice::chat
