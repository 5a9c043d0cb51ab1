#pragma once
// `--calibrate`'s plan file: what was measured on this machine with this model, and the choices
// made from it (--parallel, --prefill-size, the expert budget), kept under the cache directory
// ($XDG_CACHE_HOME/sluice/plans, else ~/.cache/sluice/plans) in a file named by two keys:
// - the model's: a hash of config.json's bytes and the names and sizes of its .safetensors files;
// - the machine's: a hash of the CPU's model name, the core count, the memory size and the
//   --backend/--devices the server was asked for (the device a start will open).
// Later starts with the same model and machine read it and take its choices for the options the
// user did not give. A file that is unreadable, too large, malformed, out of range or made for
// another model or machine is ignored with a warning, never fatal.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "util/result.h"

namespace sluice::server {

struct ServerOptions;

struct RateAtBatch {
  int batch = 1;
  double decode_tps = 0;   // tokens/s of all the batch's sequences together
};

struct PrefillAtChunk {
  int chunk = 0;
  double prefill_tps = 0;
};

struct CalibratedPlan {
  static constexpr int kVersion = 1;
  std::string model_key, machine_key;
  std::string model, machine, device;  // descriptions, for people reading the file
  // Measured.
  double host_read_gbps = 0;       // a streaming read of host memory by every core
  double weight_read_gbps = 0;     // the weights' bytes over the time of one decode step at batch 1 (the backend's)
  double disk_read_gbps = 0;       // the model files read by the expert streaming path (O_DIRECT where allowed)
  bool disk_direct = false;        // the read bypassed the page cache
  std::vector<PrefillAtChunk> prefill;
  std::vector<RateAtBatch> decode;
  // Chosen.
  int parallel = 0;                // 0: no choice
  int prefill_size = 0;
  int expert_cache_mb = 0;
  // --gpu-layers auto, calibrated: the offloaded layers that decoded fastest of those measured (what
  // fits the device, and none); -1: not measured (calibrated without --gpu-layers auto).
  int gpu_layers = -1;
  double gpu_layers_decode_tps = 0, cpu_only_decode_tps = 0;
};

// The keys of a model folder and of this machine with these options (--backend, --devices).
std::string model_key(const std::filesystem::path& model_dir);
std::string machine_key(const ServerOptions& options);
std::string machine_description();

// Where plans live, and the file for this model and machine.
std::filesystem::path plans_dir();
std::filesystem::path plan_path(const std::filesystem::path& model_dir, const ServerOptions& options);

std::string plan_json(const CalibratedPlan& plan);
// Parses and checks a plan file's text (bounded: 64 KiB, fields in range); an error says why not.
Result<CalibratedPlan> parse_plan(const std::string& text);
Status write_plan(const CalibratedPlan& plan, const std::filesystem::path& path);

// The plan for this model and machine, when a usable one exists; warnings (why a file was ignored)
// are appended to `warnings`.
std::optional<CalibratedPlan> find_plan(const std::filesystem::path& model_dir, const ServerOptions& options,
                                        std::vector<std::string>& warnings, std::filesystem::path* found_at = nullptr);

// Takes the plan's choices for the options not in `given` (names as on the command line), and its
// layer count for a --gpu-layers auto. Returns what it set, e.g. "parallel 4, prefill-size 256".
std::string apply_plan(const CalibratedPlan& plan, const std::set<std::string>& given, ServerOptions& options);

}  // namespace sluice::server
