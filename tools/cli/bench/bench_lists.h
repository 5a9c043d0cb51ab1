#pragma once
// Parsing the list-valued options of `sluice bench` (--ctx 128,512, --kv-codecs f16,q8,k=turbo4,v=turbo3,
// --expert-stores resident,uring@25%). Item values may themselves contain commas (a K/V codec pair,
// a store's options), so a comma starts a new item only where what follows cannot continue the
// previous one; ';' always separates.
#include <optional>
#include <string>
#include <vector>

#include "util/result.h"

namespace sluice::cli::bench {

// "f16,q8,k=turbo4,v=turbo3" → {"f16", "q8", "k=turbo4,v=turbo3"}. A piece "key=value" with no ':'
// before its '=' continues the previous item (v=…, qd=4), except "k=…", which starts a K/V pair.
std::vector<std::string> split_items(const std::string& text);

// Non-negative integers: "0,512,8192" (each at most `max`); an error names the bad piece.
Result<std::vector<int>> parse_int_list(const std::string& text, const char* what, int max);

// An --expert-stores item: "resident", "uring", "uring@512" (MiB), "uring@25%" (of all experts' bytes),
// with the store's own options kept: "uring:direct=0@25%".
struct ExpertStoreItem {
  std::string label;     // as written, for the row
  std::string spec;      // what --expert-store takes
  int budget_mb = 0;     // 0 = the store's default
  int budget_pct = 0;    // 0 = not a share
};
Result<ExpertStoreItem> parse_expert_store(const std::string& item);

// A --gpu-layers item: "all" (every layer on the chosen backend, EngineOptions' ""), "auto" or a count.
Result<std::string> parse_gpu_layers(const std::string& item);

}  // namespace sluice::cli::bench
