#pragma once
// --mem-limit: everything the process holds, planned under one number at start. The parts that do
// not depend on traffic are measured or computed first (the process itself, the weights, the expert
// cache, one forward pass's activations, the pools beside the main KV pool, a headroom); the main
// KV page pool gets what is left, in whole pages. The engine then admits a sequence only while the
// pages its prompt and max_tokens may need are free of other sequences' claims (engine.cpp), so
// the pool never runs out mid-generation and the plan holds under any traffic.
#include <cstdint>
#include <optional>
#include <string>

#include "util/result.h"

namespace sluice {

struct MemoryBudget {
  uint64_t limit = 0;         // bytes; 0: no --mem-limit (the other fields still describe the plan)
  uint64_t process = 0;       // resident before the weights load: code, libraries, plugins, tokenizer, backends
  uint64_t weights = 0;       // what the backends hold of the model (measured, at least the tensors' bytes)
  uint64_t expert_cache = 0;  // a streaming expert store's budget
  uint64_t draft = 0;         // a draft model's weights and KV cache
  uint64_t activations = 0;   // one forward pass at the largest batch, and its logits on the host
  uint64_t kv_fixed = 0;      // pools sized per sequence: the recent window, sliding-window pages, recurrent states
  uint64_t headroom = 0;      // HTTP buffers, request state, allocator slack
  uint64_t kv_pages = 0;      // the main KV page pool
  uint32_t kv_tokens = 0;     // its positions, across all sequences
  // A device that holds the KV pages (not the host): its name and what it could give them.
  std::string device;
  uint64_t device_kv_budget = 0;

  uint64_t planned() const { return process + weights + expert_cache + draft + activations + kv_fixed + headroom + kv_pages; }
  // Everything but the main KV pool.
  uint64_t fixed() const { return planned() - kv_pages; }
};

// The headroom the plan keeps for what no part above counts.
uint64_t memory_headroom(uint64_t limit);

// This process's resident set now and at its peak (VmRSS, VmHWM of /proc/self/status); 0 where unreadable.
uint64_t resident_bytes_now();
uint64_t resident_bytes_peak();
// Starts VmHWM again from the current resident set (/proc/self/clear_refs; best effort).
void reset_resident_peak();

// --mem-limit's value: a bare number is MiB (as SwiftLM reads `--mem-limit 8192`); with a unit,
// B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB — every unit a power of 1024. Zero, negative, fractional
// bytes and malformed text are errors naming the value.
Result<uint64_t> parse_mem_limit(const std::string& text);

// The main pool's positions under the limit: what is left after budget.fixed(), in whole pages of
// page_tokens, at most wanted_tokens. Fills kv_pages and kv_tokens; an error giving the numbers when
// not even one page is left.
Result<uint32_t> plan_kv_tokens(MemoryBudget& budget, double bytes_per_token, uint32_t page_tokens, uint32_t wanted_tokens);

// "limit 96.00 MiB: process 20.1 MiB + weights ... -> KV pool 3.2 MiB (1632 tokens)".
std::string describe_budget(const MemoryBudget& budget);
std::string format_mib(uint64_t bytes);

}  // namespace sluice
