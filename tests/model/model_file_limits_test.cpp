// Hostile model files: deep or oversized JSON in a safetensors header, index or config.json, lying
// sizes, overflowing shapes and absurd config values are clear errors naming the file, never a
// crash (a deep header used to overflow the stack) or an allocation sized by the file.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/model_config.h"
#include "model/safetensors.h"
#include "model_test_files.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

std::string deep_json(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string open_error(const std::filesystem::path& path) {
  auto r = SafetensorsFile::open(path);
  EXPECT_FALSE(r.ok()) << "expected " << path << " to be rejected";
  return r.ok() ? std::string() : r.message();
}

std::string tensor(const std::string& name, const std::string& shape, const std::string& offsets,
                   const std::string& dtype = "F32") {
  return "\"" + name + R"(":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

// ---- safetensors header ----

TEST(SafetensorsLimits, DeepJsonHeaderIsAnErrorNotACrash) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  write_bytes(path, safetensors_bytes(deep_json(200000), 0));
  const auto msg = open_error(path);
  EXPECT_THAT(msg, HasSubstr(path.string()));
  EXPECT_THAT(msg, HasSubstr("max_depth"));
  // Deeper than a header ever is (three levels), even when far from the stack's reach.
  write_bytes(path, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[[[[1]]]],"data_offsets":[0,4]}})", 4));
  EXPECT_THAT(open_error(path), HasSubstr("max_depth"));
}

TEST(SafetensorsLimits, LyingLengthPrefixIsRefused) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  const std::string header = "{}";
  write_bytes(path, le64(UINT64_MAX) + header);  // would wrap 8 + length
  EXPECT_THAT(open_error(path), HasSubstr("limit"));
  write_bytes(path, le64(header.size() + 1) + header);  // one byte longer than the file
  EXPECT_THAT(open_error(path), HasSubstr("longer than the file"));
}

TEST(SafetensorsLimits, OffsetsPastTheEndAndOverlongSpansAreRefused) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  write_bytes(path, safetensors_bytes("{" + tensor("w", "[2]", "[8,16]") + "}", 12));
  EXPECT_THAT(open_error(path), HasSubstr("run past the data area (12 bytes)"));
  write_bytes(path, safetensors_bytes("{" + tensor("w", "[2]", "[18446744073709551608,18446744073709551615]") + "}", 8));
  EXPECT_THAT(open_error(path), HasSubstr("run past the data area"));
}

TEST(SafetensorsLimits, OverflowingShapesAreRefusedEvenWhenZeroSized) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  // 2^32 * 2^32 elements: the element count overflows 64 bits.
  write_bytes(path, safetensors_bytes("{" + tensor("w", "[4294967296,4294967296]", "[0,0]") + "}", 0));
  EXPECT_THAT(open_error(path), HasSubstr("overflows the byte count"));
  // A zero dimension makes the byte count 0, but the other dimensions' product still overflows.
  write_bytes(path, safetensors_bytes("{" + tensor("w", "[0,4294967296,4294967296]", "[0,0]") + "}", 0));
  EXPECT_THAT(open_error(path), HasSubstr("overflows the byte count"));
  // 2^61 F32 elements = 2^63 bytes: past int64.
  write_bytes(path, safetensors_bytes("{" + tensor("w", "[2305843009213693952]", "[0,0]") + "}", 0));
  EXPECT_THAT(open_error(path), HasSubstr("overflows the byte count"));
  // A plain zero-sized tensor is fine.
  write_bytes(path, safetensors_bytes("{" + tensor("w", "[0,4096]", "[0,0]") + "}", 0));
  auto ok = SafetensorsFile::open(path);
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->tensors().at("w").numel(), 0);
}

TEST(SafetensorsLimits, RankAndTensorCountAreBounded) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  write_bytes(path, safetensors_bytes("{" + tensor("w", "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]", "[0,4]") + "}", 4));
  EXPECT_THAT(open_error(path), HasSubstr("17 dimensions"));
  std::string header = "{";
  for (int i = 0; i < (1 << 20) + 2; ++i) header += (i ? ",\"t" : "\"t") + std::to_string(i) + "\":0";
  header += "}";
  write_bytes(path, safetensors_bytes(header, 0));
  EXPECT_THAT(open_error(path), HasSubstr("max_object_members"));
}

