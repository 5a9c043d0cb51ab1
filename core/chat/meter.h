#pragma once
// Tracks one render's spending against its RenderBudget. The meter of the render running on this
// thread is reachable from anywhere in the engine (filters, string helpers, value walks), so work
// done deep inside a built-in is charged without threading the interpreter through every helper.
#include <chrono>
#include <cstdint>
#include <vector>

#include "chat/budget.h"
#include "chat/value.h"

namespace sluice::chat {

class RenderMeter {
 public:
  explicit RenderMeter(const RenderBudget& budget);
  ~RenderMeter();  // breaks the reference cycles the render made (see track_mutable)
  RenderMeter(const RenderMeter&) = delete;
  RenderMeter& operator=(const RenderMeter&) = delete;

  const RenderBudget& budget() const { return budget_; }
  // Starts the wall clock: called once the variables are converted, so that the time budget covers
  // the template's own work (converting a large request is linear and bounded by the body limit).
  void start_clock();
  void step(std::uint64_t n);
  void hold(std::size_t bytes);
  void release(std::size_t bytes) { held_ -= static_cast<std::int64_t>(bytes); }
  void enter();  // one level deeper; fails past max_depth
  void leave() { --depth_; }
  // A container that the template mutated may now be part of a cycle (`set ns.a = ns`); the meter
  // empties it when the render ends so shared ownership does not leak the cycle.
  void track_mutable(const ListPtr& list);
  void track_mutable(const DictPtr& dict);

  std::uint64_t steps() const { return steps_; }
  std::int64_t held_bytes() const { return held_; }
  int peak_depth() const { return peak_depth_; }

 private:
  RenderBudget budget_;
  std::chrono::steady_clock::time_point deadline_;
  std::uint64_t steps_ = 0;
  std::int64_t held_ = 0;  // signed: values made before this render may be freed during it
  std::uint64_t next_clock_check_ = 0;
  int depth_ = 0;
  int peak_depth_ = 0;
  std::vector<ListPtr> mutated_lists_;
  std::vector<DictPtr> mutated_dicts_;
  RenderMeter* previous_;
};

// The meter of the render running on this thread, or null outside a render.
RenderMeter* active_meter();

// Helpers for the built-ins; outside a render they only check what needs no budget.
void charge_steps(std::uint64_t n);
// Fails when a string or list of `bytes` would exceed the budget's max_output_bytes.
void check_size(std::size_t bytes, const char* what);
// count * unit, failing (instead of wrapping) when the product overflows or exceeds the size budget.
std::size_t checked_size(std::int64_t count, std::size_t unit, const char* what);

// One level of native recursion, released on scope exit.
class DepthGuard {
 public:
  explicit DepthGuard(RenderMeter& meter) : meter_(meter) { meter_.enter(); }
  ~DepthGuard() { meter_.leave(); }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  RenderMeter& meter_;
};

}  // namespace sluice::chat
