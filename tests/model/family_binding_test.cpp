// How families bind checkpoints: fused tensors as row ranges (Phi-3's qkv_proj and gate_up_proj),
// quantized or not; which family builds which architecture.
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/families/family.h"

namespace sluice {
namespace {

// A checkpoint of one tensor per name, each answered with a fixed weight (its buffer offsets chosen
// so a slice shows how far it moved).
class FixedWeights final : public families::WeightSource {
 public:
  std::map<std::string, sl_weight> weights;
  std::map<std::string, std::vector<float>> small;  // values read on the host (attention sinks)
  bool has(const std::string& name) const override { return weights.count(name) != 0 || small.count(name) != 0; }
  Result<std::vector<float>> values(const std::string& name, std::vector<int64_t> shape) override {
    auto it = small.find(name);
    if (it == small.end()) return make_error("missing " + name);
    if (shape.size() != 1 || static_cast<std::size_t>(shape[0]) != it->second.size()) return make_error("shape of " + name);
    return it->second;
  }
  Status bind(sl_weight& dst, const std::string& name, std::vector<int64_t>) override {
    auto it = weights.find(name);
    if (it == weights.end()) return make_error("missing " + name);
    dst = it->second;
    return {};
  }
};

sl_weight weight(uint32_t rows, uint32_t cols, uint32_t dtype) {
  sl_weight w{};
  w.struct_size = sizeof(w);
  w.rows = rows;
  w.cols = cols;
  w.dtype = dtype;
  w.offset = 1000;
  return w;
}

TEST(WeightRows, UnquantizedRowsMoveByWholeRowsOfTheirDtype) {
  FixedWeights src;
  src.weights["bf16"] = weight(96, 64, SL_DTYPE_BF16);
  src.weights["f32"] = weight(96, 64, SL_DTYPE_F32);
  sl_weight k{};
  ASSERT_TRUE(src.bind_rows(k, "bf16", {96, 64}, 64, 16));
  EXPECT_EQ(k.rows, 16u);
  EXPECT_EQ(k.cols, 64u);
  EXPECT_EQ(k.offset, 1000u + 64u * 64u * 2u);
  ASSERT_TRUE(src.bind_rows(k, "f32", {96, 64}, 80, 16));
  EXPECT_EQ(k.offset, 1000u + 80u * 64u * 4u);
}

TEST(WeightRows, QuantizedRowsMoveWordsScalesAndBiasesTogether) {
  FixedWeights src;
  sl_weight q = weight(96, 256, SL_DTYPE_U32);
  q.bits = 4;
  q.group_size = 64;
  q.scale_dtype = SL_DTYPE_BF16;
  q.scales_offset = 50;
  q.biases_offset = 70;
  src.weights["q4"] = q;
  sl_weight v{};
  ASSERT_TRUE(src.bind_rows(v, "q4", {96, 256}, 80, 16));
  EXPECT_EQ(v.rows, 16u);
  EXPECT_EQ(v.bits, 4u);
  EXPECT_EQ(v.offset, 1000u + 80u * (256u * 4u / 32u) * 4u);  // 32 words a row
  EXPECT_EQ(v.scales_offset, 50u + 80u * 4u * 2u);               // 4 groups a row, bf16
  EXPECT_EQ(v.biases_offset, 70u + 80u * 4u * 2u);
}

TEST(WeightRows, RowsPastTheTensorAreAnErrorNamingIt) {
  FixedWeights src;
  src.weights["w"] = weight(96, 64, SL_DTYPE_F16);
  sl_weight w{};
  auto s = src.bind_rows(w, "w", {96, 64}, 90, 16);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("'w'"), std::string::npos) << s.message();
}

TEST(FamilyFor, EachSupportedArchitectureHasABuilder) {
  for (const std::string& arch : ModelConfig::supported_architectures()) {
    ModelConfig c;
    c.architecture = arch;
    EXPECT_NE(families::family_for(c), nullptr) << arch;
  }
  ModelConfig gemma;
  gemma.architecture = "gemma3_text";
  EXPECT_STREQ(families::family_for(gemma)->name(), "gemma");
  ModelConfig phi;
  phi.architecture = "phi3";
  EXPECT_STREQ(families::family_for(phi)->name(), "phi3");
  ModelConfig oss;
  oss.architecture = "gpt_oss";
  EXPECT_STREQ(families::family_for(oss)->name(), "gpt_oss");
  ModelConfig qwen;
  qwen.architecture = "qwen3_5_moe_text";
  EXPECT_STREQ(families::family_for(qwen)->name(), "qwen3_5");
  EXPECT_TRUE(families::family_for(qwen)->builds_linear_attention());
  EXPECT_FALSE(families::family_for(phi)->builds_linear_attention());
}

// A gpt-oss layer's checkpoint: llama's attention and norms with every bias, and the sinks.
FixedWeights gpt_oss_layer(const ModelConfig& c) {
  FixedWeights src;
  const std::string p = "model.layers.0.";
  for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                        "self_attn.v_proj.weight", "self_attn.o_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.bias",
                        "self_attn.v_proj.bias", "self_attn.o_proj.bias"})
    src.weights[p + n] = weight(1, 64, SL_DTYPE_BF16);
  src.small[p + "self_attn.sinks"] = std::vector<float>(static_cast<std::size_t>(c.num_heads), 0.5f);
  return src;
}

