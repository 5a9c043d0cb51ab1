#pragma once
// `--info`: the memory plan — weights, KV cache bytes per token and at the context size for each
// codec, and whether it fits the memory available (or --mem-limit).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/model_config.h"

namespace sluice::server {

// "8G", "512MiB", "1.5g", "1048576" → bytes; nullopt when malformed. (--mem-limit reads a bare
// number as MiB: parse_mem_limit in engine/memory_budget.h.)
std::optional<uint64_t> parse_byte_size(const std::string& text);
std::string format_bytes(double bytes);

// KV cache bytes per token for a plain codec with `element_bytes` per stored value.
double kv_bytes_per_token(const ModelConfig& config, double element_bytes);

// This machine's memory from /proc/meminfo (MemAvailable, MemTotal); nullopt where unreadable.
std::optional<uint64_t> available_memory_bytes();
std::optional<uint64_t> total_memory_bytes();

struct MemoryPlan {
  struct KvRow {
    std::string codec;
    double bytes_per_token = 0;
    double bytes_at_context = 0;
    bool configured = false;
  };
  std::string model, architecture, device;
  int layers = 0, kv_heads = 0, head_dim = 0, context = 0;
  double weights_bytes = 0;
  std::vector<KvRow> kv;            // f32, f16, and the configured codec when it is another
  double per_sequence_bytes = 0;    // sliding windows and recurrent state
  std::string drafter;              // speculative decoding's ("" off)
  double draft_bytes = 0;           // a draft model's weights and KV cache
  double total_bytes = 0;           // weights + the configured codec at the full context + per sequence + draft
  std::optional<uint64_t> budget;   // --mem-limit, else the memory available
  std::string budget_name;          // "--mem-limit 8G" or "available memory"
  bool mem_limit_malformed = false;
  MemoryBudget parts;               // what the engine planned at start (EngineMetrics::memory)
  // Under --mem-limit the engine sized its KV pool to fit: what it planned is within the limit. Else
  // the weights and the configured codec at the full context against the memory available.
  bool fits() const {
    if (parts.limit > 0) return parts.planned() <= parts.limit;
    return budget && total_bytes <= static_cast<double>(*budget);
  }
};

MemoryPlan plan_memory(const Engine& engine, const std::string& kv_codec, const std::string& mem_limit);
std::string memory_plan_text(const MemoryPlan& plan, const std::string& mem_limit);
std::string memory_plan_text(const Engine& engine, const std::string& kv_codec, const std::string& mem_limit);

}  // namespace sluice::server
