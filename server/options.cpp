#include "server/options.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "engine/layer_split.h"
#include "engine/memory_budget.h"
#include "server/memory_plan.h"
#include "turbo/recommended.h"

#include <boost/program_options.hpp>

namespace po = boost::program_options;

namespace sluice::server {
namespace {

po::options_description describe(ServerOptions& o) {
  po::options_description desc("sluice serve options (also accepted as `name = value` lines in --config FILE)");
  // clang-format off
  desc.add_options()
    ("help,h", "print this help and exit")
    ("config", po::value(&o.config_file), "read options from FILE; the command line wins")
    ("model,m", po::value(&o.model),
     "model folder (config.json, safetensors, tokenizer.json), or a Hugging Face Hub id org/name[@revision] "
     "found in the hub cache or downloaded into it; required")
    ("replica-name", po::value(&o.replica_name), "this replica's name in the X-Sluice-Replica header of completion answers (default: host name:port)")
    ("alias", po::value(&o.alias), "the model's id in the API (default: org/name for a hub model, else the folder's name)")
    ("host", po::value(&o.host)->default_value(o.host), "address to listen on")
    ("port", po::value(&o.port)->default_value(o.port), "port to listen on (0 = any free port)")
    ("backend", po::value(&o.backend)->default_value(o.backend), "auto | cpu | opencl[:P:D]")
    ("kv-codec", po::value(&o.kv_codec)->default_value(o.kv_codec), "KV cache codec: f32 | f16 | plugin | k=A,v=B")
    ("kv-recent", po::value(&o.kv_recent)->default_value(o.kv_recent),
     "newest keys attended exactly (f16 copies) with a compressing codec: tokens, 0 off, -1 auto (16)")
    ("expert-store", po::value(&o.expert_store)->default_value(o.expert_store), "where MoE experts live")
    ("plugin-dir", po::value(&o.plugin_dir), "folder searched for plugins (default: next to the executable)")
    ("threads", po::value(&o.threads)->default_value(o.threads), "compute threads (0 = all cores)")
    ("max-tokens", po::value(&o.max_tokens)->default_value(o.max_tokens), "default and ceiling of a request's max_tokens")
    ("ctx-size", po::value(&o.ctx_size)->default_value(o.ctx_size), "context size in tokens (0 = the model's)")
    ("prefill-size", po::value(&o.prefill_size)->default_value(o.prefill_size), "prompt tokens per forward pass")
    ("decode-ahead", po::value(&o.decode_ahead)->default_value(o.decode_ahead),
     "greedy requests decode a token ahead, the choice kept on the device: auto (where the backend queues its ops) | on | off")
    ("temp", po::value(&o.temp)->default_value(o.temp), "default temperature")
    ("top-p", po::value(&o.top_p)->default_value(o.top_p), "default top-p")
    ("top-k", po::value(&o.top_k)->default_value(o.top_k), "default top-k (0 = off)")
    ("min-p", po::value(&o.min_p)->default_value(o.min_p), "default min-p (0 = off)")
    ("repeat-penalty", po::value(&o.repeat_penalty)->default_value(o.repeat_penalty), "default repetition penalty")
    ("parallel", po::value(&o.parallel)->default_value(o.parallel), "sequences generated at once")
    ("queue-size", po::value(&o.queue_size)->default_value(o.queue_size), "waiting requests before 503")
    ("api-key", po::value(&o.api_key), "require `Authorization: Bearer KEY` (not on /health, /metrics)")
    ("cors", po::value(&o.cors_origin), "allow cross-origin requests from ORIGIN (* for any)")
    ("mem-limit", po::value(&o.mem_limit),
     "plan everything under SIZE: 24G, 512M, 1000000B (units are powers of 1024; a bare number is MiB); "
     "the KV pool gets what weights and the rest leave, requests wait for pages (then 503)")
    ("mem-wait", po::value(&o.mem_wait_s)->default_value(o.mem_wait_s),
     "seconds a request waits for KV pages under --mem-limit before it is answered 503")
    ("ssd-prefetch", po::value(&o.ssd_prefetch)->default_value(o.ssd_prefetch),
     "expert reads the streaming store (--stream-experts, --expert-store uring) keeps in flight: its queue depth (0 = 64)")
    ("gpu-layers", po::value(&o.gpu_layers),
     "the first N layers on the GPU/OpenCL backend (--backend or --devices), the rest on the CPU; auto: as many as fit")
    ("devices", po::value(&o.devices), "several offload devices, e.g. opencl:0:0,opencl:0:1: layers split evenly between them")
    ("backend-options", po::value(&o.backend_options),
     "options of the --backend/--devices backend, e.g. OpenCL's \"tune.att_wg=128 tuning=FILE\" (docs/GUIDE.md)")
    ("stream-experts", po::bool_switch(&o.stream_experts),
     "stream MoE experts from the model files (the uring store, budget from free memory or --mem-limit)")
    ("expert-cache-mb", po::value(&o.expert_cache_mb)->default_value(o.expert_cache_mb), "expert cache budget of a streaming store, MiB (0 = derived)")
    ("turbo-kv", po::bool_switch(&o.turbo_kv), "the recommended compressed KV cache (TurboQuant K/V pair)")
    ("draft", po::value(&o.draft), "speculative decoding with guesses from the sequence itself: ngram (prompt lookup)")
    ("draft-model", po::value(&o.draft_model),
     "speculative decoding with guesses from a small model with the same tokenizer (folder or hub id)")
    ("num-draft-tokens", po::value(&o.num_draft_tokens)->default_value(o.num_draft_tokens),
     "the most guesses one pass verifies (the draft length adapts below it to the acceptance rate)")
    ("spec-max-batch", po::value(&o.spec_max_batch)->default_value(o.spec_max_batch),
     "speculate only while at most this many sequences decode together")
    ("dflash", po::bool_switch(&o.dflash), "SwiftLM's block-diffusion drafting: not available in Sluice (refused)")
    ("vision", po::bool_switch(&o.vision), "SwiftLM's image input: not available in Sluice (refused)")
    ("audio", po::bool_switch(&o.audio), "SwiftLM's audio input: not available in Sluice (refused)")
    ("thinking", po::value(&o.thinking)->default_value(o.thinking)->implicit_value("on"),
     "enable_thinking for chat templates when a request does not set it: auto (the template's default) | on | off")
    ("info", po::bool_switch(&o.info), "print the memory plan and exit")
    ("calibrate", po::bool_switch(&o.calibrate),
     "measure this machine with this model (memory and disk read rates, prefill and decode rates) and write a plan "
     "that later starts use for --parallel, --prefill-size and the expert budget when not given; then exit")
    ("log-level", po::value(&o.log_level)->default_value(o.log_level), "trace | debug | info | warn | error | off")
    ("body-limit", po::value(&o.body_limit)->default_value(o.body_limit), "largest request body in bytes (413 above)")
    ("read-timeout", po::value(&o.read_timeout_s)->default_value(o.read_timeout_s), "seconds to read one request")
    ("idle-timeout", po::value(&o.idle_timeout_s)->default_value(o.idle_timeout_s), "seconds a keep-alive connection may idle")
    ("write-timeout", po::value(&o.write_timeout_s)->default_value(o.write_timeout_s), "seconds one write may take")
    ("http-threads", po::value(&o.http_threads)->default_value(o.http_threads), "threads serving HTTP")
    ("work-threads", po::value(&o.work_threads)->default_value(o.work_threads), "threads preparing requests (JSON, templates, tokenizing)")
    ("work-queue", po::value(&o.work_queue)->default_value(o.work_queue), "requests waiting for a work thread before 503")
    ("shutdown-grace", po::value(&o.shutdown_grace_s)->default_value(o.shutdown_grace_s), "seconds to wait for in-flight requests on SIGTERM");
  // clang-format on
  return desc;
}

// on/off, and the true/false a config file written for the old switch says.
bool thinking_on(const std::string& value) { return value == "on" || value == "true" || value == "1"; }
bool thinking_off(const std::string& value) { return value == "off" || value == "false" || value == "0"; }

Status validate(const ServerOptions& o) {
  if (o.model.empty()) return make_error("--model is required (on the command line or in --config)");
  if (o.port < 0 || o.port > 65535) return make_error("--port must be 0..65535");
  if (o.max_tokens < 1) return make_error("--max-tokens must be at least 1");
  if (o.ctx_size < 0) return make_error("--ctx-size must not be negative");
  if (o.kv_recent < -1) return make_error("--kv-recent must be -1 (auto), 0 (off) or a number of tokens");
  if (o.prefill_size < 1) return make_error("--prefill-size must be at least 1");
  if (o.decode_ahead != "auto" && o.decode_ahead != "on" && o.decode_ahead != "off")
    return make_error("--decode-ahead must be auto, on or off");
  if (o.parallel < 1) return make_error("--parallel must be at least 1");
  if (!o.mem_limit.empty())
    if (auto limit = parse_mem_limit(o.mem_limit); !limit) return limit.error();
  if (o.mem_wait_s < 0) return make_error("--mem-wait must not be negative");
  if (o.ssd_prefetch < 0 || o.ssd_prefetch > 4096) return make_error("--ssd-prefetch must be 0..4096 reads in flight");
  if (o.queue_size < 1) return make_error("--queue-size must be at least 1");
  if (o.shutdown_grace_s < 0) return make_error("--shutdown-grace must not be negative");
  if (o.threads < 0) return make_error("--threads must not be negative");
  if (o.temp < 0) return make_error("--temp must not be negative");
  if (o.top_p <= 0 || o.top_p > 1) return make_error("--top-p must be in (0, 1]");
  if (o.top_k < 0) return make_error("--top-k must not be negative");
  if (o.min_p < 0 || o.min_p > 1) return make_error("--min-p must be in [0, 1]");
  if (o.repeat_penalty <= 0) return make_error("--repeat-penalty must be positive");
  if (o.http_threads < 1) return make_error("--http-threads must be at least 1");
  if (o.work_threads < 1) return make_error("--work-threads must be at least 1");
  if (o.work_queue < 1) return make_error("--work-queue must be at least 1");
  if (o.body_limit < 1024) return make_error("--body-limit must be at least 1024");
  if (o.thinking != "auto" && !thinking_on(o.thinking) && !thinking_off(o.thinking)) return make_error("--thinking must be auto, on or off");
  static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
  bool level_ok = false;
  for (const char* l : kLevels) level_ok |= o.log_level == l;
  if (!level_ok) return make_error("--log-level must be one of trace, debug, info, warn, error, off");
  if (!o.draft.empty() && o.draft != "ngram") return make_error("--draft must be ngram (a draft model is --draft-model DIR)");
  if (!o.draft.empty() && !o.draft_model.empty()) return make_error("--draft ngram and --draft-model are two kinds of drafting: give one");
  if (o.num_draft_tokens < 1) return make_error("--num-draft-tokens must be at least 1");
  if (o.spec_max_batch < 1) return make_error("--spec-max-batch must be at least 1");
  if (auto g = GpuLayers::parse(o.gpu_layers); !g) return g.error();
  if (!o.devices.empty()) {
    if (auto d = parse_devices(o.devices); !d) return d.error();
    if (o.backend != "auto") return make_error("--devices names the backends that run the offloaded layers; drop --backend " + o.backend);
  }
  return {};
}

}  // namespace

Result<ParsedOptions> parse_server_options(const std::vector<std::string>& args) {
  ParsedOptions parsed;
  auto desc = describe(parsed.options);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    if (vm.count("help")) {
      std::ostringstream help;
      help << "usage: sluice serve --model DIR|org/name[@revision] [options]\n\n" << desc;
      parsed.help = true;
      parsed.help_text = help.str();
      return parsed;
    }
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream file(path);
      if (!file) return make_error("--config: cannot read " + path);
      // Values already stored from the command line are kept: the command line wins.
      po::store(po::parse_config_file(file, desc, /*allow_unregistered=*/false), vm);
    }
    po::notify(vm);
    for (const auto& [name, value] : vm)
      if (!value.defaulted()) parsed.given.insert(name);
    if (parsed.given.count("mem-limit") && parsed.options.mem_limit.empty())
      return make_error("--mem-limit: empty (give a size, e.g. 8G, 512M, or a number of MiB)");
    if (parsed.options.ssd_prefetch > 0 && !parsed.options.stream_experts && parsed.options.expert_store.rfind("uring", 0) != 0)
      parsed.warnings.push_back("--ssd-prefetch: only the streaming expert store reads ahead (--stream-experts); no effect here");
  } catch (const po::error& e) {
    return make_error(e.what());
  }
  if (auto ok = validate(parsed.options); !ok) return ok.error();
  return parsed;
}

