#pragma once
// What every handler may use: the engine, the options, the chat template, the counters.
#include <atomic>
#include <chrono>
#include <functional>

#include "engine/engine.h"
#include "server/chat_prompt.h"
#include "server/download_jobs.h"
#include "server/grammar_cache.h"
#include "server/http_policy.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/request_parser.h"
#include "server/response_store.h"

namespace sluice::server {

class WorkPool;

struct ServerContext {
  ServerContext(Engine& e, const ServerOptions& o, ChatPrompt c)
      : engine(e), options(o), chat(std::move(c)), cors(o.cors_origin), grammars(e.tokenizer(), e.eos_ids()) {
    defaults.sampling = default_sampling(o);
    defaults.max_tokens = o.max_tokens;
    info.model = o.alias.empty() ? e.model_name() : o.alias;
    info.backend = e.backend_name();
    // What the engine runs, after --turbo-kv and --stream-experts are resolved.
    const EngineOptions resolved = to_engine_options(o);
    info.kv_codec = resolved.kv_codec;
    info.expert_store = resolved.expert_store;
    info.version = "0.1.0";
  }

  Engine& engine;
  const ServerOptions& options;
  ChatPrompt chat;
  CorsPolicy cors;
  RequestDefaults defaults;
  ServerInfo info;
  ServerCounters counters;
  DownloadJobs downloads;         // hub downloads started through the web app
  GrammarCache grammars;  // structured outputs' compiled grammars
  ResponseStore responses;  // finished Responses API answers, for previous_response_id
  WorkPool* work_pool = nullptr;  // where body-parsing routes run; null → inline (the server sets it)
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  // Draining (SIGTERM, POST /admin/drain): /health answers 503 and new generations are refused while
  // the ones in flight finish; then the server stops. request_drain starts it (set by the Server).
  std::atomic<bool> draining{false};
  std::function<void()> request_drain;
};

}  // namespace sluice::server
