// A draft model: a smaller model with the target's tokenizer guesses by decoding on its own KV
// cache. Per sequence it remembers which tokens its cache holds; before each proposal it rolls back
// to where they still agree with the sequence (the target kept fewer guesses than were fed) and
// feeds the rest, then decodes the guesses one at a time.
#include <algorithm>

#include "engine/drafter.h"
#include "engine/runtime.h"

namespace sluice {
namespace {

Status check_same_tokenizer(const Tokenizer& target, const Tokenizer& draft, const std::string& draft_dir) {
  if (target.vocab_size() != draft.vocab_size())
    return make_error("--draft-model " + draft_dir + ": its tokenizer has " + std::to_string(draft.vocab_size()) +
                      " tokens, the target's " + std::to_string(target.vocab_size()) + " (speculative decoding needs the same tokenizer)");
  for (std::size_t id = 0; id < target.vocab_size(); ++id) {
    const auto i = static_cast<int32_t>(id);
    if (target.id_to_token(i) != draft.id_to_token(i))
      return make_error("--draft-model " + draft_dir + ": token " + std::to_string(id) + " is '" + draft.id_to_token(i) +
                        "' there and '" + target.id_to_token(i) + "' in the target (speculative decoding needs the same tokenizer)");
  }
  return {};
}

class ModelSequence final : public SequenceDrafter {
 public:
  ModelSequence(Runtime& rt, const SamplingParams& sampling) : rt_(rt), sampler_(derived(sampling)) {}
  ~ModelSequence() override { rt_.release(kv_); }

  Result<DraftTokens> propose(std::span<const int32_t> tokens, std::size_t n_prompt, int n) override {
    DraftTokens d;
    n = std::min(n, rt_.context_size() - static_cast<int>(tokens.size()));
    if (n <= 0 || tokens.empty()) return d;
    // Keep what the cache holds of `tokens`, less the last token: its logits are the first guess's.
    std::size_t keep = 0;
    while (keep < fed_.size() && keep < tokens.size() && fed_[keep] == tokens[keep]) ++keep;
    keep = std::min({keep, tokens.size() - 1, static_cast<std::size_t>(kv_.n_past)});
    if (auto st = rt_.kv().rollback(kv_, static_cast<int32_t>(keep)); !st) return st.error();
    fed_.assign(tokens.begin(), tokens.end());
    if (auto st = rt_.run(kv_, tokens.subspan(keep), false, logits_); !st) return st.error();
    history_.assign(tokens.begin(), tokens.end());
    for (int i = 0; i < n; ++i) {
      TokenDistribution q = sampler_.distribution(logits_, history_, n_prompt);
      const int32_t id = sampler_.greedy() ? q.front().second : sampler_.draw(q);
      d.ids.push_back(id);
      if (!sampler_.greedy()) d.q.push_back(std::move(q));
      history_.push_back(id);
      if (i + 1 == n) break;  // the last guess need not be fed: nothing is drafted after it
      const int32_t one[] = {id};
      if (auto st = rt_.run(kv_, one, false, logits_); !st) return st.error();
      fed_.push_back(id);
    }
    return d;
  }

 private:
  // The draft's own generator: a seeded request stays reproducible without sharing the target's.
  static SamplingParams derived(SamplingParams p) {
    if (p.seed) p.seed = *p.seed ^ 0x9e3779b97f4a7c15ull;
    return p;
  }

  Runtime& rt_;
  Sampler sampler_;
  SequenceKv kv_;
  std::vector<int32_t> fed_;  // the tokens at positions [0, kv_.n_past) of the draft's cache, and beyond
  std::vector<int32_t> history_;
  std::vector<float> logits_;
};

class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(std::unique_ptr<Runtime> rt) : rt_(std::move(rt)) {}
  std::unique_ptr<SequenceDrafter> start(const SamplingParams& sampling) override {
    return std::make_unique<ModelSequence>(*rt_, sampling);
  }
  std::string describe() const override { return "draft model " + rt_->model_name(); }
  uint64_t memory_bytes() const override { return rt_->model().weight_bytes() + rt_->kv().capacity_bytes(); }

 private:
  std::unique_ptr<Runtime> rt_;
};

}  // namespace

Result<std::unique_ptr<Drafter>> open_draft_model(const EngineOptions& options, const Runtime& target) {
  EngineOptions o = options;
  o.model_dir = options.draft_model;
  o.mem_limit_bytes = 0;  // a part of the target's plan (Runtime::make_room), not one of its own
  o.draft_model.clear();
  o.draft.clear();
  o.decode_ahead = "off";  // the draft's steps are read on the host, one by one
  o.gpu_layers.clear();
  o.devices.clear();
  o.ctx_size = target.context_size();
  // A small model's cache is small: exact rows, and no recent window whose trimmed pages a rollback
  // could not bring back (Runtime::run trims at the end of each pass, past the rollback point).
  o.kv_codec = "f16";
  o.kv_recent = 0;
  if (!options.devices.empty()) o.backend = target.backend().name();  // the first offload device's kind
  auto rt = Runtime::open(o);
  if (!rt) return make_error("--draft-model " + options.draft_model + ": " + rt.message());
  if (auto st = check_same_tokenizer(target.tokenizer(), (*rt)->tokenizer(), options.draft_model); !st) return st.error();
  if ((*rt)->kv().has_state())
    return make_error("--draft-model " + options.draft_model +
                      ": it has recurrent layers, whose state speculative decoding cannot roll back yet; choose a draft without them");
  return std::unique_ptr<Drafter>(std::make_unique<ModelDrafter>(std::move(*rt)));
}

}  // namespace sluice
