// The engine thread: continuous batching over up to --parallel sequences.
//
// Each step fills one batch from every active sequence — one token for each decoding sequence, a
// chunk of prompt for each prefilling one (whole chunks of --prefill-size, so a prompt is cut the
// same way whether it runs alone or beside others) — and runs one forward pass. New requests join
// between steps (reusing any cached prefix of their prompt), finished ones leave and free their
// pages at once. Results stream back through each request's callbacks on this thread.
#include "engine/engine.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

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

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::unique_ptr<Runtime> rt, const EngineOptions& options)
      : rt_(std::move(rt)), queue_limit_(options.queue_size), parallel_(std::max(1, options.parallel)),
        prefill_size_(std::max(1, options.prefill_size)), decode_ahead_(GreedyAhead::available(*rt_)) {
    metrics_.weight_bytes = rt_->model().weight_bytes();
    metrics_.kv_bytes_capacity = rt_->kv().capacity_bytes();
    metrics_.kv_bytes_per_token = rt_->kv().bytes_per_token();
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
    std::lock_guard lock(mu_);
    if (stopping_) return make_error("the engine is shutting down");
    if (static_cast<int>(queue_.size()) >= queue_limit_) return make_error("queue full");
    queue_.push_back({std::move(req), Clock::now()});
    metrics_.queue_depth = static_cast<int>(queue_.size());
    cv_.notify_one();
    return {};
  }

  GenerationResult generate(GenerationRequest request) override {
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
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !active_.empty(); });
        if (stopping_) {
          for (auto& p : queue_) waiting_cancel_.push_back(std::move(p));
          queue_.clear();
        }
      }
      // Requests refused while shutting down end as cancelled, outside the lock.
      for (auto& p : waiting_cancel_) finish_unstarted(p, FinishReason::kCancelled);
      waiting_cancel_.clear();
      if (stopping_ && active_.empty()) return;
      if (stopping_)
        for (auto& s : active_) s->request->cancelled->store(true);
      admit();
      publish_metrics();
      step();
      retire();
      publish_metrics();
    }
  }

  // Moves queued requests into free slots, reusing cached prefixes of their prompts.
  void admit() {
    while (static_cast<int>(active_.size()) < parallel_) {
      Pending next;
      {
        std::lock_guard lock(mu_);
        if (queue_.empty() || stopping_) return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      auto seq = std::make_unique<Sequence>();
      seq->request = next.request;
      seq->queued_at = next.queued_at;
      seq->started_at = Clock::now();
      seq->tokens = next.request->prompt_ids;
      seq->n_prompt = seq->tokens.size();
      seq->sampler = std::make_unique<Sampler>(next.request->sampling);
      seq->limit = std::min(next.request->max_tokens, rt_->context_size() - static_cast<int>(seq->n_prompt));
      seq->result.stats.prompt_tokens = static_cast<int>(seq->n_prompt);
      seq->result.stats.queue_ms = ms_between(next.queued_at, seq->started_at);
      reuse_prefix(*seq);
      active_.push_back(std::move(seq));
    }
  }

  // Takes the longest run of the prompt's full blocks that the prefix cache holds (for every kind
  // of layer: KvCache::reuse_prefix). At least one prompt token is always left to compute: its
  // logits start the generation.
  void reuse_prefix(Sequence& seq) {
    const std::size_t reusable_blocks = (seq.n_prompt - 1) / rt_->kv().page_tokens();
    if (auto st = rt_->kv().reuse_prefix(seq.kv, seq.tokens, reusable_blocks); !st) finish(seq, FinishReason::kError, st.message());
    seq.result.stats.cached_tokens = seq.kv.n_past;
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

  // The one sequence the engine serves, when it decodes greedily with nothing else to do: then it
  // decodes a token ahead (decode_ahead). Sampling that reads the logits on the host (temperature,
  // penalties, logprobs) keeps to step().
  Sequence* lone_greedy() {
    if (!decode_ahead_ || others_waiting()) return nullptr;
    Sequence* lone = nullptr;
    for (auto& sp : active_) {
      if (sp->finished) continue;
      if (lone) return nullptr;
      lone = sp.get();
    }
    if (!lone || !lone->decoding || lone->tokens.size() != static_cast<std::size_t>(lone->kv.n_past) + 1 || should_stop(*lone))
      return nullptr;
    const GenerationRequest& req = *lone->request;
    const SamplingParams& p = req.sampling;
    const bool greedy = p.temperature <= 0.0f && p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f;
    return greedy && req.top_logprobs == 0 && !req.constraint ? lone : nullptr;
  }

  bool others_waiting() {
    std::lock_guard lock(mu_);
    return stopping_ || !queue_.empty();
  }

  // Greedy decoding a token ahead (engine/greedy_ahead.h): while the device runs the step that picks
  // token n+1, this thread hands token n to the request. Returns when the sequence finishes, is
  // cancelled, or another request arrives (after the steps in flight are taken in).
  void decode_ahead(Sequence& s) {
    GreedyAhead ahead(*rt_, s.kv, s.kv.n_past);
    if (auto st = ahead.issue(s.tokens.back()); !st) return finish(s, FinishReason::kError, st.message());
    while (ahead.in_flight() > 0) {
      // The next step while this one runs, where its token may still be wanted.
      const bool more = !should_stop(s) && !others_waiting() &&
                        s.result.ids.size() + static_cast<std::size_t>(ahead.in_flight()) + 1 <= static_cast<std::size_t>(s.limit);
      if (more)
        if (auto st = ahead.issue_next(); !st) return finish(s, FinishReason::kError, st.message());
      auto token = ahead.take();
      if (!token) return finish(s, FinishReason::kError, token.message());
      if (should_stop(s)) return finish(s, FinishReason::kCancelled);  // as step() would, before this token
      s.kv.n_past += 1;  // its recent pages and state snapshot followed at issue
      rt_->kv().publish(s.kv, s.tokens);
      TokenEvent event;
      event.id = *token;
      accept(s, event);
      if (s.finished) return;  // ahead drops the step issued past the end
      publish_metrics();  // as between steps: the pages this sequence holds now
    }
  }

  // One forward pass over every active sequence.
  void step() {
    if (Sequence* lone = lone_greedy()) return decode_ahead(*lone);
    ForwardBatch batch;
    std::vector<Sequence*> in_batch;     // sequences with tokens in this batch
    std::vector<uint32_t> chunk_sizes;
    std::vector<int> logit_index;        // per in_batch entry: its row in logits, or -1
    const std::size_t budget = static_cast<std::size_t>(prefill_size_) + static_cast<std::size_t>(parallel_);
    for (auto& sp : active_) {
      Sequence& s = *sp;
      if (s.finished) continue;
      if (should_stop(s)) {
        finish(s, FinishReason::kCancelled);
        continue;
      }
      const std::size_t pending = s.tokens.size() - static_cast<std::size_t>(s.kv.n_past);
      const std::size_t chunk = std::min<std::size_t>(pending, static_cast<std::size_t>(prefill_size_));
      // A whole chunk or nothing (the first sequence always gets in): chunking stays deterministic.
      if (!batch.tokens.empty() && batch.tokens.size() + chunk > budget) continue;
      if (auto st = rt_->kv().reserve(s.kv, s.kv.n_past + static_cast<int32_t>(chunk)); !st) {
        if (batch.tokens.empty() && active_count() == 1) {
          finish(s, FinishReason::kError, st.message());
        }
        continue;  // waits for pages other sequences will free
      }
      if (auto st = rt_->kv().update_recent(s.kv.recent, s.kv.first_own, s.kv.n_past, s.kv.n_past + static_cast<int32_t>(chunk)); !st) {
        finish(s, FinishReason::kError, st.message());
        continue;
      }
      const uint32_t slot = static_cast<uint32_t>(in_batch.size());
      for (std::size_t i = 0; i < chunk; ++i) {
        batch.tokens.push_back(s.tokens[static_cast<std::size_t>(s.kv.n_past) + i]);
        batch.positions.push_back(s.kv.n_past + static_cast<int32_t>(i));
        batch.seq_slots.push_back(static_cast<int32_t>(slot));
      }
      const bool needs_logits = static_cast<std::size_t>(s.kv.n_past) + chunk == s.tokens.size();
      logit_index.push_back(needs_logits ? static_cast<int>(batch.logit_rows.size()) : -1);
      if (needs_logits) batch.logit_rows.push_back(static_cast<uint32_t>(batch.tokens.size() - 1));
      in_batch.push_back(&s);
      chunk_sizes.push_back(static_cast<uint32_t>(chunk));
    }
    if (in_batch.empty()) return;

    std::vector<const SequenceKv*> records;
    for (auto* s : in_batch) records.push_back(&s->kv);
    rt_->kv().fill_batch(records, batch);

    if (auto st = rt_->model().forward(batch, rt_->kv().caches(), logits_); !st) {
      for (auto* s : in_batch) finish(*s, FinishReason::kError, st.message());
      return;
    }
    const auto now = Clock::now();
    const std::size_t vocab = static_cast<std::size_t>(rt_->config().vocab_size);
    for (std::size_t i = 0; i < in_batch.size(); ++i) {
      Sequence& s = *in_batch[i];
      s.kv.n_past += static_cast<int32_t>(chunk_sizes[i]);
      if (auto st = rt_->kv().passed(s.kv, s.kv.n_past); !st) {
        finish(s, FinishReason::kError, st.message());
        continue;
      }
      rt_->kv().publish(s.kv, s.tokens);
      if (logit_index[i] < 0) continue;
      if (!s.decoding) {
        s.decoding = true;
        s.decode_started_at = now;
        s.result.stats.prefill_ms = ms_between(s.started_at, now);
      }
      sample(s, std::span<float>(logits_.data() + static_cast<std::size_t>(logit_index[i]) * vocab, vocab));
    }
  }

  void sample(Sequence& s, std::span<float> logits) {
    GenerationRequest& req = *s.request;
    if (s.result.ids.size() >= static_cast<std::size_t>(std::max(0, s.limit))) {
      finish(s, FinishReason::kLength);
      return;
    }
    if (req.constraint) {
      const int remaining = s.limit - static_cast<int>(s.result.ids.size());
      if (!req.constraint->restrict(logits, remaining)) {
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
  void accept(Sequence& s, const TokenEvent& event) {
    GenerationRequest& req = *s.request;
    const auto& eos = rt_->config().eos_token_ids;
    // A constrained output ends at its end-of-sequence whatever ignore_eos says: its grammar allowed
    // the token only once the value was complete.
    if ((!req.ignore_eos || req.constraint) && std::find(eos.begin(), eos.end(), event.id) != eos.end()) {
      finish(s, FinishReason::kStop);
      return;
    }
    if (req.constraint)
      if (auto st = req.constraint->accept(event.id); !st) {
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
    if (req.constraint && req.constraint->must_stop()) finish(s, FinishReason::kStop);
    else if (s.result.ids.size() >= static_cast<std::size_t>(s.limit)) finish(s, FinishReason::kLength);
  }

  // Sequences that finished leave: pages back to the pool, on_done called, slot freed.
  void retire() {
    for (auto it = active_.begin(); it != active_.end();) {
      Sequence& s = **it;
      if (!s.finished) {
        ++it;
        continue;
      }
      const auto now = Clock::now();
      if (s.decoding) s.result.stats.decode_ms = ms_between(s.decode_started_at, now);
      else s.result.stats.prefill_ms = ms_between(s.started_at, now);
      rt_->kv().release(s.kv);
      {
        std::lock_guard lock(mu_);
        ++metrics_.requests_total;
        if (s.result.finish == FinishReason::kError) ++metrics_.requests_failed;
        metrics_.prompt_tokens_total += s.result.stats.prompt_tokens;
        metrics_.cached_tokens_total += s.result.stats.cached_tokens;
        metrics_.completion_tokens_total += s.result.stats.completion_tokens;
        metrics_.prefill_seconds_total += s.result.stats.prefill_ms / 1000.0;
        metrics_.decode_seconds_total += s.result.stats.decode_ms / 1000.0;
      }
      auto req = s.request;
      GenerationResult result = std::move(s.result);
      it = active_.erase(it);
      if (req->on_done) req->on_done(result);
    }
  }

  void finish_unstarted(Pending& p, FinishReason reason) {
    GenerationResult r;
    r.finish = reason;
    r.stats.prompt_tokens = static_cast<int>(p.request->prompt_ids.size());
    if (p.request->on_done) p.request->on_done(r);
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
  const int queue_limit_;
  const int parallel_;
  const int prefill_size_;
  const bool decode_ahead_;  // the backend and model decode greedily a token ahead (GreedyAhead::available)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  std::vector<Pending> waiting_cancel_;
  std::vector<std::unique_ptr<Sequence>> active_;  // engine thread only
  std::vector<float> logits_;
  bool stopping_ = false;
  EngineMetrics metrics_;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineOptions& options) {
  auto rt = Runtime::open(options);
  if (!rt) return rt.error();
  return std::unique_ptr<Engine>(new EngineImpl(std::move(*rt), options));
}

}  // namespace sluice
