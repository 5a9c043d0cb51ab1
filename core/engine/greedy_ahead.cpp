#include "engine/greedy_ahead.h"

#include "engine/runtime.h"

namespace sluice {

GreedyAhead::GreedyAhead(Runtime& rt, SequenceKv& seq, int32_t next_position) : rt_(rt), seq_(seq), next_position_(next_position) {}

GreedyAhead::~GreedyAhead() { drop(); }

bool GreedyAhead::available(const Runtime& rt) {
  const std::string& mode = rt.options().decode_ahead;
  if (mode == "off" || !rt.model().greedy_on_device()) return false;
  return mode == "on" || (rt.backend().device().caps & SL_CAP_QUEUED) != 0;
}

Status GreedyAhead::issue(int32_t token) { return issue_from(token); }

Status GreedyAhead::issue_next() {
  if (slots_.empty()) return make_error("greedy decoding: no step in flight to continue from");
  return issue_from(std::nullopt);
}

Status GreedyAhead::issue_from(std::optional<int32_t> host_token) {
  // At most kGreedySlots - 1 steps in flight, so the slot written next is never one still read.
  if (slots_.size() + 1 >= Transformer::kGreedySlots) return make_error("greedy decoding: too many steps in flight");
  const int32_t pos = next_position_;
  if (pos + 1 > rt_.context_size()) return make_error("context full: " + std::to_string(pos + 1) + " tokens exceed the context size " +
                                                      std::to_string(rt_.context_size()));
  KvCache& kv = rt_.kv();
  if (auto s = kv.reserve(seq_, pos + 1); !s) return s;
  if (auto s = kv.update_recent(seq_.recent, seq_.first_own, pos, pos + 1); !s) return s;
  ForwardBatch batch;
  batch.tokens.assign(1, host_token.value_or(0));  // a device token's placeholder: the step reads the slot
  batch.positions.assign(1, pos);
  batch.seq_slots.assign(1, 0);
  const SequenceKv* one[] = {&seq_};
  kv.fill_batch(one, batch);
  batch.logit_rows.assign(1, 0);
  const int from = host_token ? -1 : static_cast<int>(slots_.back());
  const uint32_t to = next_slot_;
  if (auto s = rt_.model().forward_greedy(batch, kv.caches().front(), from, to); !s) return s;
  next_slot_ = (next_slot_ + 1) % Transformer::kGreedySlots;
  slots_.push_back(to);
  ++next_position_;
  // In device order: the recent pages no later step reads go back, a block's end snapshots the state.
  return kv.passed(seq_, next_position_);
}

Result<int32_t> GreedyAhead::take() {
  if (slots_.empty()) return make_error("greedy decoding: no step in flight");
  const uint32_t slot = slots_.front();
  slots_.pop_front();
  return rt_.model().greedy_choice(slot);
}

void GreedyAhead::drop() {
  while (!slots_.empty()) {
    (void)take();  // a failed step's error reaches the caller through the next op on this backend
    --next_position_;
  }
}

}  // namespace sluice
