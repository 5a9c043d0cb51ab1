#include "server/metrics.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <fmt/format.h>

namespace sluice::server {
namespace {

// Label values escape backslash, quote and newline.
std::string label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

}  // namespace

void ServerCounters::count_request(std::string_view route, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{std::string(route), status}];
}

std::map<std::pair<std::string, int>, uint64_t> ServerCounters::requests() const {
  std::lock_guard lock(mutex_);
  return requests_;
}

uint64_t process_resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages_total = 0, pages_resident = 0;
  if (!(statm >> pages_total >> pages_resident)) return 0;
  return pages_resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

std::string render_metrics(const EngineMetrics& e, const ServerCounters& c, const ServerInfo& info,
                           double uptime_seconds) {
  std::string out;
  out += "# HELP sluice_info Build and configuration of this server.\n# TYPE sluice_info gauge\n";
  out += fmt::format("sluice_info{{version=\"{}\",model=\"{}\",backend=\"{}\",kv_codec=\"{}\",expert_store=\"{}\"}} 1\n",
                     label(info.version), label(info.model), label(info.backend), label(info.kv_codec),
                     label(info.expert_store));
  metric(out, "sluice_uptime_seconds", "gauge", "Seconds since the server started.", uptime_seconds);

  out += "# HELP sluice_http_requests_total HTTP requests answered, by route and status code.\n"
         "# TYPE sluice_http_requests_total counter\n";
  for (const auto& [key, count] : c.requests())
    out += fmt::format("sluice_http_requests_total{{route=\"{}\",code=\"{}\"}} {}\n", label(key.first), key.second,
                       count);
  metric(out, "sluice_http_open_connections", "gauge", "Open client connections.",
         static_cast<double>(c.open_connections.load()));
  metric(out, "sluice_http_active_generations", "gauge", "Completions being generated or waiting.",
         static_cast<double>(c.active_generations.load()));
  metric(out, "sluice_http_preparing_requests", "gauge",
         "Requests waiting for or on a work thread (JSON, chat template, tokenizing).",
         static_cast<double>(c.preparing_requests.load()));
  metric(out, "sluice_disconnect_cancels_total", "counter", "Generations cancelled because the client disconnected.",
         static_cast<double>(c.disconnect_cancels.load()));
  metric(out, "sluice_slow_client_cancels_total", "counter",
         "Generations cancelled because the client did not read fast enough.",
         static_cast<double>(c.slow_client_cancels.load()));
  metric(out, "sluice_rejected_overloaded_total", "counter", "Requests refused with 503 because the queue was full.",
         static_cast<double>(c.rejected_overloaded.load()));

  metric(out, "sluice_requests_total", "counter", "Generation requests the engine finished.",
         static_cast<double>(e.requests_total));
  metric(out, "sluice_requests_failed_total", "counter", "Generation requests that ended in an error.",
         static_cast<double>(e.requests_failed));
  metric(out, "sluice_prompt_tokens_total", "counter", "Prompt tokens processed.",
         static_cast<double>(e.prompt_tokens_total));
  metric(out, "sluice_cached_prompt_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
         static_cast<double>(e.cached_tokens_total));
  metric(out, "sluice_prefilled_tokens_total", "counter", "Prompt tokens the model ran (once per request, whatever its n).",
         static_cast<double>(e.prefilled_tokens_total));
  metric(out, "sluice_forked_sequences_total", "counter", "Choices (n > 1) that forked from their prompt's pages.",
         static_cast<double>(e.forked_sequences_total));
  metric(out, "sluice_completion_tokens_total", "counter", "Tokens generated.",
         static_cast<double>(e.completion_tokens_total));
  metric(out, "sluice_decode_ahead_steps_total", "counter", "Decode steps issued a token ahead (greedy sequences decoded together).",
         static_cast<double>(e.ahead_steps_total));
  metric(out, "sluice_decode_ahead_rows_total", "counter", "Sequence rows in the steps issued a token ahead.",
         static_cast<double>(e.ahead_rows_total));
  metric(out, "sluice_prefill_seconds_total", "counter", "Seconds spent in prompt processing.", e.prefill_seconds_total);
  metric(out, "sluice_decode_seconds_total", "counter", "Seconds spent generating tokens.", e.decode_seconds_total);
  double prefill_tps = e.prefill_seconds_total > 0
                           ? (e.prompt_tokens_total - e.cached_tokens_total) / e.prefill_seconds_total : 0;
  double decode_tps = e.decode_seconds_total > 0 ? e.completion_tokens_total / e.decode_seconds_total : 0;
  metric(out, "sluice_prefill_tokens_per_second", "gauge", "Average prompt tokens per second of prefill time.",
         prefill_tps);
  metric(out, "sluice_decode_tokens_per_second", "gauge", "Average generated tokens per second of decode time.",
         decode_tps);
  metric(out, "sluice_decode_passes_total", "counter", "Target forward passes that generated tokens after a request's first.",
         static_cast<double>(e.decode_passes_total));
  metric(out, "sluice_decode_pass_tokens_total", "counter", "Tokens those passes generated.",
         static_cast<double>(e.decode_pass_tokens_total));
  metric(out, "sluice_tokens_per_target_pass", "gauge",
         "Tokens generated per decode pass of the target model (1 without speculative decoding).",
         e.decode_passes_total > 0 ? static_cast<double>(e.decode_pass_tokens_total) / e.decode_passes_total : 0);
  metric(out, "sluice_spec_draft_tokens_total", "counter", "Speculative guesses the target model verified.",
         static_cast<double>(e.draft_tokens_total));
  metric(out, "sluice_spec_accepted_tokens_total", "counter", "Speculative guesses the target model kept.",
         static_cast<double>(e.draft_accepted_total));
  metric(out, "sluice_spec_acceptance_rate", "gauge", "Kept guesses per verified guess (0 when none were verified).",
         e.draft_tokens_total > 0 ? static_cast<double>(e.draft_accepted_total) / e.draft_tokens_total : 0);
  metric(out, "sluice_queue_depth", "gauge", "Requests waiting for a slot.", e.queue_depth);
  metric(out, "sluice_active_sequences", "gauge", "Sequences being generated.", e.active_sequences);
  metric(out, "sluice_weight_bytes", "gauge", "Bytes of model weights.", static_cast<double>(e.weight_bytes));
  metric(out, "sluice_kv_cache_capacity_bytes", "gauge", "Bytes reserved for the KV cache.",
         static_cast<double>(e.kv_bytes_capacity));
  metric(out, "sluice_kv_cache_used_bytes", "gauge", "Bytes of the KV cache in use.",
         static_cast<double>(e.kv_bytes_used));
  metric(out, "sluice_kv_pages_capacity", "gauge", "KV cache pages in all (used, cached or free).", e.kv_pages_total);
  metric(out, "sluice_kv_pages_in_use", "gauge", "KV pages held by live sequences (0 when idle).", e.kv_pages_in_use);
  metric(out, "sluice_kv_pages_cached", "gauge",
         "KV pages the prefix cache keeps (reusable prompt blocks; some also held by sequences).", e.kv_pages_cached);
  metric(out, "sluice_kv_recent_pages_in_use", "gauge", "Recent-window pages held by live sequences (0 when idle).",
         e.kv_recent_pages_in_use);
  metric(out, "sluice_kv_cache_bytes_per_token", "gauge", "KV cache bytes per token under the configured codec.",
         e.kv_bytes_per_token);
  metric(out, "sluice_kv_recent_window_tokens", "gauge", "Newest keys before each query attended from exact f16 copies.",
         static_cast<double>(e.kv_recent_window));
  metric(out, "sluice_kv_recent_bytes", "gauge", "Bytes of the recent window's pool of exact rows.",
         static_cast<double>(e.kv_recent_bytes));
  if (e.kv_window_pages_total > 0) {
    metric(out, "sluice_kv_window_pages_total", "gauge", "Pages of the sliding-window layers (each sequence holds its window's).",
           static_cast<double>(e.kv_window_pages_total));
    metric(out, "sluice_kv_window_pages_in_use", "gauge", "Sliding-window layers' pages held by sequences or the prefix cache.",
           static_cast<double>(e.kv_window_pages_in_use));
  }
  if (e.kv_state_slots_total > 0) {
    metric(out, "sluice_kv_state_slots_total", "gauge", "Recurrent state slots: live sequences' states and snapshots.",
           static_cast<double>(e.kv_state_slots_total));
    metric(out, "sluice_kv_state_slots_in_use", "gauge", "Recurrent state slots held by sequences or the prefix cache.",
           static_cast<double>(e.kv_state_slots_in_use));
  }
  metric(out, "sluice_process_resident_memory_bytes", "gauge", "Resident memory of the server process.",
         static_cast<double>(process_resident_bytes()));
  metric(out, "sluice_process_peak_resident_memory_bytes", "gauge", "The most resident memory the server process has had (VmHWM).",
         static_cast<double>(resident_bytes_peak()));
  metric(out, "sluice_memory_limit_bytes", "gauge", "--mem-limit (0: none given).", static_cast<double>(e.memory.limit));
  out += "# HELP sluice_memory_planned_bytes What the plan at start gives each part (under --mem-limit when given).\n"
         "# TYPE sluice_memory_planned_bytes gauge\n";
  const std::pair<const char*, uint64_t> parts[] = {
      {"process", e.memory.process},         {"weights", e.memory.weights},   {"expert_cache", e.memory.expert_cache},
      {"draft", e.memory.draft},             {"activations", e.memory.activations}, {"kv_per_sequence", e.memory.kv_fixed},
      {"headroom", e.memory.headroom},       {"kv_pages", e.memory.kv_pages}};
  for (const auto& [part, bytes] : parts) out += fmt::format("sluice_memory_planned_bytes{{part=\"{}\"}} {}\n", part, bytes);
  metric(out, "sluice_kv_pages_claimed", "gauge", "KV pages the running sequences may need (claimed when each started).",
         static_cast<double>(e.kv_pages_claimed));
  metric(out, "sluice_rejected_memory_total", "counter", "Requests answered 503 after waiting --mem-wait for KV pages.",
         static_cast<double>(e.requests_memory_timeout));
  if (!e.expert_store.empty()) {  // the expert store plugin's counters (Mixture-of-Experts models)
    metric(out, "sluice_expert_bytes_read_total", "counter", "Expert bytes the store really read from the model files.",
           static_cast<double>(e.expert_bytes_read));
    metric(out, "sluice_expert_read_requests_total", "counter", "Read requests the expert store issued.",
           static_cast<double>(e.expert_read_requests));
    metric(out, "sluice_expert_hits_total", "counter", "Expert acquisitions served from memory.", static_cast<double>(e.expert_hits));
    metric(out, "sluice_expert_misses_total", "counter", "Expert acquisitions that had to read.", static_cast<double>(e.expert_misses));
    metric(out, "sluice_expert_prefetched_total", "counter", "Experts read ahead of need.", static_cast<double>(e.expert_prefetched));
    metric(out, "sluice_expert_cache_bytes", "gauge", "Bytes the expert cache holds.", static_cast<double>(e.expert_cache_bytes));
    metric(out, "sluice_expert_cache_budget_bytes", "gauge", "The expert cache's byte budget.", static_cast<double>(e.expert_budget_bytes));
    metric(out, "sluice_expert_read_seconds_total", "counter", "Time with expert reads in flight.", e.expert_read_seconds);
    metric(out, "sluice_expert_read_latency_p50_seconds", "gauge", "Median latency of one expert read.", e.expert_read_p50_us / 1e6);
    metric(out, "sluice_expert_read_latency_p99_seconds", "gauge", "99th-percentile latency of one expert read.", e.expert_read_p99_us / 1e6);
  }
  return out;
}

}  // namespace sluice::server
