#pragma once
// Layer partitioning (--gpu-layers, --devices): how many of the model's layers each backend runs.
// The first layers go to the offload devices (GPU/OpenCL backends), split evenly between them in
// the order given; the rest run on the CPU backend. The embedding lives with layer 0 and the LM head
// with the last layer (docs/ARCHITECTURE.md, "Layer partitioning"). Pure functions: the runtime
// opens the backends and feeds their memory in.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "util/result.h"

namespace sluice {

// A --gpu-layers value: "" (every layer on the chosen backend), a count, or "auto".
struct GpuLayers {
  enum class Kind { kAll, kCount, kAuto };
  Kind kind = Kind::kAll;
  uint32_t count = 0;
  static Result<GpuLayers> parse(const std::string& text);
};

// A --devices value: backend specs separated by commas ("opencl:0:0,opencl:0:1"). "auto" and the
// CPU backend are refused: the CPU runs the layers beyond --gpu-layers by itself.
Result<std::vector<std::string>> parse_devices(const std::string& text);

// n layers over k devices in order, the remainder to the first ones: 10 over 3 gives 4, 3, 3.
std::vector<uint32_t> split_evenly(uint32_t n, uint32_t k);

// What placing layers on a device costs, for --gpu-layers auto.
struct LayerCosts {
  std::vector<uint64_t> layer_bytes;  // per layer: its weights and its KV cache at the planned capacity
  uint64_t embed_bytes = 0;           // the embedding table, on the device that runs layer 0
  uint64_t head_bytes = 0;            // final norm and an untied lm_head, on the device of the last layer
  bool tied_head = false;             // the head reads the embedding table (again, on another device)
};

// What --gpu-layers auto may give to weights and KV cache on a device: its free memory where the
// driver reports it (OpenCL does not: then its total), less the activations of one forward pass and
// a reserve of a tenth of the device (driver context, kernels, allocator slack, fragmentation).
uint64_t usable_device_bytes(uint64_t total_memory, uint64_t free_memory, uint64_t activation_bytes);

// The largest N whose even split of layers 0..N-1 over the devices fits every device's budget
// (the device of layer 0 also holds the embedding; when N is every layer, the last device also
// holds the head). 0 when not even one layer fits.
uint32_t auto_gpu_layers(const LayerCosts& costs, std::span<const uint64_t> budgets);

}  // namespace sluice
