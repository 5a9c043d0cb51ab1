#pragma once
// Greedy decoding a token ahead. A decode step's token depends on the step before, so a host that
// reads each step's logits leaves the device idle from the step's end until the next step's first
// op arrives: the logits' copy, the host's argmax, the next step's issue (~0.1 ms a token on an
// H100, perf/NOTES.md). On a backend that queues its ops (SL_CAP_QUEUED) with ABI 1.4, the greedy
// choice stays on the device (Transformer::forward_greedy) and feeds the next step, which the host
// issues before it reads the choice back: the device always has the next step queued.
//
// The device runs steps in issue order, so every host-side record (pages, recent window) may
// advance at issue; only the tokens are known late. A step issued after the sequence's last real
// one (past an end-of-sequence token, a stop string) is waited for and dropped. Several greedy
// sequences decode together the same way, a step a row each (the batched products read the weights
// once a step): the host issuing a batch's ~700 launches is then hidden behind the device's step
// too (perf/NOTES.md, "Batched decode, second sitting").
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "engine/sequence_kv.h"
#include "util/result.h"

namespace sluice {

class Runtime;

class GreedyAhead {
 public:
  // Steps kept queued behind the one whose choices the host waits for. One hides the host's issue
  // time. Two were measured to see whether they ride out the host's own pauses (a late wake-up, a
  // busy core): on the H100, llama3-8b 4-bit, alternating in one sitting, 324.7 / 328.2 / 327.1 /
  // 328.5 tokens/s one ahead against 324.5 / 327.9 / 328.9 / 327.3 two ahead, and on a machine whose
  // runs stalled 311.2 ± 22.9 against 311.0 ± 21.4 (perf/NOTES.md, "Two steps ahead"): no
  // difference, so one — a finished sequence wastes one dropped step, not two.
  static constexpr int kStepsAhead = 1;

  // Steps of one or several sequences decoded together, one token each a step, whose KV cache
  // records are `seqs` (their pages, window pages, recent pages and state snapshots kept up to date
  // here as each step is issued; each n_past is the caller's to advance as it takes the steps'
  // tokens); sequence i's next step is at position next_positions[i].
  GreedyAhead(Runtime& rt, std::vector<SequenceKv*> seqs, std::vector<int32_t> next_positions);
  GreedyAhead(Runtime& rt, SequenceKv& seq, int32_t next_position) : GreedyAhead(rt, {&seq}, {next_position}) {}
  ~GreedyAhead();  // drops the steps in flight
  GreedyAhead(const GreedyAhead&) = delete;
  GreedyAhead& operator=(const GreedyAhead&) = delete;

  // Whether rt's model and backend decode this way (the model's check, and --decode-ahead: "on",
  // "off", or "auto" = where the backend queues its ops).
  static bool available(const Runtime& rt);

  // Issues the step of `tokens` (from the host, one a sequence) at each sequence's next position.
  Status issue(std::span<const int32_t> tokens);
  Status issue(int32_t token) { return issue(std::span<const int32_t>(&token, 1)); }
  // Issues the step whose tokens are the choices of the newest step in flight.
  Status issue_next();
  // Waits for the oldest step in flight and returns its choices, one a sequence.
  Result<std::vector<int32_t>> take_all();
  // The one choice of a one-sequence step.
  Result<int32_t> take();
  // Waits for every step in flight and forgets their choices.
  void drop();

  int in_flight() const { return static_cast<int>(slots_.size()); }
  int32_t next_position(std::size_t i = 0) const { return next_positions_.at(i); }

 private:
  Status issue_from(std::span<const int32_t> host_tokens);

  Runtime& rt_;
  std::vector<SequenceKv*> seqs_;
  std::vector<int32_t> next_positions_;
  std::deque<uint32_t> slots_;  // the steps in flight, oldest first: each one's choice slot
  uint32_t next_slot_ = 0;
};

}  // namespace sluice
