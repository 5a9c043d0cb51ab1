#include "server/memory_plan.h"

#include "model/model_config.h"

#include <cctype>
#include <cmath>
#include <fstream>

#include <fmt/format.h>

namespace sluice::server {
namespace {

std::optional<uint64_t> meminfo_bytes(const std::string& wanted) {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == wanted) return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> available_memory_bytes() { return meminfo_bytes("MemAvailable:"); }
std::optional<uint64_t> total_memory_bytes() { return meminfo_bytes("MemTotal:"); }

std::optional<uint64_t> parse_byte_size(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    return std::nullopt;
  }
  if (!std::isfinite(value) || value < 0) return std::nullopt;
  std::string unit;
  for (char c : text.substr(used)) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 1;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else return std::nullopt;
  return static_cast<uint64_t>(value * scale);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} {}", bytes, units[u]) : fmt::format("{:.2f} {}", bytes, units[u]);
}

double kv_bytes_per_token(const ModelConfig& c, double element_bytes) {
  double bytes = 0;  // K and V of the layers that keep every position (sliding windows and states: per sequence)
  for (int i = 0; i < c.num_layers; ++i) {
    const LayerCacheSpec l = c.layer_cache(i);
    if (l.type == LayerType::kFullAttention) bytes += double(l.n_kv_heads) * (l.k_head_dim + l.v_head_dim) * element_bytes;
  }
  return bytes;
}

MemoryPlan plan_memory(const Engine& engine, const std::string& kv_codec, const std::string& mem_limit) {
  const ModelConfig& c = engine.model_config();
  const EngineMetrics m = engine.metrics();
  MemoryPlan plan;
  plan.model = engine.model_name();
  plan.architecture = c.architecture;
  plan.device = engine.backend_name();
  plan.layers = c.num_layers;
  plan.kv_heads = c.num_kv_heads;
  plan.head_dim = c.head_dim;
  if (c.mla.enabled() && c.mla.latent_cache) {  // MLA's one latent K head (V, the latent, beside it)
    plan.kv_heads = 1;
    plan.head_dim = c.mla.kv_lora_rank + c.mla.qk_rope_head_dim;
  }
  plan.context = engine.context_size();
  plan.weights_bytes = static_cast<double>(m.weight_bytes);
  plan.kv = {{"f32", kv_bytes_per_token(c, 4)}, {"f16", kv_bytes_per_token(c, 2)}};
  bool configured_listed = false;
  for (auto& r : plan.kv) configured_listed |= r.codec == kv_codec;
  if (!configured_listed) plan.kv.push_back({kv_codec, m.kv_bytes_per_token});
  for (auto& r : plan.kv) {
    r.bytes_at_context = r.bytes_per_token * plan.context;
    r.configured = r.codec == kv_codec;
  }
  // Sliding-window layers (where the backend keeps only the window's pages) and recurrent layers'
  // state cost per sequence, not per token.
  plan.per_sequence_bytes = static_cast<double>(m.kv_window_bytes_per_sequence + m.kv_state_bytes_per_sequence);
  plan.drafter = m.drafter;
  plan.draft_bytes = static_cast<double>(m.draft_bytes);
  plan.total_bytes = plan.weights_bytes + m.kv_bytes_per_token * plan.context + plan.per_sequence_bytes + plan.draft_bytes;
  plan.parts = m.memory;
  if (!mem_limit.empty()) {
    if (auto limit = parse_mem_limit(mem_limit)) plan.budget = *limit;
    plan.budget_name = "--mem-limit " + mem_limit;
    plan.mem_limit_malformed = !plan.budget;
  } else {
    plan.budget = available_memory_bytes();
    plan.budget_name = "available memory";
  }
  return plan;
}

std::string memory_plan_text(const MemoryPlan& plan, const std::string& mem_limit) {
  std::string out;
  out += fmt::format("memory plan: {} ({}, {} layers, {} KV heads x {} dims), context {} tokens\n", plan.model,
                     plan.architecture, plan.layers, plan.kv_heads, plan.head_dim, plan.context);
  out += fmt::format("device: {}\n", plan.device);
  out += fmt::format("  weights                      {:>12}\n", format_bytes(plan.weights_bytes));
  out += fmt::format("  {:<8} {:>16} {:>18}\n", "KV codec", "per token", fmt::format("at {} tokens", plan.context));
  std::string configured;
  for (const auto& r : plan.kv) {
    out += fmt::format("  {:<8} {:>16} {:>18}{}\n", r.codec, format_bytes(r.bytes_per_token), format_bytes(r.bytes_at_context),
                       r.configured ? "   (configured)" : "");
    if (r.configured) configured = r.codec;
  }
  if (plan.per_sequence_bytes > 0)
    out += fmt::format("  {:<8} {:>16} {:>18}\n", configured, "+ per sequence",
                       format_bytes(plan.per_sequence_bytes) + " (windows, state)");
  if (plan.draft_bytes > 0)
    out += fmt::format("  {} (weights, KV)   {:>12}\n", plan.drafter, format_bytes(plan.draft_bytes));
  out += fmt::format("  total ({}, full context)   {:>12}\n", configured, format_bytes(plan.total_bytes));
  if (plan.mem_limit_malformed) out += fmt::format("  --mem-limit {}: not a size (use e.g. 8G)\n", mem_limit);
  if (plan.budget && plan.parts.limit == 0) {
    out += fmt::format("  {}: {} -> {}\n", plan.budget_name, format_bytes(static_cast<double>(*plan.budget)),
                       plan.fits() ? "fits" : "does NOT fit");
  }
  if (plan.parts.limit > 0) {  // --mem-limit: what the engine planned under it
    const MemoryBudget& b = plan.parts;
    auto line = [&](const char* name, uint64_t bytes) {
      if (bytes > 0) out += fmt::format("    {:<26} {:>12}\n", name, format_bytes(static_cast<double>(bytes)));
    };
    out += fmt::format("  planned under {}:\n", plan.budget_name);
    line("process (code, libraries)", b.process);
    line("weights", b.weights);
    line("expert cache", b.expert_cache);
    line("draft model", b.draft);
    line("activations", b.activations);
    line("per-sequence KV pools", b.kv_fixed);
    line("headroom", b.headroom);
    out += fmt::format("    {:<26} {:>12}   ({} tokens across all sequences)\n", "KV pages", format_bytes(static_cast<double>(b.kv_pages)),
                       b.kv_tokens);
    if (!b.device.empty())
      out += fmt::format("    (KV pages also within {}: {} for them)\n", b.device, format_bytes(static_cast<double>(b.device_kv_budget)));
    out += fmt::format("    {:<26} {:>12} of {}\n", "total", format_bytes(static_cast<double>(b.planned())),
                       format_bytes(static_cast<double>(b.limit)));
  }
  return out;
}

std::string memory_plan_text(const Engine& engine, const std::string& kv_codec, const std::string& mem_limit) {
  return memory_plan_text(plan_memory(engine, kv_codec, mem_limit), mem_limit);
}

}  // namespace sluice::server
