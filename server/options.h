#pragma once
// `sluice serve` options: the same names on the command line and in a config file (`--config FILE`,
// `name = value` lines); the command line wins. Parsed with Boost.Program_options.
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "util/result.h"

namespace sluice::server {

struct ServerOptions {
  std::string config_file;
  std::string model;           // a folder or a hub id org/name[@revision] (resolved before the engine loads)
  std::string alias;           // the model's id in the API (default: org/name of a hub model, else the folder's name)
  std::string replica_name;  // --replica-name: this replica in X-Sluice-Replica (default host name:port)
  std::string host = "127.0.0.1";
  int port = 5413;
  std::string backend = "auto";
  std::string kv_codec = "f16";
  int kv_recent = -1;          // recent window kept exact, tokens (-1 auto, 0 off)
  std::string expert_store = "resident";
  std::string plugin_dir;
  int threads = 0;
  int max_tokens = 2048;       // default and ceiling of a request's max_tokens
  int ctx_size = 0;
  int prefill_size = 512;
  std::string decode_ahead = "auto";  // greedy decoding a token ahead: auto | on | off (EngineOptions::decode_ahead)
  float temp = 0.6f;
  float top_p = 1.0f;
  int top_k = 0;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  int parallel = 1;
  int queue_size = 64;
  std::string api_key;
  std::string cors_origin;
  std::string mem_limit;       // --mem-limit SIZE (engine/memory_budget.h: parse_mem_limit); "" none
  int mem_wait_s = 30;         // how long a request waits for KV pages under the limit before 503
  int ssd_prefetch = 0;        // SwiftLM's --ssd-prefetch: expert reads the streaming store keeps in flight (0: its default)
  std::string gpu_layers;      // "" every layer on --backend, N, or auto (EngineOptions::gpu_layers)
  std::string devices;         // offload devices, e.g. opencl:0:0,opencl:0:1 (EngineOptions::devices)
  std::string backend_options; // the offload backend's options (EngineOptions::backend_options)
  bool stream_experts = false; // the uring expert store with a derived budget
  int expert_cache_mb = 0;
  bool turbo_kv = false;       // later issue
  // Speculative decoding (EngineOptions::draft, draft_model, num_draft_tokens, spec_max_batch).
  std::string draft;           // "" | ngram
  std::string draft_model;     // a folder or hub id with the model's tokenizer
  int num_draft_tokens = 8;
  int spec_max_batch = 2;
  // SwiftLM flags for features Sluice does not have: accepted by the parser so that
  // check_available can refuse them by name.
  bool dflash = false, vision = false, audio = false;
  std::string thinking = "auto";  // enable_thinking default: auto (the template's own) | on | off
  bool info = false;
  bool calibrate = false;      // measure this machine with this model, write the plan file, exit
  std::string log_level = "info";
  // HTTP limits.
  std::size_t body_limit = 16u << 20;
  int read_timeout_s = 30;      // a request's header and body
  int idle_timeout_s = 60;      // keep-alive connection waiting for the next request
  int write_timeout_s = 30;     // one write to a client that does not read
  int http_threads = 2;
  int work_threads = 2;         // request preparation (JSON, templates, tokenizing) off the I/O threads
  int work_queue = 64;          // requests waiting for a work thread before 503
  int shutdown_grace_s = 5;
};

struct ParsedOptions {
  ServerOptions options;
  bool help = false;
  std::string help_text;
  std::vector<std::string> warnings;  // accepted options whose feature is not available yet
  std::set<std::string> given;        // options set on the command line or in --config (not defaults)
};

// Parses arguments (after `serve`) and the config file they name. An error is a usage error (exit 2).
Result<ParsedOptions> parse_server_options(const std::vector<std::string>& args);

// Options whose feature is not built yet and that would change what the server does: refuse to start.
// (Options that only tune, e.g. --turbo-kv, produce warnings in ParsedOptions instead.)
Status check_available(const ServerOptions& options);

EngineOptions to_engine_options(const ServerOptions& options);
SamplingParams default_sampling(const ServerOptions& options);
// --thinking as the chat templates' enable_thinking default: nullopt leaves it to the template.
std::optional<bool> default_thinking(const ServerOptions& options);

}  // namespace sluice::server
