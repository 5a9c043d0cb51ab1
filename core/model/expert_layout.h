#pragma once
// Where each Mixture-of-Experts expert's weights lie in the model files, in either layout:
//  - Hugging Face, one tensor per expert: `mlp.experts.{e}.{gate,up,down}_proj` (qwen3_moe, olmoe),
//    `block_sparse_moe.experts.{e}.{w1,w3,w2}` (mixtral);
//  - MLX, stacked: `mlp.switch_mlp.{gate,up,down}_proj` of shape [E, ...], expert e at slice e;
//  - gpt-oss, fused and input-major: `mlp.experts.gate_up_proj` [E, H, 2F] (gate and up interleaved
//    along the last dimension), `mlp.experts.down_proj` [E, F, H], and their biases
//    `gate_up_proj_bias` [E, 2F], `down_proj_bias` [E, H]; or, as OpenAI's checkpoints ship them,
//    the two products in MXFP4: `{gate_up,down}_proj_blocks` U8 [E, out, in / 32, 16] (two 4-bit
//    codes a byte, low nibble first) and `_scales` U8 [E, out, in / 32] (a power of two, biased by
//    127), output-major — gate_up's rows interleaved (row 2j gate's j, 2j + 1 up's);
// quantized (`.scales`/`.biases` beside `.weight`) or not. An expert is described as parts (byte
// ranges) — weight, then scales and biases when quantized, for gate, up and down in that order; for
// the fused form gate_up, down, gate_up's bias and down's bias — which is what the expert store reads
// and hands back. The fused form is not what MATMUL takes ([out, in]): core/model/expert_arrange.h
// rearranges each expert as it is used.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/safetensors.h"
#include "sluice/backend.h"
#include "sluice/expertstore.h"
#include "util/result.h"

namespace sluice {

struct ExpertProjection {
  uint32_t rows = 0, cols = 0;  // logical [out, in]
  uint32_t dtype = SL_DTYPE_F32;  // of the values, or U32 when quantized
  uint32_t bits = 0, group_size = 0, scale_dtype = SL_DTYPE_BF16;
  bool quantized() const { return bits != 0; }
};

class ExpertLayout {
 public:
  enum Projection { kGate = 0, kUp = 1, kDown = 2 };
  enum class Form {
    kSeparate,         // one [out, in] matrix per projection, as MATMUL takes it
    kFusedInputMajor,  // gpt-oss: gate_up [H, 2F] interleaved, down [F, H], biases; rearranged per use
    kFusedMxfp4,       // gpt-oss in MXFP4: blocks and scales of gate_up and down, biases; kept MXFP4 or decoded per use
  };
  // The fused forms' parts.
  enum FusedPart { kGateUp = 0, kDownPart = 1, kGateUpBias = 2, kDownBias = 3 };
  enum Mxfp4Part { kGateUpBlocks = 0, kGateUpScales = 1, kDownBlocks = 2, kDownScales = 3, kMxGateUpBias = 4, kMxDownBias = 5 };

  static Result<ExpertLayout> find(const ModelConfig& config, const SafetensorsSet& tensors);

  uint32_t n_moe_layers() const { return static_cast<uint32_t>(model_layer_.size()); }
  uint32_t n_experts() const { return n_experts_; }
  uint32_t n_parts() const { return n_parts_; }  // 3, or 9 when quantized; fused: 4, 6 in MXFP4
  bool quantized() const { return n_parts_ == 9; }
  Form form() const { return form_; }
  // The fused form's biases' dtype (its weights' is the projections').
  uint32_t bias_dtype() const { return bias_dtype_; }
  int model_layer(uint32_t moe_layer) const { return model_layer_[moe_layer]; }
  // The MoE layer index of a model layer, or -1 for a dense one.
  // Each projection as the backend multiplies it ([out, in]; in the fused form, once rearranged).
  int moe_layer_of(int model_layer) const;
  const ExpertProjection& projection(uint32_t moe_layer, Projection p) const { return projections_[moe_layer][p]; }
  const sl_expert_part& part(uint32_t moe_layer, uint32_t expert, uint32_t part) const {
    return parts_[(static_cast<std::size_t>(moe_layer) * n_experts_ + expert) * n_parts_ + part];
  }
  const std::vector<sl_expert_part>& parts() const { return parts_; }
  uint64_t total_bytes() const;           // every expert's bytes
  uint64_t expert_bytes(uint32_t moe_layer) const;  // one expert of that layer

 private:
  static Result<ExpertLayout> find_fused(const ModelConfig& config, const SafetensorsSet& tensors);
  static Status add_mxfp4_layer(ExpertLayout& layout, const ModelConfig& config, const SafetensorsSet& tensors, int layer, bool first);

  uint32_t n_experts_ = 0, n_parts_ = 3;
  Form form_ = Form::kSeparate;
  uint32_t bias_dtype_ = SL_DTYPE_F32;
  std::vector<int> model_layer_;
  std::vector<int> moe_index_;  // per model layer
  std::vector<std::array<ExpertProjection, 3>> projections_;
  std::vector<sl_expert_part> parts_;
};

}  // namespace sluice