Status check_available(const ServerOptions& o) {
  if (o.dflash)
    return make_error("--dflash: block-diffusion (DFlash) drafting is not available in Sluice; speculative decoding is --draft ngram or --draft-model DIR");
  if (o.vision) return make_error("--vision: image input (vision encoders) is not available in Sluice; it serves text models");
  if (o.audio) return make_error("--audio: audio input is not available in Sluice; it serves text models");
  if (o.stream_experts && o.expert_store != "resident" && o.expert_store.rfind("uring", 0) != 0)
    return make_error("--stream-experts streams through the uring store; it cannot be combined with --expert-store " + o.expert_store);
  return {};
}

namespace {
// Half of what the machine can give now (or of --mem-limit): room for experts beside the dense
// weights, the KV cache and the page cache the reads go through.
int derived_expert_budget_mb(const ServerOptions& o) {
  uint64_t available = 0;
  if (!o.mem_limit.empty()) {
    if (auto limit = parse_mem_limit(o.mem_limit)) available = *limit;
  } else {
    available = static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  }
  return static_cast<int>(std::max<uint64_t>(available / 2 >> 20, 64));
}
}  // namespace

EngineOptions to_engine_options(const ServerOptions& o) {
  EngineOptions e;
  e.model_dir = o.model;
  e.backend = o.backend;
  e.kv_codec = o.kv_codec;
  e.expert_store = o.expert_store;
  e.expert_cache_mb = o.expert_cache_mb;
  if (o.stream_experts) {
    if (e.expert_store == "resident") e.expert_store = "uring";
    if (e.expert_cache_mb == 0) e.expert_cache_mb = derived_expert_budget_mb(o);
  }
  if (o.ssd_prefetch > 0 && e.expert_store.rfind("uring", 0) == 0)
    e.expert_store += (e.expert_store.find(':') == std::string::npos ? ":qd=" : ",qd=") + std::to_string(o.ssd_prefetch);
  if (!o.mem_limit.empty())
    if (auto limit = parse_mem_limit(o.mem_limit)) e.mem_limit_bytes = *limit;
  e.mem_wait_ms = o.mem_wait_s * 1000;
  e.kv_recent = o.kv_recent;
  // The recommended pair depends on whether the newest tokens stay exact (auto: 16 of them).
  if (o.turbo_kv) e.kv_codec = turbo::recommended_turbo_kv(o.kv_recent < 0 ? turbo::kRecommendedRecentWindow : static_cast<uint32_t>(o.kv_recent));
  e.gpu_layers = o.gpu_layers;
  e.devices = o.devices;
  e.backend_options = o.backend_options;
  e.plugin_dir = o.plugin_dir;
  e.threads = o.threads;
  e.ctx_size = o.ctx_size;
  e.prefill_size = o.prefill_size;
  e.decode_ahead = o.decode_ahead;
  e.parallel = o.parallel;
  e.queue_size = o.queue_size;
  e.draft = o.draft;
  e.draft_model = o.draft_model;
  e.num_draft_tokens = o.num_draft_tokens;
  e.spec_max_batch = o.spec_max_batch;
  return e;
}

std::optional<bool> default_thinking(const ServerOptions& o) {
  if (thinking_on(o.thinking)) return true;
  if (thinking_off(o.thinking)) return false;
  return std::nullopt;
}

SamplingParams default_sampling(const ServerOptions& o) {
  SamplingParams s;
  s.temperature = o.temp;
  s.top_p = o.top_p;
  s.top_k = o.top_k;
  s.min_p = o.min_p;
  s.repeat_penalty = o.repeat_penalty;
  return s;
}

}  // namespace sluice::server
