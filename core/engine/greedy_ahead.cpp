#include "engine/greedy_ahead.h"

#include <utility>

#include "engine/runtime.h"

namespace sluice {

GreedyAhead::GreedyAhead(Runtime& rt, std::vector<SequenceKv*> seqs, std::vector<int32_t> next_positions)
    : rt_(rt), seqs_(std::move(seqs)), next_positions_(std::move(next_positions)) {}

GreedyAhead::~GreedyAhead() { drop(); }

bool GreedyAhead::available(const Runtime& rt) {
  const std::string& mode = rt.options().decode_ahead;
  if (mode == "off" || !rt.model().greedy_on_device()) return false;
  return mode == "on" || (rt.backend().device().caps & SL_CAP_QUEUED) != 0;
}

Status GreedyAhead::issue(std::span<const int32_t> tokens) {
  if (tokens.size() != seqs_.size()) return make_error("greedy decoding: one token a sequence");
  return issue_from(tokens);
}

Status GreedyAhead::issue_next() {
  if (slots_.empty()) return make_error("greedy decoding: no step in flight to continue from");
  return issue_from({});
}

Status GreedyAhead::issue_from(std::span<const int32_t> host_tokens) {
  // At most kGreedySlots - 1 steps in flight, so the slot written next is never one still read.
  if (slots_.size() + 1 >= Transformer::kGreedySlots) return make_error("greedy decoding: too many steps in flight");
  if (seqs_.empty() || next_positions_.size() != seqs_.size()) return make_error("greedy decoding: no sequences");
  KvCache& kv = rt_.kv();
  ForwardBatch batch;
  for (std::size_t i = 0; i < seqs_.size(); ++i) {
    const int32_t pos = next_positions_[i];
    if (pos + 1 > rt_.context_size())
      return make_error("context full: " + std::to_string(pos + 1) + " tokens exceed the context size " + std::to_string(rt_.context_size()));
    if (auto s = kv.reserve(*seqs_[i], pos + 1); !s) return s;
    if (auto s = kv.update_recent(seqs_[i]->recent, seqs_[i]->first_own, pos, pos + 1); !s) return s;
    batch.tokens.push_back(host_tokens.empty() ? 0 : host_tokens[i]);  // a device token's placeholder: the step reads the slot
    batch.positions.push_back(pos);
    batch.seq_slots.push_back(static_cast<int32_t>(i));
    batch.logit_rows.push_back(static_cast<uint32_t>(i));
  }
  std::vector<const SequenceKv*> records(seqs_.begin(), seqs_.end());
  kv.fill_batch(records, batch);
  const int from = host_tokens.empty() ? static_cast<int>(slots_.back()) : -1;
  const uint32_t to = next_slot_;
  if (auto s = rt_.model().forward_greedy(batch, kv.caches().front(), from, to); !s) return s;
  next_slot_ = (next_slot_ + 1) % Transformer::kGreedySlots;
  slots_.push_back(to);
  // In device order: the recent pages no later step reads go back, a block's end snapshots the state.
  for (std::size_t i = 0; i < seqs_.size(); ++i) {
    ++next_positions_[i];
    if (auto s = kv.passed(*seqs_[i], next_positions_[i]); !s) return s;
  }
  return {};
}

Result<std::vector<int32_t>> GreedyAhead::take_all() {
  if (slots_.empty()) return make_error("greedy decoding: no step in flight");
  const uint32_t slot = slots_.front();
  slots_.pop_front();
  return rt_.model().greedy_choices(slot);
}

Result<int32_t> GreedyAhead::take() {
  auto ids = take_all();
  if (!ids) return ids.error();
  if (ids->size() != 1) return make_error("greedy decoding: a step of several sequences has several tokens");
  return ids->front();
}

void GreedyAhead::drop() {
  while (!slots_.empty()) {
    (void)take_all();  // a failed step's error reaches the caller through the next op on this backend
    for (auto& p : next_positions_) --p;
  }
}

}  // namespace sluice
