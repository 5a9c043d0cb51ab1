#pragma once
// Repacking a Mixture-of-Experts model so that each expert is one contiguous byte range: every
// tensor that is not an expert's is copied as it is; each expert's gate, up and down projections
// (weights, and scales and biases when quantized) are written back to back under per-expert names
// (`mlp.experts.{e}.{gate,up,down}_proj`, mixtral's `block_sparse_moe.experts.{e}.{w1,w3,w2}`). A
// streaming expert store then fetches an expert with one read instead of one per tensor slice (MLX's
// stacked `switch_mlp` layout keeps each projection of all experts together).
#include <filesystem>

#include "util/result.h"

namespace sluice::quant {

struct RepackStats {
  uint64_t experts = 0;
  uint64_t bytes = 0;
  uint64_t tensors = 0;
};

Result<RepackStats> repack_experts(const std::filesystem::path& in, const std::filesystem::path& out, bool quiet);

}  // namespace sluice::quant
