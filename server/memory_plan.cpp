#include "server/memory_plan.h"

#include "model/model_config.h"

#include <cctype>
#include <cmath>
#include <fstream>

#include <fmt/format.h>

namespace sluice::server {
namespace {

std::optional<uint64_t> available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace

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

std::string memory_plan_text(const Engine& engine, const std::string& kv_codec, const std::string& mem_limit) {
  const ModelConfig& c = engine.model_config();
  const EngineMetrics m = engine.metrics();
  const int ctx = engine.context_size();
  std::string out;
  out += fmt::format("memory plan: {} ({}, {} layers, {} KV heads x {} dims), context {} tokens\n", engine.model_name(),
                     c.architecture, c.num_layers, c.num_kv_heads, c.head_dim, ctx);
  out += fmt::format("device: {}\n", engine.backend_name());
  out += fmt::format("  weights                      {:>12}\n", format_bytes(static_cast<double>(m.weight_bytes)));
  out += fmt::format("  {:<8} {:>16} {:>18}\n", "KV codec", "per token", fmt::format("at {} tokens", ctx));
  struct Row {
    std::string name;
    double per_token;
  };
  std::vector<Row> rows = {{"f32", kv_bytes_per_token(c, 4)}, {"f16", kv_bytes_per_token(c, 2)}};
  bool configured_listed = false;
  for (auto& r : rows) configured_listed |= r.name == kv_codec;
  if (!configured_listed) rows.push_back({kv_codec, m.kv_bytes_per_token});
  for (const auto& r : rows) {
    out += fmt::format("  {:<8} {:>16} {:>18}{}\n", r.name, format_bytes(r.per_token), format_bytes(r.per_token * ctx),
                       r.name == kv_codec ? "   (configured)" : "");
  }
  // Sliding-window layers (where the backend keeps only the window's pages) and recurrent layers'
  // state cost per sequence, not per token.
  const double per_sequence = static_cast<double>(m.kv_window_bytes_per_sequence + m.kv_state_bytes_per_sequence);
  if (per_sequence > 0)
    out += fmt::format("  {:<8} {:>16} {:>18}\n", kv_codec, "+ per sequence", format_bytes(per_sequence) + " (windows, state)");
  if (m.draft_bytes > 0)
    out += fmt::format("  {:<28} {:>12}\n", m.drafter + " (weights, KV)", format_bytes(static_cast<double>(m.draft_bytes)));
  const double total = static_cast<double>(m.weight_bytes) + m.kv_bytes_per_token * ctx + per_sequence + static_cast<double>(m.draft_bytes);
  out += fmt::format("  total ({}, full context)   {:>12}\n", kv_codec, format_bytes(total));
  std::optional<uint64_t> budget;
  std::string budget_name;
  if (!mem_limit.empty()) {
    budget = parse_byte_size(mem_limit);
    budget_name = "--mem-limit " + mem_limit;
    if (!budget) out += fmt::format("  --mem-limit {}: not a size (use e.g. 8G)\n", mem_limit);
  } else {
    budget = available_memory_bytes();
    budget_name = "available memory";
  }
  if (budget) {
    out += fmt::format("  {}: {} -> {}\n", budget_name, format_bytes(static_cast<double>(*budget)),
                       total <= static_cast<double>(*budget) ? "fits" : "does NOT fit");
  }
  return out;
}

}  // namespace sluice::server
