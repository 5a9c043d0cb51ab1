// The engine thread: continuous batching over up to --parallel sequences.
//
// Each step fills one batch from every active sequence — one token for each decoding sequence, a
// chunk of prompt for each prefilling one (whole chunks of --prefill-size, so a prompt is cut the
// same way whether it runs alone or beside others) — and runs one forward pass. New requests join
// between steps (reusing any cached prefix of their prompt), finished ones leave and free their
// pages at once. Results stream back through each request's callbacks on this thread.
//
// With speculative decoding (engine/speculation.h) a decoding sequence's chunk is its last token and
// a drafter's guesses: the pass computes logits at every one of them, the guesses the target agrees
// with are kept, and the KV cache is rolled back past the first one it does not.
#include "engine/engine.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/drafter.h"
#include "engine/greedy_ahead.h"
#include "engine/runtime.h"
#include "engine/sequence.h"

namespace sluice {

const char* to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "error";
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

// Choice i's sampling: choice 0 keeps the request's seed (n = 1 samples as before), the others get
// seeds mixed from it and i (splitmix64's finaliser), so a seeded request reproduces every choice.
SamplingParams choice_sampling(const SamplingParams& params, int choice) {
  SamplingParams p = params;
  if (choice > 0 && p.seed) {
    uint64_t z = *p.seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(choice);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    p.seed = z ^ (z >> 31);
  }
  return p;
}

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::unique_ptr<Runtime> rt, std::unique_ptr<Drafter> drafter, const EngineOptions& options)
      : rt_(std::move(rt)), drafter_(std::move(drafter)), queue_limit_(options.queue_size), parallel_(std::max(1, options.parallel)),
        prefill_size_(std::max(1, options.prefill_size)),
        snapshot_every_(std::max(0, options.state_snapshot_tokens) / static_cast<int>(rt_->kv().page_tokens()) *
                        static_cast<int>(rt_->kv().page_tokens())),
        decode_ahead_(GreedyAhead::available(*rt_)),
        num_draft_tokens_(std::max(1, options.num_draft_tokens)), spec_max_batch_(options.spec_max_batch),
        draft_rests_(options.draft_rests),
        mem_wait_(std::chrono::milliseconds(std::max(0, options.mem_wait_ms))) {
    if (drafter_) metrics_.drafter = drafter_->describe(), metrics_.draft_bytes = drafter_->memory_bytes();
    metrics_.weight_bytes = rt_->model().weight_bytes();
    metrics_.offloaded_layers = rt_->offloaded_layers();
    metrics_.kv_bytes_capacity = rt_->kv().capacity_bytes();
    metrics_.kv_bytes_per_token = rt_->kv().bytes_per_token();
    metrics_.kv_page_tokens = rt_->kv().page_tokens();
    metrics_.memory = rt_->memory_budget();
    metrics_.kv_recent_window = rt_->kv().recent_window();
    metrics_.kv_recent_bytes = rt_->kv().recent_bytes();
    metrics_.kv_pages_total = rt_->kv().n_pages();
    if (const PagePool* w = rt_->kv().window_pool()) metrics_.kv_window_pages_total = w->n_pages();
    if (const PagePool* st = rt_->kv().state_pool()) metrics_.kv_state_slots_total = st->n_pages();
    metrics_.kv_window_bytes_per_sequence = rt_->kv().window_page_bytes() * rt_->kv().window_pages_per_sequence();
    metrics_.kv_state_bytes_per_sequence = rt_->kv().state_slot_bytes();
    thread_ = std::thread([this] { loop(); });
  }
  ~EngineImpl() override { shutdown(); }

  Status submit(std::shared_ptr<GenerationRequest> req) override {
    if (!req) return make_error("no request");
    if (req->prompt_ids.empty()) return make_error("the prompt is empty");
    const auto vocab = static_cast<int32_t>(rt_->config().vocab_size);
    for (int32_t id : req->prompt_ids)
      if (id < 0 || id >= vocab)
        return make_error("prompt token id " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(vocab - 1) + ")");
    if (static_cast<int>(req->prompt_ids.size()) >= rt_->context_size())
      return make_error("the prompt has " + std::to_string(req->prompt_ids.size()) + " tokens; the context holds " +
                        std::to_string(rt_->context_size()));
    if (req->max_tokens < 0) return make_error("max_tokens must not be negative");
    if (req->n < 1 || req->n > GenerationRequest::kMaxChoices)
      return make_error("n must be between 1 and " + std::to_string(GenerationRequest::kMaxChoices));
    for (const auto& [id, bias] : req->sampling.logit_bias)
      if (id < 0 || id >= vocab || !std::isfinite(bias))
        return make_error("logit_bias: token id " + std::to_string(id) + " is outside the vocabulary or its bias is not finite");
    if (const uint32_t need = claim_pages(*req) * static_cast<uint32_t>(req->n); need > rt_->kv().n_pages()) {
      const uint32_t pool_tokens = rt_->kv().n_pages() * rt_->kv().page_tokens();
      return make_error("the request may need " + std::to_string(need * rt_->kv().page_tokens()) + " tokens of KV cache (prompt " +
                        std::to_string(req->prompt_ids.size()) + " + max_tokens " + std::to_string(req->max_tokens) +
                        (req->n > 1 ? ", " + std::to_string(req->n) + " choices" : std::string()) + "); the KV pool holds " + std::to_string(pool_tokens) + " tokens");
    }
    std::lock_guard lock(mu_);
    if (stopping_) return make_error("the engine is shutting down");
    if (static_cast<int>(queue_.size()) >= queue_limit_) return make_error("queue full");
    queue_.push_back({std::move(req), Clock::now()});
    metrics_.queue_depth = static_cast<int>(queue_.size());
    cv_.notify_one();
    return {};
  }

  GenerationResult generate(GenerationRequest request) override {
    if (request.n != 1) {  // one result to return: n choices come through submit()'s callbacks
      GenerationResult r;
      r.finish = FinishReason::kError;
      r.error = "generate() runs one choice (n = 1)";
      return r;
    }
    auto req = std::make_shared<GenerationRequest>(std::move(request));
    auto done = std::make_shared<std::promise<GenerationResult>>();
    auto future = done->get_future();
    auto user_done = req->on_done;
    req->on_done = [done, user_done](const GenerationResult& r) {
      if (user_done) user_done(r);
      done->set_value(r);
    };
    if (auto s = submit(req); !s) {
      GenerationResult r;
      r.finish = FinishReason::kError;
      r.error = s.message();
      return r;
    }
    return future.get();
  }

  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      for (auto& p : queue_) p.request->cancelled->store(true);
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  const Tokenizer& tokenizer() const override { return rt_->tokenizer(); }
  const ModelConfig& model_config() const override { return rt_->config(); }
  std::string model_name() const override { return rt_->model_name(); }
  std::string backend_name() const override { return rt_->placement(); }
  std::vector<int32_t> eos_ids() const override { return rt_->config().eos_token_ids; }
  int context_size() const override { return rt_->context_size(); }
  EngineMetrics metrics() const override {
    std::lock_guard lock(mu_);
    return metrics_;
  }

 private:
  struct Pending {
    std::shared_ptr<GenerationRequest> request;
    Clock::time_point queued_at;
  };

  void loop() {
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !active_.empty() || !waiting_choices_.empty(); });
        if (stopping_) {
          for (auto& p : queue_) waiting_cancel_.push_back(std::move(p));
          queue_.clear();
        }
      }
      // Requests refused while shutting down end as cancelled, outside the lock.
      for (auto& p : waiting_cancel_) finish_unstarted(p, FinishReason::kCancelled);
      waiting_cancel_.clear();
      if (stopping_) {  // choices waiting for a slot end too
        for (auto& c : waiting_choices_) finish(*c, FinishReason::kCancelled);
        for (auto& c : waiting_choices_) done(*c);
        waiting_choices_.clear();
      }
      if (stopping_ && active_.empty()) return;
      if (stopping_)
        for (auto& s : active_) s->request->cancelled->store(true);
      admit();
      for (auto& p : expired_) finish_unstarted(p, FinishReason::kError, /*retry_later=*/true);
      expired_.clear();
      publish_metrics();
      step();
      retire();
      publish_metrics();
    }
  }

  // The KV pages a request may hold at its longest: its prompt and every token it may generate,
  // within the context.
  uint32_t claim_pages(const GenerationRequest& req) const {
    const int64_t tokens = std::min<int64_t>(static_cast<int64_t>(req.prompt_ids.size()) + std::max(0, req.max_tokens), rt_->context_size());
    const uint32_t page = rt_->kv().page_tokens();
    return static_cast<uint32_t>((tokens + page - 1) / page);
  }

  // Moves queued requests into free slots, reusing cached prefixes of their prompts. A request
  // starts only when the pages it may need are not claimed by the sequences already running (the
  // prefix cache's pages are evicted on demand), so no sequence ever waits for pages mid-generation
  // and the KV pool — sized under --mem-limit — is never overdrawn. Requests wait in order; those
  // that waited for pages longer than --mem-wait end with retry_later. A request claims for all its
  // choices (n > 1) at once; the choices that wait for a slot then come first, their pages claimed.
  void admit() {
    while (static_cast<int>(active_.size()) < parallel_ && !waiting_choices_.empty()) {
      std::unique_ptr<Sequence> seq = std::move(waiting_choices_.front());
      waiting_choices_.pop_front();
      seq->started_at = Clock::now();
      seq->result.stats.queue_ms = ms_between(seq->queued_at, seq->started_at);
      reuse_prefix(*seq);
      active_.push_back(std::move(seq));
    }
    while (static_cast<int>(active_.size()) < parallel_) {
      Pending next;
      uint32_t need = 0;
      {
        std::lock_guard lock(mu_);
        if (queue_.empty() || stopping_) return;
        need = claim_pages(*queue_.front().request) * static_cast<uint32_t>(std::max(1, queue_.front().request->n));
        if (claimed_pages_ + need > rt_->kv().n_pages()) {
          expire_waiting_for_pages();
          return;
        }
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      claimed_pages_ += need;
      auto seq = std::make_unique<Sequence>();
      seq->request = next.request;
      seq->queued_at = next.queued_at;
      seq->started_at = Clock::now();
      seq->tokens = next.request->prompt_ids;
      seq->n_prompt = seq->tokens.size();
      seq->sampler = std::make_unique<Sampler>(next.request->sampling);
      seq->constraint = next.request->constraint;
      if (drafter_) {
        seq->drafter = drafter_->start(next.request->sampling);
        seq->draft_length = DraftLength(num_draft_tokens_, draft_rests_);
      }
      seq->limit = std::min(next.request->max_tokens, rt_->context_size() - static_cast<int>(seq->n_prompt));
      seq->claimed_pages = need;
      seq->result.stats.prompt_tokens = static_cast<int>(seq->n_prompt);
      seq->result.stats.queue_ms = ms_between(next.queued_at, seq->started_at);
      reuse_prefix(*seq);
      active_.push_back(std::move(seq));
    }
  }

  // Requests queued longer than --mem-wait while the head of the queue waits for pages: they end
  // now (finish_unstarted, outside the lock, in loop()) and the edge answers 503 with Retry-After.
  void expire_waiting_for_pages() {
    const auto now = Clock::now();
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (now - it->queued_at < mem_wait_) {
        ++it;
        continue;
      }
      expired_.push_back(std::move(*it));
      it = queue_.erase(it);
      ++metrics_.requests_memory_timeout;
    }
    metrics_.queue_depth = static_cast<int>(queue_.size());
  }

  // Takes the longest run of the prompt's full blocks that the prefix cache holds (for every kind
  // of layer: KvCache::reuse_prefix). At least one prompt token is always left to compute: its
  // logits start the generation.
  void reuse_prefix(Sequence& seq) {
    const std::size_t reusable_blocks = (seq.n_prompt - 1) / rt_->kv().page_tokens();
    if (auto st = rt_->kv().reuse_prefix(seq.kv, seq.tokens, reusable_blocks); !st) finish(seq, FinishReason::kError, st.message());
    seq.result.stats.cached_tokens = seq.kv.n_past;
  }

  // Choice `choice` of the request whose choice 0 is `first`, before anything is computed for it.
  std::unique_ptr<Sequence> make_choice(const Sequence& first, int choice) {
    auto seq = std::make_unique<Sequence>();
    const GenerationRequest& req = *first.request;
    seq->request = first.request;
    seq->choice = choice;
    seq->queued_at = first.queued_at;
    seq->started_at = Clock::now();
    seq->tokens.assign(first.tokens.begin(), first.tokens.begin() + static_cast<std::ptrdiff_t>(first.n_prompt));
    seq->n_prompt = first.n_prompt;
    const SamplingParams sampling = choice_sampling(req.sampling, choice);
    seq->sampler = std::make_unique<Sampler>(sampling);
    if (first.constraint) seq->constraint = first.constraint->restart();
    if (drafter_) {
      seq->drafter = drafter_->start(sampling);
      seq->draft_length = DraftLength(num_draft_tokens_, draft_rests_);
    }
    seq->limit = first.limit;
    seq->result.stats.prompt_tokens = static_cast<int>(seq->n_prompt);
    seq->result.stats.queue_ms = ms_between(seq->queued_at, seq->started_at);
    return seq;
  }

  // Choice 0 of a request with n > 1 has computed its prompt and holds its logits: the other choices
  // start from there. With a free slot and a cache that forks, a choice shares the prompt's pages
  // (KvCache::fork: no position computed again) and samples its first token from a copy of the same
  // logits (sampling changes them). Otherwise it waits for a slot, then takes the prompt's published
  // blocks through reuse_prefix like any request and computes only the rest.
  void spawn_choices(Sequence& first, std::span<const float> logits, Clock::time_point now) {
    first.spawned = true;
    for (int c = 1; c < first.request->n; ++c) {
      auto seq = make_choice(first, c);
      // Its share of the claim choice 0 made for all of them at admission.
      seq->claimed_pages = std::min(first.claimed_pages, claim_pages(*first.request));
      first.claimed_pages -= seq->claimed_pages;
      if (static_cast<int>(active_.size()) >= parallel_ || !rt_->kv().can_fork() || should_stop(first)) {
        waiting_choices_.push_back(std::move(seq));
        continue;
      }
      if (auto st = rt_->kv().fork(first.kv, seq->kv); !st) {  // e.g. no page for the copy: wait
        waiting_choices_.push_back(std::move(seq));
        continue;
      }
      seq->result.stats.cached_tokens = seq->kv.n_past;  // computed once, by choice 0
      seq->decoding = true;
      seq->decode_started_at = now;
      seq->result.stats.prefill_ms = first.result.stats.prefill_ms;
      {
        std::lock_guard lock(mu_);
        ++metrics_.forked_sequences_total;
      }
      choice_row_.assign(logits.begin(), logits.end());
      sample(*seq, choice_row_);
      active_.push_back(std::move(seq));
    }
  }

  bool should_stop(const Sequence& s) const {
    return s.request->cancelled->load() || (s.request->deadline && Clock::now() > *s.request->deadline);
  }

  void finish(Sequence& s, FinishReason reason, std::string error = {}) {
    if (s.finished) return;
    s.finished = true;
    s.result.finish = reason;
    s.result.error = std::move(error);
  }

  // The sequences the engine serves, when every one decodes greedily with nothing else to do (no
  // prompt to prefill, no request waiting): then they decode ahead together (decode_ahead).
  // Sampling that reads the logits on the host (temperature, penalties, logprobs) keeps to step(),
  // and so does speculative decoding while a sequence has guesses (verification reads every guess's
  // logits): a drafter that can say cheaply that it has none (n-gram, when no suffix recurs) leaves
  // the sequence to decode ahead until it has.
  std::vector<Sequence*> greedy_group() {
    std::vector<Sequence*> group;
    if (!decode_ahead_ || !waiting_choices_.empty() || others_waiting()) return group;
    for (auto& sp : active_) {
      Sequence& s = *sp;
      if (s.finished) continue;
      if (!s.decoding || s.tokens.size() != static_cast<std::size_t>(s.kv.n_past) + 1 || should_stop(s) || has_guess(s)) return {};
      const GenerationRequest& req = *s.request;
      const SamplingParams& p = req.sampling;
      const bool greedy = p.temperature <= 0.0f && p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f;
      // A constrained request's mask and a logit bias apply on the host, to logits this path never reads.
      if (!greedy || req.top_logprobs != 0 || s.constraint || !p.logit_bias.empty()) return {};
      group.push_back(&s);
    }
    return group;
  }

  // Whether step() would verify guesses for s now: speculation on at this batch size, and its drafter
  // has (or cannot cheaply rule out) a guess. A constrained request never guesses.
  bool has_guess(const Sequence& s) const {
    if (!drafter_ || !s.drafter || s.constraint || active_count() > spec_max_batch_) return false;
    return !s.draft_length.resting(s.tokens.size()) && s.drafter->may_guess(s.tokens);
  }

  bool others_waiting() {
    std::lock_guard lock(mu_);
    return stopping_ || !queue_.empty();
  }

  // Greedy decoding a token ahead (engine/greedy_ahead.h): while the device runs the step that picks
  // each sequence's token n+1, this thread hands tokens n to the requests. No step is issued once a
  // sequence finishes, is cancelled or reaches its length, or another request arrives; the steps in
  // flight are then taken in — their tokens are real for the sequences still going — and the
  // engine's next step() regroups.
  void decode_ahead(const std::vector<Sequence*>& group) {
    std::vector<SequenceKv*> records;
    std::vector<int32_t> positions, tokens;
    for (Sequence* s : group) {
      records.push_back(&s->kv);
      positions.push_back(s->kv.n_past);
      tokens.push_back(s->tokens.back());
    }
    auto fail = [&](const std::string& why) {
      for (Sequence* s : group) finish(*s, FinishReason::kError, why);
    };
    GreedyAhead ahead(*rt_, std::move(records), std::move(positions));
    auto issued = [&] {
      std::lock_guard lock(mu_);
      metrics_.ahead_steps_total += 1;
      metrics_.ahead_rows_total += group.size();
    };
    if (auto st = ahead.issue(tokens); !st) return fail(st.message());
    issued();
    // With a drafter, what a plain step costs as it runs here (steps queued behind each other: the
    // time between two steps' tokens) — the price speculation must beat (DraftLength's k = 0).
    std::optional<Clock::time_point> last_taken;
    while (ahead.in_flight() > 0) {
      // The next steps while this one runs (GreedyAhead::kStepsAhead queued behind it), where every
      // sequence's token may still be wanted and none has a guess to verify instead.
      while (ahead.in_flight() <= GreedyAhead::kStepsAhead) {
        bool more = waiting_choices_.empty() && !others_waiting();
        for (const Sequence* s : group)
          more = more && !s->finished && !should_stop(*s) && !has_guess(*s) &&
                 s->result.ids.size() + static_cast<std::size_t>(ahead.in_flight()) + 1 <= static_cast<std::size_t>(s->limit);
        if (!more) break;
        if (auto st = ahead.issue_next(); !st) return fail(st.message());
        issued();
      }
      auto ids = ahead.take_all();
      if (!ids) return fail(ids.message());
      if (drafter_) {  // timed only where the device had the next step queued when this one ended
        const auto now = Clock::now();
        if (last_taken) costs_.observe_pass(static_cast<int>(group.size()), ms_between(*last_taken, now));
        last_taken = ahead.in_flight() > 0 ? std::optional<Clock::time_point>(now) : std::nullopt;
      }
      for (std::size_t i = 0; i < group.size(); ++i) {
        Sequence& s = *group[i];
        if (s.finished) continue;  // its steps past the end are dropped
        if (should_stop(s)) {
          finish(s, FinishReason::kCancelled);  // as step() would, before this token
          continue;
        }
        s.kv.n_past += 1;  // its recent pages and state snapshot followed at issue
        rt_->kv().publish(s.kv, s.tokens);
        TokenEvent event;
        event.id = (*ids)[i];
        const std::size_t before = s.result.ids.size();
        accept(s, event);
        s.result.stats.decode_passes += 1;
        s.result.stats.decode_pass_tokens += static_cast<int>(s.result.ids.size() - before);
      }
      publish_metrics();  // as between steps: the pages the sequences hold now
    }
  }

  // One forward pass over every active sequence.
  void step() {
    if (auto group = greedy_group(); !group.empty()) return decode_ahead(group);
    ForwardBatch batch;
    std::vector<Sequence*> in_batch;     // sequences with tokens in this batch
    std::vector<uint32_t> chunk_sizes;
    std::vector<int> logit_index;        // per in_batch entry: its (first) row in logits, or -1
    std::vector<DraftTokens> drafts;     // per in_batch entry: the guesses after its last token
    const std::size_t budget = static_cast<std::size_t>(prefill_size_) + static_cast<std::size_t>(parallel_);
    const bool speculate = drafter_ && active_count() <= spec_max_batch_;
    for (Sequence* sp : step_order()) {
      Sequence& s = *sp;
      if (s.finished) continue;
      if (should_stop(s)) {
        finish(s, FinishReason::kCancelled);
        continue;
      }
      if (waits_for_prefix(s)) continue;
      const std::size_t pending = s.tokens.size() - static_cast<std::size_t>(s.kv.n_past);
      std::size_t chunk = std::min<std::size_t>(pending, static_cast<std::size_t>(prefill_size_));
      if (!s.decoding && rt_->kv().has_state()) chunk = to_snapshot(s, chunk);
      DraftTokens draft;
      if (speculate && s.decoding && pending == 1) {
        if (auto st = propose(s, batch.tokens.size(), budget - std::min(budget, batch.tokens.size() + 1), draft); !st) {
          finish(s, FinishReason::kError, st.message());
          continue;
        }
        chunk += draft.ids.size();
      }
      // A whole chunk or nothing (the first sequence always gets in): chunking stays deterministic.
      if (!batch.tokens.empty() && batch.tokens.size() + chunk > budget) {
        if (!s.decoding) ++s.prefill_skips;
        continue;
      }
      auto reserved = rt_->kv().reserve(s.kv, s.kv.n_past + static_cast<int32_t>(chunk));
      if (!reserved && !draft.ids.empty()) {  // no pages for the guesses: a plain step
        chunk -= draft.ids.size();
        draft = {};
        reserved = rt_->kv().reserve(s.kv, s.kv.n_past + static_cast<int32_t>(chunk));
      }
      if (!reserved) {
        if (batch.tokens.empty() && active_count() == 1) {
          finish(s, FinishReason::kError, reserved.message());
        }
        continue;  // waits for pages other sequences will free
      }
      if (auto st = rt_->kv().update_recent(s.kv.recent, s.kv.first_own, s.kv.n_past, s.kv.n_past + static_cast<int32_t>(chunk)); !st) {
        finish(s, FinishReason::kError, st.message());
        continue;
      }
      const uint32_t slot = static_cast<uint32_t>(in_batch.size());
      const std::size_t first = batch.tokens.size();
      for (std::size_t i = 0; i < chunk; ++i) {
        const std::size_t at = static_cast<std::size_t>(s.kv.n_past) + i;
        batch.tokens.push_back(at < s.tokens.size() ? s.tokens[at] : draft.ids[at - s.tokens.size()]);
        batch.positions.push_back(s.kv.n_past + static_cast<int32_t>(i));
        batch.seq_slots.push_back(static_cast<int32_t>(slot));
      }
      const bool needs_logits = static_cast<std::size_t>(s.kv.n_past) + chunk >= s.tokens.size();
      logit_index.push_back(needs_logits ? static_cast<int>(batch.logit_rows.size()) : -1);
      // Logits at the last token, and at each guess (the target's choice after it).
      if (needs_logits)
        for (std::size_t row = first + chunk - 1 - draft.ids.size(); row < first + chunk; ++row)
          batch.logit_rows.push_back(static_cast<uint32_t>(row));
      in_batch.push_back(&s);
      chunk_sizes.push_back(static_cast<uint32_t>(chunk));
      drafts.push_back(std::move(draft));
    }
    if (in_batch.empty()) return;

    std::vector<const SequenceKv*> records;
    for (auto* s : in_batch) records.push_back(&s->kv);
    rt_->kv().fill_batch(records, batch);
    // Recurrent layers: the state before the guesses, to go back to (take_verified).
    std::vector<int32_t> saved_states(in_batch.size(), -1);
    for (std::size_t i = 0; i < in_batch.size(); ++i) {
      if (drafts[i].ids.empty()) continue;
      auto saved = rt_->kv().save_state(in_batch[i]->kv);
      if (!saved) {
        for (int32_t slot : saved_states) rt_->kv().drop_state(slot);
        for (auto* s : in_batch) finish(*s, FinishReason::kError, saved.message());
        return;
      }
      saved_states[i] = *saved;
    }

    const auto issued = Clock::now();
    if (auto st = rt_->model().forward(batch, rt_->kv().caches(), logits_); !st) {
      for (int32_t slot : saved_states) rt_->kv().drop_state(slot);
      for (auto* s : in_batch) finish(*s, FinishReason::kError, st.message());
      return;
    }
    const auto now = Clock::now();
    // What a decode pass of this many tokens costs (drafting's trade-off; not a prompt's chunk).
    if (drafter_ && std::all_of(in_batch.begin(), in_batch.end(), [](const Sequence* s) { return s->decoding; }))
      costs_.observe_pass(static_cast<int>(batch.tokens.size()), ms_between(issued, now));
    const std::size_t vocab = static_cast<std::size_t>(rt_->config().vocab_size);
    uint64_t prefilled = 0;
    for (std::size_t i = 0; i < in_batch.size(); ++i)
      if (!in_batch[i]->decoding) prefilled += chunk_sizes[i];
    if (prefilled) {
      std::lock_guard lock(mu_);
      metrics_.prefilled_tokens_total += prefilled;
    }
    for (std::size_t i = 0; i < in_batch.size(); ++i) {
      Sequence& s = *in_batch[i];
      if (!drafts[i].ids.empty()) {
        take_verified(s, chunk_sizes[i], drafts[i], logits_.data() + static_cast<std::size_t>(logit_index[i]) * vocab, vocab,
                      saved_states[i]);
        continue;
      }
      s.kv.n_past += static_cast<int32_t>(chunk_sizes[i]);
      if (auto st = rt_->kv().passed(s.kv, s.kv.n_past); !st) {
        finish(s, FinishReason::kError, st.message());
        continue;
      }
      rt_->kv().publish(s.kv, s.tokens);
      if (logit_index[i] < 0) continue;
      const bool was_decoding = s.decoding;
      if (!s.decoding) {
        s.decoding = true;
        s.decode_started_at = now;
        s.result.stats.prefill_ms = ms_between(s.started_at, now);
      }
      const std::size_t before = s.result.ids.size();
      std::span<float> row(logits_.data() + static_cast<std::size_t>(logit_index[i]) * vocab, vocab);
      if (!was_decoding && s.choice == 0 && s.request->n > 1 && !s.spawned) spawn_choices(s, row, now);
      sample(s, row);
      if (was_decoding) {
        s.result.stats.decode_passes += 1;
        s.result.stats.decode_pass_tokens += static_cast<int>(s.result.ids.size() - before);
      }
    }
  }

  // The order a step takes sequences in: decoding ones first (a token each, and their guesses), then
  // prompts by the size of their next chunk, smallest first, so a short request is not held behind a
  // long prompt's chunks (time to first token) — except that a prompt passed over kMaxPrefillSkips
  // steps goes before all of them until its prompt is done, so neither a stream of short prompts nor
  // the decoders' guesses (which take the budget's room) starve it. Ties keep the order of arrival.
  // Chunk boundaries do not depend on it: each prompt is cut from its own start.
  static constexpr int kMaxPrefillSkips = 4;
  std::vector<Sequence*> step_order() const {
    std::vector<Sequence*> order;
    order.reserve(active_.size());
    for (const auto& sp : active_) order.push_back(sp.get());
    const auto rank = [this](const Sequence* s) -> std::pair<int, std::size_t> {
      if (s->decoding) return {1, 0};
      if (s->prefill_skips >= kMaxPrefillSkips) return {0, 0};
      return {2, std::min(s->tokens.size() - static_cast<std::size_t>(s->kv.n_past), static_cast<std::size_t>(prefill_size_))};
    };
    std::stable_sort(order.begin(), order.end(), [&](const Sequence* a, const Sequence* b) { return rank(a) < rank(b); });
    return order;
  }

  // Prompts with a common prefix in the engine at once (a shared system prompt, documents asked
  // about by several users): one computes the common blocks, the others wait for them and then take
  // them from the prefix cache. Without the wait, requests that arrive together each compute the
  // whole prefix: the cache serves only blocks already published. A sequence waits only while it has
  // computed nothing of its own, and only for one before it in active_ that is prefilling those
  // blocks (that one never waits for it), so every wait ends. If the blocks are gone from the cache
  // by the time it looks (evicted under pressure), it computes its prompt itself.
  bool waits_for_prefix(Sequence& s) {
    if (s.decoding || s.own_prefix || s.kv.n_past != s.result.stats.cached_tokens) return false;
    const std::size_t bt = rt_->kv().page_tokens();
    const std::size_t reusable = (s.n_prompt - 1) / bt * bt;  // reuse_prefix leaves one prompt token to compute
    const auto past = static_cast<std::size_t>(s.kv.n_past);
    for (auto& tp : active_) {
      const Sequence& t = *tp;
      if (&t == &s) break;
      if (t.finished) continue;
      // Whole blocks of s's prompt that t's tokens start with, past what s holds already.
      const std::size_t most = std::min(reusable, t.tokens.size() / bt * bt);
      if (most <= past || !std::equal(s.tokens.begin(), s.tokens.begin() + static_cast<std::ptrdiff_t>(past + bt), t.tokens.begin()))
        continue;
      std::size_t common = past + bt;
      while (common + bt <= most && std::equal(s.tokens.begin() + static_cast<std::ptrdiff_t>(common),
                                               s.tokens.begin() + static_cast<std::ptrdiff_t>(common + bt),
                                               t.tokens.begin() + static_cast<std::ptrdiff_t>(common)))
        common += bt;
      if (static_cast<std::size_t>(t.kv.n_past) >= common) {  // published since s looked: take them
        rt_->kv().release(s.kv);
        reuse_prefix(s);
        if (static_cast<std::size_t>(s.kv.n_past) < common) s.own_prefix = true;
        return s.finished;  // an error from the cache ends it (retired after this step)
      }
      if (!t.decoding) return true;  // t computes them in its prompt's next chunks
    }
    return false;
  }

  // A prompt's pass over recurrent layers shortened to end at the first snapshot point inside it: a
  // multiple of snapshot_every_, or the prompt's last whole block (the furthest a later request with
  // this prompt can reuse: one prompt token is always computed). KvCache::passed snapshots there.
  std::size_t to_snapshot(const Sequence& s, std::size_t chunk) const {
    const int64_t from = s.kv.n_past, bt = rt_->kv().page_tokens();
    int64_t end = from + static_cast<int64_t>(chunk);
    if (snapshot_every_ > 0) end = std::min<int64_t>(end, (from / snapshot_every_ + 1) * snapshot_every_);
    const int64_t last_block = (static_cast<int64_t>(s.n_prompt) - 1) / bt * bt;
    if (last_block > from && last_block < end) end = last_block;
    return static_cast<std::size_t>(end - from);
  }

  // A decoding sequence's guesses for this step: at most its adaptive draft length (given the
  // other_tokens already in the batch), the tokens it may still generate after the next one, and
  // `room` (the batch's tokens left).
  Status propose(Sequence& s, std::size_t other_tokens, std::size_t room, DraftTokens& draft) {
    const int left = s.limit - static_cast<int>(s.result.ids.size()) - 1;
    const int n = std::min({s.draft_length.next(costs_, static_cast<int>(other_tokens), s.tokens.size()), left,
                            static_cast<int>(std::min<std::size_t>(room, INT32_MAX))});
    // A constrained request does not guess: its mask would have to judge every guess's row.
    if (n <= 0 || !s.drafter || s.constraint) return {};
    const auto t0 = Clock::now();
    auto d = s.drafter->propose(s.tokens, s.n_prompt, n);
    if (!d) return make_error("speculative decoding: " + d.message());
    draft = std::move(*d);
    costs_.observe_draft(static_cast<int>(draft.ids.size()), ms_between(t0, Clock::now()));
    // At most n guesses, and none past one outside the model's vocabulary (a draft model's logits may
    // be padded wider than the target's): the guesses before it still count.
    const auto vocab = static_cast<int32_t>(rt_->config().vocab_size);
    std::size_t keep = std::min(draft.ids.size(), static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < keep; ++i)
      if (draft.ids[i] < 0 || draft.ids[i] >= vocab) keep = i;
    draft.ids.resize(keep);
    if (draft.q.size() > keep) draft.q.resize(keep);
    return {};
  }

  // The target's verdicts on a sequence's guesses, in order (rows: its logits at the last token, then
  // at each guess): each kept guess is emitted and the next one judged; the first the target
  // disagrees with is replaced by the target's own token; when every guess is kept the last row
  // gives one token more. The KV cache keeps the positions of the tokens emitted and is rolled back
  // past them.
  // saved_state: the recurrent layers' state from before the pass (-1: none), put back and advanced
  // over the kept positions again when a guess was rejected.
  void take_verified(Sequence& s, uint32_t chunk, const DraftTokens& draft, float* rows, std::size_t vocab, int32_t saved_state) {
    const int32_t base = s.kv.n_past;  // the position of the sequence's last token
    const std::size_t k = draft.ids.size();
    const std::size_t before = s.result.ids.size();
    int used = 0, accepted = 0, judged = 0;
    for (std::size_t j = 0; j <= k && !s.finished; ++j) {
      std::span<float> row(rows + j * vocab, vocab);
      ++used;
      if (j == k) {
        sample(s, row);
        break;
      }
      GenerationRequest& req = *s.request;
      apply_logit_bias(row, req.sampling.logit_bias);  // the target's distribution as sample() sees it
      TokenEvent event;
      if (req.top_logprobs > 0) event.top_logprobs = Sampler::top_logprobs(row, req.top_logprobs);
      const DraftVerdict v = verify_draft(*s.sampler, row, s.tokens, s.n_prompt, draft.ids[j], draft.q.empty() ? nullptr : &draft.q[j]);
      ++judged;
      event.id = v.choice.id;
      event.logprob = v.choice.logprob;
      accept(s, event);
      if (!v.accepted) break;
      ++accepted;
    }
    s.draft_length.observe(judged, accepted);
    auto& st = s.result.stats;
    st.draft_tokens += judged;
    st.draft_accepted += accepted;
    st.decode_passes += 1;
    st.decode_pass_tokens += static_cast<int>(s.result.ids.size() - before);
    s.kv.n_past = base + static_cast<int32_t>(chunk);
    if (auto r = rt_->kv().rollback(s.kv, base + used); !r) {
      rt_->kv().drop_state(saved_state);
      return finish(s, FinishReason::kError, r.message());
    }
    if (saved_state >= 0) {
      if (s.finished || used == static_cast<int>(chunk)) {
        rt_->kv().drop_state(saved_state);  // every guess kept (or the sequence is done): the state is right
      } else if (auto r = rt_->kv().restore_state(s.kv, saved_state); !r) {
        return finish(s, FinishReason::kError, r.message());
      } else if (auto again = recompute(s, base, used); !again) {
        return finish(s, FinishReason::kError, again.message());
      }
    }
    if (auto r = rt_->kv().passed(s.kv, s.kv.n_past); !r) return finish(s, FinishReason::kError, r.message());
    rt_->kv().publish(s.kv, s.tokens);
  }

  // Recurrent layers after a rejected guess: the state, put back to before the pass, runs the kept
  // positions [base, base + n) again (their K/V rows are written again with the same values).
  Status recompute(Sequence& s, int32_t base, int n) {
    ForwardBatch batch;
    for (int i = 0; i < n; ++i) {
      batch.tokens.push_back(s.tokens[static_cast<std::size_t>(base + i)]);
      batch.positions.push_back(base + i);
      batch.seq_slots.push_back(0);
    }
    const SequenceKv* one[] = {&s.kv};
    rt_->kv().fill_batch(one, batch);
    std::vector<float> none;
    return rt_->model().forward(batch, rt_->kv().caches(), none);
  }

  void sample(Sequence& s, std::span<float> logits) {
    GenerationRequest& req = *s.request;
    if (s.result.ids.size() >= static_cast<std::size_t>(std::max(0, s.limit))) {
      finish(s, FinishReason::kLength);
      return;
    }
    // The bias first: a mask's -infinity stays so whatever the bias.
    apply_logit_bias(logits, req.sampling.logit_bias);
    if (s.constraint) {
      const int remaining = s.limit - static_cast<int>(s.result.ids.size());
      if (!s.constraint->restrict(logits, remaining)) {
        finish(s, FinishReason::kError, "constrained decoding: no token can continue the output");
        return;
      }
    }
    TokenEvent event;
    if (req.top_logprobs > 0) event.top_logprobs = Sampler::top_logprobs(logits, req.top_logprobs);
    const TokenChoice choice = s.sampler->sample(logits, s.tokens, s.n_prompt);
    event.id = choice.id;
    event.logprob = choice.logprob;
    accept(s, event);
  }

  // A sequence's next token, chosen: the end of the sequence, or one more token for the request.
  void accept(Sequence& s, TokenEvent& event) {
    GenerationRequest& req = *s.request;
    event.choice = s.choice;
    const auto& eos = rt_->config().eos_token_ids;
    // A constrained output ends at its end-of-sequence whatever ignore_eos says: its grammar allowed
    // the token only once the value was complete.
    if ((!req.ignore_eos || s.constraint) && std::find(eos.begin(), eos.end(), event.id) != eos.end()) {
      finish(s, FinishReason::kStop);
      return;
    }
    if (s.constraint)
      if (auto st = s.constraint->accept(event.id); !st) {
        finish(s, FinishReason::kError, "constrained decoding: " + st.message());
        return;
      }
    s.result.ids.push_back(event.id);
    s.tokens.push_back(event.id);
    s.result.stats.completion_tokens = static_cast<int>(s.result.ids.size());
    if (req.on_token && !req.on_token(event)) {
      finish(s, req.cancelled->load() ? FinishReason::kCancelled : FinishReason::kStop);
      return;
    }
    if (s.constraint && s.constraint->must_stop()) finish(s, FinishReason::kStop);
    else if (s.result.ids.size() >= static_cast<std::size_t>(s.limit)) finish(s, FinishReason::kLength);
  }

  // Sequences that finished leave: pages back to the pool, on_done called, slot freed.
  void retire() {
    for (auto it = active_.begin(); it != active_.end();) {
      if (!(*it)->finished) {
        ++it;
        continue;
      }
      std::unique_ptr<Sequence> s = std::move(*it);
      it = active_.erase(it);
      done(*s);
    }
  }

  // A finished sequence's end: its pages back, the metrics counted, on_done called — and, for
  // choice 0 of n that ended before the others started (cancelled, failed), on_done for each of them.
  void done(Sequence& s) {
    const auto now = Clock::now();
    if (s.decoding) s.result.stats.decode_ms = ms_between(s.decode_started_at, now);
    else s.result.stats.prefill_ms = ms_between(s.started_at, now);
    rt_->kv().release(s.kv);
    claimed_pages_ -= s.claimed_pages;
    {
      std::lock_guard lock(mu_);
      ++metrics_.requests_total;
      metrics_.kv_pages_claimed = claimed_pages_;  // before on_done: a caller that sees the result sees the claim gone
      if (s.result.finish == FinishReason::kError) ++metrics_.requests_failed;
      metrics_.prompt_tokens_total += s.result.stats.prompt_tokens;
      metrics_.cached_tokens_total += s.result.stats.cached_tokens;
      metrics_.completion_tokens_total += s.result.stats.completion_tokens;
      metrics_.prefill_seconds_total += s.result.stats.prefill_ms / 1000.0;
      metrics_.decode_seconds_total += s.result.stats.decode_ms / 1000.0;
      metrics_.decode_passes_total += s.result.stats.decode_passes;
      metrics_.decode_pass_tokens_total += s.result.stats.decode_pass_tokens;
      metrics_.draft_tokens_total += s.result.stats.draft_tokens;
      metrics_.draft_accepted_total += s.result.stats.draft_accepted;
    }
    auto req = s.request;
    GenerationResult result = std::move(s.result);
    result.choice = s.choice;
    if (req->on_done) req->on_done(result);
    if (s.choice == 0 && !s.spawned)
      for (int c = 1; c < req->n; ++c) {
        GenerationResult other;
        other.choice = c;
        other.finish = result.finish;
        other.error = result.error;
        other.stats.prompt_tokens = result.stats.prompt_tokens;
        if (req->on_done) req->on_done(other);
      }
  }

  void finish_unstarted(Pending& p, FinishReason reason, bool retry_later = false) {
    for (int c = 0; c < std::max(1, p.request->n); ++c) {
      GenerationResult r;
      r.choice = c;
      r.finish = reason;
      if (retry_later) {
        r.retry_later = true;
        r.error = "no KV cache room within " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(mem_wait_).count()) +
                  " ms: the sequences running claim " + std::to_string(claimed_pages_) + " of " + std::to_string(rt_->kv().n_pages()) +
                  " pages; this request may need " + std::to_string(claim_pages(*p.request) * static_cast<uint32_t>(std::max(1, p.request->n)));
      }
      r.stats.prompt_tokens = static_cast<int>(p.request->prompt_ids.size());
      if (p.request->on_done) p.request->on_done(r);
    }
  }

  int active_count() const {
    return static_cast<int>(std::count_if(active_.begin(), active_.end(), [](const auto& s) { return !s->finished; }));
  }

  void publish_metrics() {
    const PagePool& pool = rt_->kv().pages();
    std::lock_guard lock(mu_);
    metrics_.queue_depth = static_cast<int>(queue_.size());
    metrics_.active_sequences = static_cast<int>(active_.size());
    metrics_.kv_bytes_used = rt_->kv().bytes_in_use();
    metrics_.kv_pages_total = pool.n_pages();
    metrics_.kv_pages_in_use = pool.pages_in_use();
    metrics_.kv_pages_cached = pool.cached_pages();
    metrics_.kv_recent_pages_in_use = rt_->kv().recent_pages_in_use();
    metrics_.kv_pages_claimed = claimed_pages_;
    if (const PagePool* w = rt_->kv().window_pool()) metrics_.kv_window_pages_in_use = w->pages_in_use();
    if (const PagePool* st = rt_->kv().state_pool()) metrics_.kv_state_slots_in_use = st->pages_in_use();
    if (const auto* store = rt_->expert_store()) {  // read here: the store belongs to this thread
      const auto st = store->stats();
      metrics_.expert_store = store->name();
      metrics_.expert_bytes_read = st.bytes_read;
      metrics_.expert_read_requests = st.read_requests;
      metrics_.expert_hits = st.hits;
      metrics_.expert_misses = st.misses;
      metrics_.expert_prefetched = st.prefetched;
      metrics_.expert_cache_bytes = st.cache_bytes;
      metrics_.expert_budget_bytes = st.budget_bytes;
      metrics_.expert_read_seconds = st.read_seconds;
      metrics_.expert_read_p50_us = st.read_p50_us;
      metrics_.expert_read_p99_us = st.read_p99_us;
    }
  }

  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<Drafter> drafter_;  // speculative decoding (null: off); outlives the sequences' drafters
  const int queue_limit_;
  const int parallel_;
  const int prefill_size_;
  const int snapshot_every_;  // EngineOptions::state_snapshot_tokens in whole KV pages
  const bool decode_ahead_;  // the backend and model decode greedily a token ahead (GreedyAhead::available)
  const int num_draft_tokens_;
  const int spec_max_batch_;
  const bool draft_rests_;
  const Clock::duration mem_wait_;  // --mem-wait: the longest a request waits for KV pages
  uint32_t claimed_pages_ = 0;      // the active sequences' claims (engine thread only)
  PassCosts costs_;  // decode passes and guesses timed, for the draft length
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  std::vector<Pending> waiting_cancel_;
  std::vector<Pending> expired_;  // waited for pages past --mem-wait (engine thread only)
  std::vector<std::unique_ptr<Sequence>> active_;  // engine thread only
  std::deque<std::unique_ptr<Sequence>> waiting_choices_;  // choices of started requests waiting for a slot (engine thread)
  std::vector<float> choice_row_;  // a forked choice's copy of the prompt's logits
  std::vector<float> logits_;
  bool stopping_ = false;
  EngineMetrics metrics_;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineOptions& options) {
  if (!options.draft.empty() && options.draft != "ngram")
    return make_error("--draft must be ngram (or give a draft model with --draft-model DIR), not \"" + options.draft + "\"");
  if (!options.draft.empty() && !options.draft_model.empty())
    return make_error("--draft ngram and --draft-model are two kinds of drafting: give one");
  if (options.num_draft_tokens < 1) return make_error("--num-draft-tokens must be at least 1");
  if (options.spec_max_batch < 1) return make_error("--spec-max-batch must be at least 1");
  auto rt = Runtime::open(options);
  if (!rt) return rt.error();
  std::unique_ptr<Drafter> drafter;
  if (!options.draft.empty() || !options.draft_model.empty()) {
    if (options.draft == "ngram") {
      drafter = make_ngram_drafter();
    } else {
      auto d = open_draft_model(options, **rt);
      if (!d) return d.error();
      drafter = std::move(*d);
    }
  }
  // The draft model's weights and KV cache come out of --mem-limit too: the target's pool shrinks.
  if (drafter && drafter->memory_bytes() > 0)
    if (auto st = (*rt)->make_room(drafter->memory_bytes()); !st) return make_error("with --draft-model: " + st.message());
  return std::unique_ptr<Engine>(new EngineImpl(std::move(*rt), std::move(drafter), options));
}

}  // namespace sluice
