#pragma once
// `sluice quantize`: a Hugging Face folder (F32/F16/BF16 safetensors) → an MLX affine-quantized folder,
// tensor by tensor. Source tensors are read from their memory mapping a block of rows at a time and
// released after use; the output is streamed through SafetensorsWriter. Memory stays at a few blocks
// plus one tensor's scales and biases, whatever the model's size.
//
// What is quantized: every floating-point `*.weight` tensor with two or more dimensions whose last
// dimension is a multiple of the group size — linear layers, the token embedding, an untied lm_head,
// stacked expert weights (and Gemma 4's experts.gate_up_proj / down_proj, stored without the suffix and
// written with it) — unless its name matches a --keep pattern. One-dimensional tensors (norm
// weights, linear biases) are copied as they are. MoE router weights (`*.mlp.gate.weight`) get 8 bits,
// as mlx-lm quantizes them, recorded as per-module overrides in the `quantization` block.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "quant/model_files.h"
#include "quant/safetensors_writer.h"
#include "util/result.h"

namespace sluice::quant {

struct QuantizeOptions {
  std::filesystem::path input, output;
  QuantForm form;
  std::vector<std::string> keep;  // ECMAScript regexes searched in tensor names: matches stay unquantized
  uint64_t max_shard_bytes = SafetensorsWriter::kDefaultShardBytes;
  bool quiet = false;
};

struct QuantizeSummary {
  int quantized = 0, kept = 0;
  uint64_t input_bytes = 0, output_bytes = 0;
  uint64_t quantized_params = 0;
};

// Whether a tensor is quantized, and with which form (the default, or 8 bits for an MoE router).
bool router_weight(const std::string& name);

Result<QuantizeSummary> quantize_model(const QuantizeOptions& options);

}  // namespace sluice::quant
