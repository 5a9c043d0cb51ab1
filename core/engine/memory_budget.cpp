#include "engine/memory_budget.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>

namespace sluice {
namespace {

uint64_t status_kib(const char* key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(key) + ":";
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    return std::strtoull(line.c_str() + prefix.size(), nullptr, 10) * 1024;
  }
  return 0;
}

}  // namespace

uint64_t resident_bytes_now() { return status_kib("VmRSS"); }
uint64_t resident_bytes_peak() { return status_kib("VmHWM"); }

void reset_resident_peak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

// Sockets' buffers, requests being prepared (JSON, templates), results on their way out and the
// allocator's slack do not grow with the model: a fixed amount, and a little more on a large limit.
uint64_t memory_headroom(uint64_t limit) { return (16ull << 20) + limit / 50; }

std::string format_mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

Result<uint64_t> parse_mem_limit(const std::string& text) {
  auto bad = [&](const std::string& why) { return make_error("--mem-limit " + text + ": " + why); };
  if (text.empty()) return bad("empty (give a size, e.g. 8G, 512M, or a number of MiB)");
  if (text.size() > 32) return bad("not a size");
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    return bad("not a size (give e.g. 8G, 512M, 1000000B, or a number of MiB)");
  }
  if (!std::isfinite(value) || value <= 0) return bad("must be more than zero");
  std::string unit;
  for (char c : text.substr(used)) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty()) scale = 1 << 20;  // SwiftLM's bare number: megabytes
  else if (unit == "b") scale = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else return bad("unknown unit '" + text.substr(used) + "' (B, K, M, G, T; KiB, MiB, GiB, TiB; a bare number is MiB)");
  const double bytes = value * scale;
  if (bytes < 1) return bad("must be at least one byte");
  if (bytes > 0x1p60) return bad("larger than any machine");
  return static_cast<uint64_t>(bytes);
}

Result<uint32_t> plan_kv_tokens(MemoryBudget& b, double bytes_per_token, uint32_t page_tokens, uint32_t wanted_tokens) {
  b.kv_pages = 0;
  b.kv_tokens = 0;
  const uint64_t fixed = b.fixed();
  const double page_bytes = std::max(1.0, bytes_per_token * page_tokens);
  if (fixed + page_bytes > static_cast<double>(b.limit)) {
    std::string parts = "the process " + format_mib(b.process) + ", weights " + format_mib(b.weights);
    if (b.expert_cache) parts += ", expert cache " + format_mib(b.expert_cache);
    if (b.draft) parts += ", draft model " + format_mib(b.draft);
    parts += ", activations " + format_mib(b.activations);
    if (b.kv_fixed) parts += ", per-sequence KV pools " + format_mib(b.kv_fixed);
    parts += " and headroom " + format_mib(b.headroom);
    return make_error("--mem-limit " + format_mib(b.limit) + " is too small: " + parts + " need " + format_mib(fixed) +
                      ", which leaves no room for one KV page (" + format_mib(static_cast<uint64_t>(page_bytes)) +
                      ", " + std::to_string(page_tokens) + " tokens); give at least " +
                      format_mib(fixed + static_cast<uint64_t>(page_bytes) * 64) + " for a useful KV cache");
  }
  double room = static_cast<double>(b.limit - fixed);
  if (b.device_kv_budget > 0) room = std::min(room, static_cast<double>(b.device_kv_budget));
  const uint64_t pages = std::min<uint64_t>(static_cast<uint64_t>(room / page_bytes),
                                            (static_cast<uint64_t>(wanted_tokens) + page_tokens - 1) / page_tokens);
  if (pages == 0)
    return make_error("--mem-limit: " + b.device + " has " + format_mib(b.device_kv_budget) +
                      " for KV pages, less than one page (" + format_mib(static_cast<uint64_t>(page_bytes)) + ")");
  b.kv_tokens = static_cast<uint32_t>(std::min<uint64_t>(pages * page_tokens, UINT32_MAX - page_tokens));
  b.kv_pages = static_cast<uint64_t>(std::ceil(bytes_per_token * b.kv_tokens));
  return b.kv_tokens;
}

std::string describe_budget(const MemoryBudget& b) {
  std::string out = "process " + format_mib(b.process) + " + weights " + format_mib(b.weights);
  if (b.expert_cache) out += " + expert cache " + format_mib(b.expert_cache);
  if (b.draft) out += " + draft model " + format_mib(b.draft);
  out += " + activations " + format_mib(b.activations);
  if (b.kv_fixed) out += " + per-sequence KV " + format_mib(b.kv_fixed);
  out += " + headroom " + format_mib(b.headroom) + " + KV pages " + format_mib(b.kv_pages) + " (" + std::to_string(b.kv_tokens) +
         " tokens) = " + format_mib(b.planned());
  if (b.limit) out += " of --mem-limit " + format_mib(b.limit);
  return out;
}

}  // namespace sluice