TEST(SafetensorsLimits, DeepIndexIsAnError) {
  TempDir dir;
  write_bytes(dir.path() / "model.safetensors.index.json", deep_json(200000));
  auto set = SafetensorsSet::open_dir(dir.path());
  ASSERT_FALSE(set.ok());
  EXPECT_THAT(set.message(), HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(set.message(), HasSubstr("max_depth"));
}

TEST(SafetensorsLimits, IndexWithManyShardNamesIsCheckedShardByName) {
  // 100 000 tensors each naming its own (missing) shard: a linear scan per tensor took minutes.
  TempDir dir;
  std::string index = R"({"weight_map":{)";
  for (int i = 0; i < 100000; ++i)
    index += (i ? ",\"t" : "\"t") + std::to_string(i) + "\":\"s" + std::to_string(i) + ".safetensors\"";
  index += "}}";
  write_bytes(dir.path() / "model.safetensors.index.json", index);
  // No clock here (speed belongs to benchmarks): a scan per tensor would run past the test's timeout.
  auto set = SafetensorsSet::open_dir(dir.path());
  ASSERT_FALSE(set.ok());
  EXPECT_THAT(set.message(), HasSubstr("shard 's0.safetensors' is missing"));
}

// ---- config.json ----

TEST(ConfigLimits, DeepConfigIsAnErrorNotACrash) {
  TempDir dir;
  auto c = load_config(dir, R"({"model_type":"llama","x":)" + deep_json(200000) + "}");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.message(), HasSubstr("config.json"));
  EXPECT_THAT(c.message(), HasSubstr("max_depth"));
}

TEST(ConfigLimits, AbsurdSizesAreClearErrors) {
  TempDir dir;
  struct Case {
    std::string field, value, expected;
  };
  const Case cases[] = {
      {"hidden_size", "1099511627776", "'hidden_size' must be a positive integer at most 131072"},
      {"hidden_size", "-64", "'hidden_size' must be a positive integer"},
      {"vocab_size", "2147483647", "'vocab_size' must be a positive integer at most 16777216"},
      {"num_hidden_layers", "2147483647", "'num_hidden_layers' must be a positive integer at most 4096"},
      {"num_hidden_layers", "0", "'num_hidden_layers' must be a positive integer"},
      {"intermediate_size", "4294967296", "'intermediate_size' must be a positive integer at most"},
      {"num_attention_heads", "100000", "'num_attention_heads' must be a positive integer at most 4096"},
      {"num_key_value_heads", "8", "'num_key_value_heads' must be between 1 and num_attention_heads (4)"},
      {"num_key_value_heads", "-2", "'num_key_value_heads' must be between 1"},
      {"head_dim", "1048576", "head_dim must be positive and even"},
      {"max_position_embeddings", "4294967296", "'max_position_embeddings' must be a positive integer at most"},
      {"bos_token_id", "-1", "'bos_token_id' out of range"},
      {"rope_theta", "0.5", "rope_theta must be greater than 1"},
  };
  for (const auto& k : cases) {
    std::string config = config_json("llama");
    const std::string key = "\"" + k.field + "\":";
    if (auto at = config.find(key); at != std::string::npos)
      config.replace(at + key.size(), config.find_first_of(",}", at) - at - key.size(), k.value);
    else
      config.insert(config.size() - 1, "," + key + k.value);
    auto c = load_config(dir, config);
    ASSERT_FALSE(c.ok()) << config;
    EXPECT_THAT(c.message(), HasSubstr("config.json")) << config;
    EXPECT_THAT(c.message(), HasSubstr(k.expected)) << config;
  }
}

TEST(ConfigLimits, RopeAndMoeValuesOutOfRangeAreClearErrors) {
  TempDir dir;
  auto original = load_config(
      dir, config_json("llama", R"(,"rope_scaling":{"rope_type":"yarn","factor":4,"original_max_position_embeddings":4294967297})"));
  ASSERT_FALSE(original.ok());
  EXPECT_THAT(original.message(), HasSubstr("original_max_position_embeddings must be a positive integer at most"));

  auto experts = load_config(dir, config_json("mixtral", R"(,"num_local_experts":1000000000,"num_experts_per_tok":2)"));
  ASSERT_FALSE(experts.ok());
  EXPECT_THAT(experts.message(), HasSubstr("num_experts (or num_local_experts) in 1..4096"));

  auto ffn = load_config(dir, config_json("qwen3_moe", R"(,"num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":-5)"));
  ASSERT_FALSE(ffn.ok());
  EXPECT_THAT(ffn.message(), HasSubstr("'moe_intermediate_size' must be a positive integer"));
}

TEST(ConfigLimits, LongListsAreBoundedOrLinear) {
  TempDir dir;
  std::string eos = R"(,"eos_token_id":[)";
  for (int i = 0; i < 100000; ++i) eos += (i ? "," : "") + std::to_string(i);
  eos += "]";
  auto c = load_config(dir, config_json("llama", eos));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.message(), HasSubstr("'eos_token_id' lists 100000 ids, more than 1024"));

  // mlp_only_layers was searched once per layer; now it is indexed.
  std::string mlp_only = R"(,"num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":32,"mlp_only_layers":[)";
  for (int i = 0; i < 1000000; ++i) mlp_only += (i ? "," : "") + std::to_string(i % 2 == 0 ? 1 : 1000 + i);
  mlp_only += "]";
  auto moe = load_config(dir, config_json("qwen3_moe", mlp_only));
  ASSERT_TRUE(moe.ok()) << moe.message();
  EXPECT_EQ(moe->moe.sparse_layer, (std::vector<bool>{true, false, true, true}));
}

}  // namespace
}  // namespace sluice