ModelConfig gpt_oss_config() {
  ModelConfig c;
  c.architecture = "gpt_oss";
  c.hidden_size = 64;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.attention_bias = c.attention_out_bias = true;
  return c;
}

TEST(GptOssFamily, BindsEachHeadsSinkAndTheRouterModule) {
  const ModelConfig c = gpt_oss_config();
  FixedWeights src = gpt_oss_layer(c);
  LayerWeights w;
  ASSERT_TRUE(families::family_for(c)->bind_layer(src, c, 0, true, w));
  EXPECT_EQ(w.sink_values, std::vector<float>(4, 0.5f));
  EXPECT_TRUE(w.has_q_bias && w.has_k_bias && w.has_v_bias && w.has_o_bias);
  EXPECT_EQ(families::family_for(c)->router_module(c, 3), "model.layers.3.mlp.router");
}

TEST(GptOssFamily, AMissingBiasOrSinkOrADenseLayerIsAnErrorNamingIt) {
  const ModelConfig c = gpt_oss_config();
  const families::Family& f = *families::family_for(c);
  LayerWeights w;
  FixedWeights no_bias = gpt_oss_layer(c);
  no_bias.weights.erase("model.layers.0.self_attn.o_proj.bias");
  auto s = f.bind_layer(no_bias, c, 0, true, w);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("self_attn.o_proj.bias"), std::string::npos) << s.message();
  FixedWeights no_sinks = gpt_oss_layer(c);
  no_sinks.small.clear();
  s = f.bind_layer(no_sinks, c, 0, true, w);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("self_attn.sinks"), std::string::npos) << s.message();
  FixedWeights whole = gpt_oss_layer(c);
  s = f.bind_layer(whole, c, 0, false, w);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("Mixture-of-Experts"), std::string::npos) << s.message();
}

// A Qwen3.5 linear-attention layer's tensors by their checkpoint names: nn.Conv1d's [C, 1, K] taps
// bound as a [C, K] matrix; a missing tensor is an error naming it; a full-attention layer binds
// self_attn instead, and a MoE layer its shared expert.
TEST(Qwen3_5Binding, LinearLayersBindTheirTapsAsRowsAndNameAMissingTensor) {
  ModelConfig c;
  c.architecture = "qwen3_5_moe_text";
  c.num_layers = 2;
  c.linear = {4, 2, 4, 16, 16};
  c.layer_types = {LayerType::kLinearAttention, LayerType::kFullAttention};
  c.moe.n_experts = 8;
  c.moe.shared_intermediate = 32;
  c.moe.shared_gated = true;
  const families::Family* family = families::family_for(c);
  ASSERT_NE(family, nullptr);
  FixedWeights src;
  for (const char* name : {"input_layernorm.weight", "post_attention_layernorm.weight", "linear_attn.in_proj_qkv.weight",
                           "linear_attn.in_proj_z.weight", "linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight",
                           "linear_attn.dt_bias", "linear_attn.norm.weight", "linear_attn.out_proj.weight",
                           "mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight", "mlp.shared_expert.down_proj.weight",
                           "mlp.shared_expert_gate.weight"})
    src.weights[std::string("model.layers.0.") + name] = weight(1, 1, SL_DTYPE_BF16);
  src.weights["model.layers.0.linear_attn.conv1d.weight"] = weight(1, 4, SL_DTYPE_BF16);  // as a 3-D shape binds: rows 1
  LayerWeights w;
  auto missing = family->bind_layer(src, c, 0, true, w);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.message().find("linear_attn.A_log"), std::string::npos) << missing.message();
  src.weights["model.layers.0.linear_attn.A_log"] = weight(1, 4, SL_DTYPE_BF16);
  ASSERT_TRUE(family->bind_layer(src, c, 0, true, w));
  EXPECT_TRUE(w.linear);
  EXPECT_EQ(w.lin_conv.rows, uint32_t(c.linear.conv_dim()));
  EXPECT_EQ(w.lin_conv.cols, 4u);
  EXPECT_TRUE(w.has_shared_experts);
  LayerWeights full;
  auto attention = family->bind_layer(src, c, 1, true, full);
  ASSERT_FALSE(attention);
  EXPECT_NE(attention.message().find("model.layers.1."), std::string::npos) << attention.message();
}

}  // namespace
}  // namespace sluice
