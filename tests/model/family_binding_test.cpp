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
  bool has(const std::string& name) const override { return weights.count(name) != 0; }
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
}

}  // namespace
}  // namespace sluice
