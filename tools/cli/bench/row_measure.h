#pragma once
// One row of the matrix, measured in this process: open the runtime with the row's backend, KV
// codec and expert store; then, `reps` times, prefill `ctx` tokens (time to first token) and decode
// `gen` tokens at that depth, one forward pass each. Run by the hidden `sluice bench --one-row`
// mode in a child process, so the peak RSS is the row's own.
#include <functional>
#include <string>

#include <rapidjson/document.h>

#include "engine/engine.h"
#include "util/result.h"

namespace sluice::cli::bench {

struct RowSpec {
  EngineOptions engine;          // model, backend, kv_codec, expert_store, threads, gpu_layers, ...
  std::string expert_label;      // as the user wrote it ("uring@25%")
  std::string gpu_layers_label;  // "all", "auto", "8"
  int expert_budget_mb = 0;      // 0 = the store's default
  int expert_budget_pct = 0;     // a share of all experts' bytes, resolved once the model is known
  int ctx = 0, gen = 32, reps = 1;
};

using Progress = std::function<void(const std::string&)>;

// The row as a JSON object (every field of the result file's rows; null where not applicable), or
// an error (model, backend or codec refused, a forward pass failed).
Result<rapidjson::Value> measure_row(const RowSpec& spec, rapidjson::Document::AllocatorType& alloc, const Progress& progress);

// The model as the result file's "model" object (name, architecture, shape, bytes, quantization).
Result<rapidjson::Value> model_record(const std::string& model_dir, rapidjson::Document::AllocatorType& alloc);

}  // namespace sluice::cli::bench
