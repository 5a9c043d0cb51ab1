// The engine thread: takes requests from a bounded queue and runs them on the runtime, streaming
// tokens back through each request's callbacks.
#include "engine/engine.h"

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "engine/runtime.h"

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
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::unique_ptr<Runtime> rt, int queue_size) : rt_(std::move(rt)), queue_limit_(queue_size) {
    metrics_.weight_bytes = rt_->model().weight_bytes();
    metrics_.kv_bytes_capacity = rt_->kv().capacity_bytes();
    metrics_.kv_bytes_per_token = rt_->kv().bytes_per_token();
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
    queue_.push_back(Pending{std::move(req), Clock::now()});
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
      if (stopping_) {
        if (!thread_.joinable()) return;
      }
      stopping_ = true;
      for (auto& p : queue_) p.request->cancelled->store(true);
      if (current_) current_->cancelled->store(true);
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  const Tokenizer& tokenizer() const override { return rt_->tokenizer(); }
  const ModelConfig& model_config() const override { return rt_->config(); }
  std::string model_name() const override { return rt_->model_name(); }
  std::string backend_name() const override { return rt_->backend().description(); }
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
      Pending next;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping with nothing left
        next = std::move(queue_.front());
        queue_.pop_front();
        current_ = next.request;
        metrics_.queue_depth = static_cast<int>(queue_.size());
        metrics_.active_sequences = 1;
      }
      GenerationResult result = run(*next.request, next.queued_at);
      {
        std::lock_guard lock(mu_);
        current_.reset();
        metrics_.active_sequences = 0;
        ++metrics_.requests_total;
        if (result.finish == FinishReason::kError) ++metrics_.requests_failed;
        metrics_.prompt_tokens_total += result.stats.prompt_tokens;
        metrics_.completion_tokens_total += result.stats.completion_tokens;
        metrics_.prefill_seconds_total += result.stats.prefill_ms / 1000.0;
        metrics_.decode_seconds_total += result.stats.decode_ms / 1000.0;
      }
      if (next.request->on_done) next.request->on_done(result);
    }
  }

  bool should_stop(const GenerationRequest& req) const {
    return req.cancelled->load() || (req.deadline && Clock::now() > *req.deadline);
  }

  GenerationResult run(GenerationRequest& req, Clock::time_point queued_at) {
    GenerationResult result;
    result.stats.prompt_tokens = static_cast<int>(req.prompt_ids.size());
    result.stats.queue_ms = ms_since(queued_at);
    if (should_stop(req)) {
      result.finish = FinishReason::kCancelled;
      return result;
    }
    SequenceState seq;
    struct Release {
      Runtime& rt;
      SequenceState& seq;
      ~Release() { rt.release(seq); }
    } release{*rt_, seq};
    {
      std::lock_guard lock(mu_);
      metrics_.kv_bytes_used = static_cast<uint64_t>(rt_->kv().bytes_per_token() * req.prompt_ids.size());
    }

    std::vector<float> logits;
    auto t0 = Clock::now();
    if (auto s = rt_->run(seq, req.prompt_ids, false, logits); !s) {
      result.finish = FinishReason::kError;
      result.error = s.message();
      return result;
    }
    result.stats.prefill_ms = ms_since(t0);

    const int room = rt_->context_size() - static_cast<int>(req.prompt_ids.size());
    const int limit = std::min(req.max_tokens, room);
    Sampler sampler(req.sampling);
    std::vector<int32_t> history = req.prompt_ids;
    const auto& eos = rt_->config().eos_token_ids;
    auto t1 = Clock::now();
    result.finish = FinishReason::kLength;
    for (int produced = 0; produced < limit; ++produced) {
      if (should_stop(req)) {
        result.finish = FinishReason::kCancelled;
        break;
      }
      TokenEvent event;
      if (req.top_logprobs > 0) event.top_logprobs = Sampler::top_logprobs(logits, req.top_logprobs);
      const TokenChoice choice = sampler.sample(logits, history, req.prompt_ids.size());
      event.id = choice.id;
      event.logprob = choice.logprob;
      if (!req.ignore_eos && std::find(eos.begin(), eos.end(), choice.id) != eos.end()) {
        result.finish = FinishReason::kStop;
        break;
      }
      result.ids.push_back(choice.id);
      history.push_back(choice.id);
      result.stats.completion_tokens = static_cast<int>(result.ids.size());
      if (req.on_token && !req.on_token(event)) {
        result.finish = req.cancelled->load() ? FinishReason::kCancelled : FinishReason::kStop;
        break;
      }
      if (produced + 1 == limit) break;  // no forward pass for a token nobody will read
      const int32_t token = choice.id;
      if (auto s = rt_->run(seq, std::span<const int32_t>(&token, 1), false, logits); !s) {
        result.finish = FinishReason::kError;
        result.error = s.message();
        break;
      }
    }
    result.stats.decode_ms = ms_since(t1);
    return result;
  }

  std::unique_ptr<Runtime> rt_;
  const int queue_limit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  std::shared_ptr<GenerationRequest> current_;
  bool stopping_ = false;
  EngineMetrics metrics_;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineOptions& options) {
  auto rt = Runtime::open(options);
  if (!rt) return rt.error();
  return std::unique_ptr<Engine>(new EngineImpl(std::move(*rt), options.queue_size));
}

}  // namespace sluice
