// Model loading: safetensors validation (every broken file is built byte by byte in a temp dir),
// the sharded reference model, the zoo configs, and RoPE inverse-frequency rules.
#include <cmath>
#include <cstring>
#include <fstream>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "model/model_config.h"
#include "model/safetensors.h"
#include "model_test_files.h"
#include "reference.h"
#include "util/file_io.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string open_error(const fs::path& path) {
  auto r = SafetensorsFile::open(path);
  EXPECT_FALSE(r.ok()) << "expected " << path << " to be rejected";
  return r.ok() ? std::string() : r.message();
}

// ---- safetensors: rejections ----

TEST(SafetensorsFile, RejectsFileShorterThanLengthField) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  write_bytes(path, std::string("\x10\x00\x00\x00", 4));
  const auto msg = open_error(path);
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST(SafetensorsFile, RejectsHeaderLongerThanFile) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  write_bytes(path, le64(1000) + "{\"a\":1}");
  const auto msg = open_error(path);
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
  EXPECT_THAT(msg, HasSubstr("header length 1000 is longer than the file"));
}

TEST(SafetensorsFile, RejectsAbsurdHeaderLength) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  write_bytes(path, le64(1ull << 40) + "{}");
  EXPECT_THAT(open_error(path), HasSubstr("exceeds"));
}

TEST(SafetensorsFile, RejectsOverlappingTensors) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  write_bytes(path, safetensors_bytes(R"({"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]},)"
                                      R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                                      24));
  const auto msg = open_error(path);
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
  EXPECT_THAT(msg, HasSubstr("tensor 'b'"));
  EXPECT_THAT(msg, HasSubstr("overlaps tensor 'a'"));
}

TEST(SafetensorsFile, RejectsTensorNestedInsideAnother) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  // c lies inside a, after b which ends earlier: the check must compare against the furthest end so far.
  write_bytes(path, safetensors_bytes(R"({"a":{"dtype":"U8","shape":[32],"data_offsets":[0,32]},)"
                                      R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},)"
                                      R"("c":{"dtype":"U8","shape":[4],"data_offsets":[12,16]}})",
                                      32));
  EXPECT_THAT(open_error(path), HasSubstr("overlaps tensor 'a'"));
}

TEST(SafetensorsFile, RejectsShapeDtypeByteMismatch) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  write_bytes(path, safetensors_bytes(R"({"x.weight":{"dtype":"F32","shape":[4,4],"data_offsets":[0,60]}})", 64));
  EXPECT_THAT(open_error(path),
              HasSubstr("model.safetensors: tensor 'x.weight': shape [4, 4] × F32 = 64 bytes but data_offsets span 60"));
}

TEST(SafetensorsFile, RejectsOffsetsPastDataArea) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  write_bytes(path, safetensors_bytes(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12));
  const auto msg = open_error(path);
  EXPECT_THAT(msg, HasSubstr("tensor 'x'"));
  EXPECT_THAT(msg, HasSubstr("past the data area"));
}

TEST(SafetensorsFile, RejectsEndBeforeBegin) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  write_bytes(path, safetensors_bytes(R"({"x":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", 12));
  EXPECT_THAT(open_error(path), HasSubstr("end 4 < begin 8"));
}

TEST(SafetensorsFile, RejectsNegativeAndOverflowingShapes) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  write_bytes(path, safetensors_bytes(R"({"neg":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}})", 16));
  EXPECT_THAT(open_error(path), HasSubstr("tensor 'neg': negative dimension"));
  write_bytes(path, safetensors_bytes(
                        R"({"big":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", 16));
  EXPECT_THAT(open_error(path), HasSubstr("tensor 'big': shape [4294967296, 4294967296] overflows"));
}

TEST(SafetensorsFile, RejectsMalformedHeaderJson) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  write_bytes(path, safetensors_bytes(R"({"x":{"dtype":"F32",)", 0));
  const auto msg = open_error(path);
  EXPECT_THAT(msg, HasSubstr("model.safetensors header"));
  EXPECT_THAT(msg, HasSubstr("malformed JSON"));
}

TEST(SafetensorsFile, RejectsHeaderThatIsNotAnObjectOrHasWrongFieldTypes) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  write_bytes(path, safetensors_bytes("[1,2]", 0));
  EXPECT_THAT(open_error(path), HasSubstr("header is not a JSON object"));
  write_bytes(path, safetensors_bytes(R"({"x":{"dtype":"F32","shape":"4","data_offsets":[0,16]}})", 16));
  EXPECT_THAT(open_error(path), HasSubstr("tensor 'x': 'shape' missing or not an array"));
  write_bytes(path, safetensors_bytes(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", 16));
  EXPECT_THAT(open_error(path), HasSubstr("tensor 'x': 'data_offsets' must be"));
  write_bytes(path, safetensors_bytes(R"({"__metadata__":{"format":1}})", 0));
  EXPECT_THAT(open_error(path), HasSubstr("__metadata__"));
}

TEST(SafetensorsFile, RejectsUnsupportedDtypeNamingTensorAndDtype) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  for (const char* dtype : {"F64", "I64", "F8_E4M3"}) {
    write_bytes(path, safetensors_bytes(std::string(R"({"lm_head.weight":{"dtype":")") + dtype +
                                            R"(","shape":[2],"data_offsets":[0,16]}})",
                                        16));
    const auto msg = open_error(path);
    EXPECT_THAT(msg, HasSubstr("tensor 'lm_head.weight'"));
    EXPECT_THAT(msg, HasSubstr(std::string("unsupported dtype '") + dtype + "'"));
  }
}

// ---- safetensors: a valid hand-built file ----

TEST(SafetensorsFile, MapsTensorsInPlaceWithAbsoluteOffsets) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[4,16]},)"
      R"("q":{"dtype":"U32","shape":[1],"data_offsets":[0,4]},"e":{"dtype":"I8","shape":[0],"data_offsets":[16,16]}}  )";
  write_bytes(path, safetensors_bytes(header, 16));
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.message();
  ASSERT_EQ(file->tensors().size(), 3u);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  const auto& w = file->tensors().at("w");
  EXPECT_EQ(w.dtype, DType::kBF16);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.numel(), 6);
  EXPECT_EQ(w.bytes, 12u);
  EXPECT_EQ(w.file_offset, 8 + header.size() + 4);
  EXPECT_EQ(w.data, file->mapping().data() + w.file_offset);
  EXPECT_EQ(static_cast<int>(w.data[0]), 4);  // data byte i holds i
  EXPECT_EQ(file->tensors().at("e").bytes, 0u);
}

// ---- SafetensorsSet: directories and shards ----

const std::string kShardA = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
const std::string kShardB = R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";

TEST(SafetensorsSet, RejectsIndexNamingMissingShard) {
  TempDir dir;
  write_bytes(dir.path() / "model-1.safetensors", safetensors_bytes(kShardA, 8));
  write_bytes(dir.path() / "model.safetensors.index.json",
              R"({"weight_map":{"a":"model-1.safetensors","b":"model-2.safetensors"}})");
  auto set = SafetensorsSet::open_dir(dir.path());
  ASSERT_FALSE(set.ok());
  EXPECT_THAT(set.message(), HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(set.message(), HasSubstr("shard 'model-2.safetensors' is missing"));
}

TEST(SafetensorsSet, RejectsShardWithoutTheTensorsTheIndexAssigns) {
  TempDir dir;
  write_bytes(dir.path() / "model-1.safetensors", safetensors_bytes(kShardA, 8));
  write_bytes(dir.path() / "model-2.safetensors", safetensors_bytes(kShardB, 4));
  write_bytes(dir.path() / "model.safetensors.index.json",
              R"({"weight_map":{"a":"model-2.safetensors","b":"model-2.safetensors"}})");
  auto set = SafetensorsSet::open_dir(dir.path());
  ASSERT_FALSE(set.ok());
  EXPECT_THAT(set.message(), HasSubstr("tensor 'a' is assigned to shard 'model-2.safetensors'"));
}

TEST(SafetensorsSet, RejectsDuplicateTensorAcrossShards) {
  TempDir dir;
  write_bytes(dir.path() / "model-1.safetensors", safetensors_bytes(kShardA, 8));
  // Shard 2 holds the tensor the index gives it, and a stray second copy of 'a'.
  write_bytes(dir.path() / "model-2.safetensors",
              safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("x":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                12));
  write_bytes(dir.path() / "model.safetensors.index.json",
              R"({"weight_map":{"a":"model-1.safetensors","x":"model-2.safetensors"}})");
  auto set = SafetensorsSet::open_dir(dir.path());
  ASSERT_FALSE(set.ok());
  EXPECT_THAT(set.message(), HasSubstr("model-2.safetensors"));
  EXPECT_THAT(set.message(), HasSubstr("duplicate"));
}

TEST(SafetensorsSet, RejectsMalformedIndexAndEmptyDirectory) {
  TempDir dir;
  auto empty = SafetensorsSet::open_dir(dir.path());
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.message(), HasSubstr("no model.safetensors"));
  write_bytes(dir.path() / "model.safetensors.index.json", R"({"weight_map": {"a": )");
  auto bad = SafetensorsSet::open_dir(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("model.safetensors.index.json: malformed JSON"));
}

TEST(SafetensorsSet, ShardedSetRecordsFileIndexAndOffsets) {
  TempDir dir;
  write_bytes(dir.path() / "model-1.safetensors", safetensors_bytes(kShardA, 8));
  write_bytes(dir.path() / "model-2.safetensors", safetensors_bytes(kShardB, 4));
  write_bytes(dir.path() / "model.safetensors.index.json",
              R"({"metadata":{},"weight_map":{"a":"model-1.safetensors","b":"model-2.safetensors"}})");
  auto set = SafetensorsSet::open_dir(dir.path());
  ASSERT_TRUE(set.ok()) << set.message();
  ASSERT_EQ(set->files().size(), 2u);
  const auto* b = set->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(set->files()[b->file_index].filename(), "model-2.safetensors");
  EXPECT_EQ(b->file_offset, 8 + kShardB.size());
  EXPECT_EQ(set->total_bytes(), 12u);
  EXPECT_EQ(set->find("nope"), nullptr);
}

// ---- the reference models ----

// Reads the bytes at (file, offset) independently of the mapping, to pin file_index/file_offset.
std::string read_at(const fs::path& path, uint64_t offset, std::size_t n) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  return s;
}

TEST(ReferenceModels, TinyCodeQwen2ShardsLoadCompletely) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/model.safetensors.index.json");
  const auto dir = test::reference_path("models/tiny-code-qwen2");
  auto set = SafetensorsSet::open_dir(dir);
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->files().size(), 2u);

  rapidjson::Document index;
  auto text = read_text_file(dir / "model.safetensors.index.json");
  ASSERT_TRUE(text.ok());
  index.Parse(text->c_str());
  const auto& weight_map = index["weight_map"];
  EXPECT_EQ(set->tensors().size(), weight_map.MemberCount());
  for (const auto& m : weight_map.GetObject()) {
    const auto* t = set->find(m.name.GetString());
    ASSERT_NE(t, nullptr) << m.name.GetString();
    EXPECT_EQ(set->files()[t->file_index].filename().string(), m.value.GetString());
    EXPECT_EQ(t->dtype, DType::kBF16);
    const std::size_t n = std::min<std::size_t>(t->bytes, 64);
    EXPECT_EQ(read_at(set->files()[t->file_index], t->file_offset, n),
              std::string(reinterpret_cast<const char*>(t->data), n))
        << m.name.GetString();
  }
  EXPECT_EQ(set->total_bytes(), index["metadata"]["total_size"].GetUint64());
  const auto* embed = set->find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{8192, 384}));
  EXPECT_NE(set->find("model.layers.3.self_attn.q_proj.bias"), nullptr);
}

TEST(ReferenceModels, TinyCodeQwen2ConfigParses) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/config.json");
  auto c = ModelConfig::load(test::reference_path("models/tiny-code-qwen2"));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->architecture, "qwen2");
  EXPECT_EQ(c->hidden_size, 384);
  EXPECT_EQ(c->num_layers, 4);
  EXPECT_EQ(c->num_heads, 6);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->vocab_size, 8192);
  EXPECT_EQ(c->intermediate_size, 1024);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->attention_out_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_DOUBLE_EQ(c->rope.theta, 10000.0);
  EXPECT_EQ(c->rope.scaling, RopeScaling::kNone);
  EXPECT_EQ(c->layer_window, (std::vector<int>(4, 0)));
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{2}));
  EXPECT_FALSE(c->bos_token_id.has_value());
  EXPECT_EQ(c->quantization.bits, 0);
}

TEST(ReferenceModels, QuantizedConfigReadsTopLevelBitsAndGroup) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2-4bit/config.json");
  auto c = ModelConfig::load(test::reference_path("models/tiny-code-qwen2-4bit"));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->quantization.bits, 4);
  EXPECT_EQ(c->quantization.group_size, 64);
  auto set = SafetensorsSet::open_dir(test::reference_path("models/tiny-code-qwen2-4bit"));
  ASSERT_TRUE(set.ok()) << set.message();
  bool has_u32 = false;
  for (const auto& [_, t] : set->tensors()) has_u32 |= t.dtype == DType::kU32;
  EXPECT_TRUE(has_u32);
}

class ZooModel : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooModel, WeightsLoadAndConfigMatchesConfigJson) {
  const std::string rel = "models/zoo/" + GetParam();
  SLUICE_REQUIRE_REFERENCE(rel + "/config.json");
  const auto dir = test::reference_path(rel);
  auto set = SafetensorsSet::open_dir(dir);
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_FALSE(set->tensors().empty());

  auto c = ModelConfig::load(dir);
  ASSERT_TRUE(c.ok()) << c.message();
  auto text = read_text_file(dir / "config.json");
  ASSERT_TRUE(text.ok());
  rapidjson::Document j;
  j.Parse(text->c_str());
  ASSERT_FALSE(j.HasParseError());
  EXPECT_EQ(c->architecture, j["model_type"].GetString());
  EXPECT_EQ(c->vocab_size, j["vocab_size"].GetInt());
  EXPECT_EQ(c->hidden_size, j["hidden_size"].GetInt());
  EXPECT_EQ(c->intermediate_size, j["intermediate_size"].GetInt());
  EXPECT_EQ(c->num_layers, j["num_hidden_layers"].GetInt());
  EXPECT_EQ(c->num_heads, j["num_attention_heads"].GetInt());
  EXPECT_EQ(c->num_kv_heads, j["num_key_value_heads"].GetInt());
  const int head_dim = j.HasMember("head_dim") && j["head_dim"].IsInt()
                           ? j["head_dim"].GetInt()
                           : j["hidden_size"].GetInt() / j["num_attention_heads"].GetInt();
  EXPECT_EQ(c->head_dim, head_dim);
  EXPECT_EQ(c->max_position_embeddings, j["max_position_embeddings"].GetInt());
  EXPECT_FLOAT_EQ(c->norm_eps, static_cast<float>(j["rms_norm_eps"].GetDouble()));
  EXPECT_EQ(c->tie_word_embeddings, j["tie_word_embeddings"].GetBool());
  EXPECT_DOUBLE_EQ(c->rope.theta, j["rope_parameters"]["rope_theta"].GetDouble());
  EXPECT_EQ(c->rope.scaling, RopeScaling::kNone);
  EXPECT_EQ(c->hidden_act, j["hidden_act"].GetString());
  EXPECT_EQ(c->layer_window, std::vector<int>(c->num_layers, 0));  // all have sliding_window null / disabled
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{j["eos_token_id"].GetInt()}));
  EXPECT_EQ(c->qk_norm, GetParam() == "qwen3");
  EXPECT_EQ(c->attention_bias, GetParam() == "qwen2");

  // The weights agree with the config where the config says so.
  const auto* q = set->find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{c->num_heads * c->head_dim, c->hidden_size}));
  EXPECT_EQ(set->find("lm_head.weight") == nullptr, c->tie_word_embeddings);
  EXPECT_EQ(set->find("model.layers.0.self_attn.q_proj.bias") != nullptr, c->attention_bias);
  EXPECT_EQ(set->find("model.layers.0.self_attn.q_norm.weight") != nullptr, c->qk_norm);
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooModel, ::testing::Values("llama", "qwen2", "qwen3", "mistral"));

// ---- config: rejections and rules, from hand-written config.json files ----

TEST(ModelConfig, RejectsUnknownArchitectureListingSupported) {
  TempDir dir;
  auto c = load_config(dir, config_json("gpt_neox"));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.message(), HasSubstr("config.json"));
  EXPECT_THAT(c.message(), HasSubstr("unsupported architecture (model_type) 'gpt_neox'"));
  for (const auto& a : ModelConfig::supported_architectures()) EXPECT_THAT(c.message(), HasSubstr(a));
}

TEST(ModelConfig, RejectsMalformedConfigJson) {
  TempDir dir;
  auto c = load_config(dir, R"({"model_type": "llama", "hidden_size": 64,,})");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.message(), HasSubstr("config.json"));
  EXPECT_THAT(c.message(), HasSubstr("malformed JSON"));
}

TEST(ModelConfig, RejectsWrongTypesAndBadDimensions) {
  TempDir dir;
  auto wrong_type = load_config(dir, config_json("llama", R"(,"rms_norm_eps":"1e-6")"));
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_THAT(wrong_type.message(), HasSubstr("'rms_norm_eps' must be a number"));
  auto indivisible = load_config(dir, config_json("llama").replace(config_json("llama").find("\"num_key_value_heads\":2"),
                                                                   23, "\"num_key_value_heads\":3"));
  ASSERT_FALSE(indivisible.ok());
  EXPECT_THAT(indivisible.message(), HasSubstr("not divisible by num_key_value_heads 3"));
  auto odd_head = load_config(dir, config_json("llama", R"(,"head_dim":15)"));
  ASSERT_FALSE(odd_head.ok());
  EXPECT_THAT(odd_head.message(), HasSubstr("head_dim must be positive and even"));
  auto zero = load_config(dir, R"({"model_type":"llama","vocab_size":0})");
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(zero.message(), HasSubstr("'vocab_size' must be a positive integer"));
  auto bad_rope = load_config(dir, config_json("llama", R"(,"rope_scaling":{"rope_type":"mrope","factor":2})"));
  ASSERT_FALSE(bad_rope.ok());
  EXPECT_THAT(bad_rope.message(), HasSubstr("unsupported rope type 'mrope'"));
  auto no_factors = load_config(dir, config_json("llama", R"(,"rope_scaling":{"rope_type":"longrope","factor":2})"));
  ASSERT_FALSE(no_factors.ok());
  EXPECT_THAT(no_factors.message(), HasSubstr("longrope needs 'short_factor'"));
}

TEST(ModelConfig, DefaultsAndEosUnionWithGenerationConfig) {
  TempDir dir;
  auto c = load_config(dir, config_json("llama", R"(,"eos_token_id":[7,8],"bos_token_id":1,"rope_theta":500000.0)"),
                       R"({"eos_token_id":[8,9]})");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
}

TEST(ModelConfig, LlamaAttentionBiasCoversOutputProjection) {
  TempDir dir;
  auto c = load_config(dir, config_json("llama", R"(,"attention_bias":true,"mlp_bias":true)"));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_TRUE(c->attention_bias);
  EXPECT_TRUE(c->attention_out_bias);
  EXPECT_TRUE(c->mlp_bias);
}

TEST(ModelConfig, QwenSlidingWindowFollowsMaxWindowLayersOrLayerTypes) {
  TempDir dir;
  auto off = load_config(dir, config_json("qwen2", R"(,"sliding_window":32,"max_window_layers":2)"));
  ASSERT_TRUE(off.ok()) << off.message();
  EXPECT_EQ(off->layer_window, (std::vector<int>{0, 0, 0, 0}));  // use_sliding_window absent = false
  auto by_index = load_config(
      dir, config_json("qwen2", R"(,"sliding_window":32,"max_window_layers":2,"use_sliding_window":true)"));
  ASSERT_TRUE(by_index.ok()) << by_index.message();
  EXPECT_EQ(by_index->layer_window, (std::vector<int>{0, 0, 32, 32}));
  auto by_type = load_config(dir, config_json("qwen3", R"(,"sliding_window":16,"use_sliding_window":true,)"
                                                       R"("layer_types":["sliding_attention","full_attention",)"
                                                       R"("sliding_attention","full_attention"])"));
  ASSERT_TRUE(by_type.ok()) << by_type.message();
  EXPECT_EQ(by_type->layer_window, (std::vector<int>{16, 0, 16, 0}));
  auto mistral = load_config(dir, config_json("mistral", R"(,"sliding_window":4096)"));
  ASSERT_TRUE(mistral.ok()) << mistral.message();
  EXPECT_EQ(mistral->layer_window, (std::vector<int>(4, 4096)));
  auto mistral_null = load_config(dir, config_json("mistral", R"(,"sliding_window":null)"));
  ASSERT_TRUE(mistral_null.ok()) << mistral_null.message();
  EXPECT_EQ(mistral_null->layer_window, (std::vector<int>(4, 0)));
}

TEST(ModelConfig, LayerTypesNameFullSlidingAndLinearAttentionAsTransformersDoes) {
  TempDir dir;
  auto hybrid = load_config(dir, config_json("qwen3", R"(,"sliding_window":16,"use_sliding_window":true,)"
                                                      R"("layer_types":["sliding_attention","linear_attention",)"
                                                      R"("full_attention","linear_attention"])"));
  ASSERT_TRUE(hybrid.ok()) << hybrid.message();
  EXPECT_EQ(hybrid->layer_types, (std::vector<LayerType>{LayerType::kSlidingAttention, LayerType::kLinearAttention,
                                                         LayerType::kFullAttention, LayerType::kLinearAttention}));
  EXPECT_EQ(hybrid->layer_window, (std::vector<int>{16, 0, 0, 0}));
  // What each layer keeps: K/V of its widths (and window), or a state (sized by the family that runs it).
  const LayerCacheSpec sliding = hybrid->layer_cache(0), linear = hybrid->layer_cache(1), full = hybrid->layer_cache(2);
  EXPECT_EQ(sliding.type, LayerType::kSlidingAttention);
  EXPECT_EQ(sliding.window, 16u);
  EXPECT_EQ(sliding.n_kv_heads, 2u);
  EXPECT_EQ(sliding.k_head_dim, 128u);  // qwen3's default head_dim
  EXPECT_EQ(sliding.v_head_dim, 128u);
  EXPECT_EQ(linear.type, LayerType::kLinearAttention);
  EXPECT_EQ(linear.n_kv_heads, 0u);
  EXPECT_EQ(full.type, LayerType::kFullAttention);
  EXPECT_EQ(full.window, 0u);
  EXPECT_STREQ(layer_type_name(LayerType::kLinearAttention), "linear_attention");
  // mistral windows every attention layer; a recurrent one attends nothing.
  auto mistral = load_config(dir, config_json("mistral", R"(,"sliding_window":64,"layer_types":["full_attention",)"
                                                         R"("linear_attention","full_attention","full_attention"])"));
  ASSERT_TRUE(mistral.ok()) << mistral.message();
  EXPECT_EQ(mistral->layer_window, (std::vector<int>{64, 0, 64, 64}));
  EXPECT_EQ(mistral->layer_type(1), LayerType::kLinearAttention);
  EXPECT_EQ(mistral->layer_type(2), LayerType::kSlidingAttention);
  // Without layer_types (llama), every layer is full attention.
  auto llama = load_config(dir, config_json("llama"));
  ASSERT_TRUE(llama.ok()) << llama.message();
  EXPECT_EQ(llama->layer_types, std::vector<LayerType>(4, LayerType::kFullAttention));
  EXPECT_EQ(llama->layer_cache(3).v_head_dim, 16u);
  // A type this host does not know is refused by name.
  auto chunked = load_config(dir, config_json("llama", R"(,"layer_types":["full_attention","chunked_attention",)"
                                                       R"("full_attention","full_attention"])"));
  ASSERT_FALSE(chunked.ok());
  EXPECT_NE(chunked.message().find("chunked_attention"), std::string::npos) << chunked.message();
  EXPECT_NE(chunked.message().find("layer 1"), std::string::npos) << chunked.message();
}

TEST(ModelConfig, RefusesRopeNumbersWhoseFrequenciesUnderflowFloat) {
  // The fresh-clone CI's model_config fuzzer: rope_theta 1.5e126 is finite and > 1, yet its slowest
  // frequencies are 0 in float — dimensions that never turn. So is a factor of 1e300.
  TempDir dir;
  auto theta = load_config(dir, config_json("llama", R"(,"rope_theta":1.5e126)"));
  ASSERT_FALSE(theta.ok());
  EXPECT_NE(theta.message().find("rotation frequency"), std::string::npos) << theta.message();
  auto factor = load_config(dir, config_json("llama", R"(,"rope_theta":10000.0,"rope_scaling":{"type":"linear","factor":1e300})"));
  ASSERT_FALSE(factor.ok());
  EXPECT_NE(factor.message().find("rotation frequency"), std::string::npos) << factor.message();
  EXPECT_TRUE(load_config(dir, config_json("llama", R"(,"rope_theta":1e9)")).ok());  // large, still in range
}

TEST(ModelConfig, ParsesRopeScalingFromLegacyAndNewForms) {
  TempDir dir;
  auto legacy = load_config(dir, config_json("llama", R"(,"rope_theta":500000.0,"rope_scaling":{"type":"linear","factor":2.0})"));
  ASSERT_TRUE(legacy.ok()) << legacy.message();
  EXPECT_EQ(legacy->rope.scaling, RopeScaling::kLinear);
  EXPECT_DOUBLE_EQ(legacy->rope.factor, 2.0);
  EXPECT_DOUBLE_EQ(legacy->rope.theta, 500000.0);
  auto v5 = load_config(dir, config_json("llama", R"(,"rope_parameters":{"rope_theta":500000.0,"rope_type":"llama3",)"
                                                  R"("factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,)"
                                                  R"("original_max_position_embeddings":8192})"));
  ASSERT_TRUE(v5.ok()) << v5.message();
  EXPECT_EQ(v5->rope.scaling, RopeScaling::kLlama3);
  EXPECT_DOUBLE_EQ(v5->rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(v5->rope.factor, 8.0);
  EXPECT_EQ(v5->rope.original_max_position, 8192);
}

TEST(ModelConfig, GemmaDefaultsFollowTransformersAndNullTurnsASoftCapOff) {
  TempDir dir;
  // Gemma 2 with nothing but the shapes: transformers' Gemma2Config defaults.
  auto g2 = load_config(dir, config_json("gemma2", R"(,"head_dim":16)"));
  ASSERT_TRUE(g2.ok()) << g2.message();
  EXPECT_FLOAT_EQ(g2->embed_scale, 8.0f);  // sqrt(64)
  EXPECT_FLOAT_EQ(g2->norm_weight_offset, 1.0f);
  EXPECT_FLOAT_EQ(g2->attention_scale, 1.0f / 16.0f);  // query_pre_attn_scalar 256
  EXPECT_FLOAT_EQ(g2->attention_softcap, 50.0f);
  EXPECT_FLOAT_EQ(g2->final_logit_softcap, 30.0f);
  EXPECT_EQ(g2->hidden_act, "gelu_pytorch_tanh");
  EXPECT_FALSE(g2->qk_norm);
  EXPECT_EQ(g2->layer_window, (std::vector<int>{4096, 0, 4096, 0}));  // alternating, sliding first
  EXPECT_FALSE(g2->sliding_rope.has_value());
  auto off = load_config(dir, config_json("gemma2", R"(,"attn_logit_softcapping":null,"final_logit_softcapping":null,)"
                                                    R"("query_pre_attn_scalar":64,"sliding_window":8)"));
  ASSERT_TRUE(off.ok()) << off.message();
  EXPECT_EQ(off->attention_softcap, 0.0f);
  EXPECT_EQ(off->final_logit_softcap, 0.0f);
  EXPECT_FLOAT_EQ(off->attention_scale, 0.125f);
  EXPECT_EQ(off->layer_window, (std::vector<int>{8, 0, 8, 0}));
  EXPECT_EQ(off->head_dim, 256);  // Gemma's default, not hidden / heads
  // Gemma 3: no soft-caps, per-head q/k norms, every 6th layer full (sliding_window_pattern).
  auto g3 = load_config(dir, config_json("gemma3_text", R"(,"head_dim":16,"sliding_window":8,"sliding_window_pattern":3)"));
  ASSERT_TRUE(g3.ok()) << g3.message();
  EXPECT_EQ(g3->attention_softcap, 0.0f);
  EXPECT_EQ(g3->final_logit_softcap, 0.0f);
  EXPECT_TRUE(g3->qk_norm);
  EXPECT_EQ(g3->layer_window, (std::vector<int>{8, 8, 0, 8}));
  auto bad = load_config(dir, config_json("gemma2", R"(,"attn_logit_softcapping":-1)"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("attn_logit_softcapping"), std::string::npos) << bad.message();
}

TEST(ModelConfig, Qwen3_5DefaultsFollowTransformersAndSizeTheRecurrentState) {
  TempDir dir;
  // Nothing but the shapes: Qwen3_5TextConfig's defaults (head_dim 256, a quarter rotated, every 4th
  // layer full, Gated DeltaNet 16 key / 32 value heads of 128, a 4-tap convolution).
  auto d = load_config(dir, config_json("qwen3_5_text"));
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(d->head_dim, 256);
  EXPECT_EQ(d->rotary_dim(), 64);
  EXPECT_EQ(d->layer_type(0), LayerType::kLinearAttention);
  EXPECT_EQ(d->layer_type(2), LayerType::kLinearAttention);
  EXPECT_EQ(d->layer_type(3), LayerType::kFullAttention);
  EXPECT_EQ(d->linear.conv_kernel, 4);
  EXPECT_EQ(d->linear.conv_dim(), 2 * 16 * 128 + 32 * 128);
  EXPECT_EQ(d->linear_state_bytes, (3ull * (2 * 16 * 128 + 32 * 128) + 32ull * 128 * 128) * 4);
  EXPECT_EQ(d->layer_cache(0).state_bytes, d->linear_state_bytes);
  EXPECT_FLOAT_EQ(d->norm_weight_offset, 1.0f);
  EXPECT_TRUE(d->qk_norm);
  EXPECT_TRUE(d->attention_output_gate);
  EXPECT_FALSE(d->moe.enabled());
  // The file's own fields: layer_types, the linear sizes, partial_rotary_factor in rope_parameters.
  auto own = load_config(dir, config_json("qwen3_5_text", R"(,"head_dim":16,"layer_types":["full_attention","linear_attention",)"
                                                          R"("linear_attention","full_attention"],"linear_conv_kernel_dim":3,)"
                                                          R"("linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":8,)"
                                                          R"("linear_value_head_dim":4,"rope_parameters":{"rope_theta":10000.0,)"
                                                          R"("partial_rotary_factor":0.5,"rope_type":"default"})"));
  ASSERT_TRUE(own.ok()) << own.message();
  EXPECT_EQ(own->layer_type(0), LayerType::kFullAttention);
  EXPECT_EQ(own->layer_type(1), LayerType::kLinearAttention);
  EXPECT_EQ(own->rotary_dim(), 8);
  EXPECT_EQ(own->linear_state_bytes, (2ull * (2 * 2 * 8 + 4 * 4) + 4 * 8 * 4) * 4);
  // Every size bounded, value heads a multiple of key heads.
  for (const char* bad : {R"(,"linear_conv_kernel_dim":1)", R"(,"linear_conv_kernel_dim":65)", R"(,"linear_num_key_heads":0)",
                          R"(,"linear_key_head_dim":100000)", R"(,"linear_num_key_heads":3,"linear_num_value_heads":4)",
                          R"(,"linear_value_head_dim":"128")", R"(,"full_attention_interval":0)"}) {
    auto c = load_config(dir, config_json("qwen3_5_text", bad));
    EXPECT_FALSE(c.ok()) << bad;
  }
  auto huge = load_config(dir, config_json("qwen3_5_text", R"(,"linear_num_value_heads":4096,"linear_num_key_heads":4096,)"
                                                           R"("linear_key_head_dim":4096,"linear_value_head_dim":4096)"));
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.message().find("1 GiB"), std::string::npos) << huge.message();
}

TEST(ModelConfig, Qwen3_5MoeRoutesEveryLayerWithASharedExpert) {
  TempDir dir;
  // No intermediate_size (the MoE model has no dense MLP); experts and the shared expert from the file.
  std::string json = config_json("qwen3_5_moe_text", R"(,"num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":32,)"
                                                     R"("shared_expert_intermediate_size":48)");
  json.erase(json.find(R"("intermediate_size":128,)"), std::string(R"("intermediate_size":128,)").size());
  auto m = load_config(dir, json);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->intermediate_size, 0);
  EXPECT_EQ(m->moe.n_experts, 8);
  EXPECT_EQ(m->moe.top_k, 2);
  EXPECT_EQ(m->moe.expert_intermediate, 32);
  EXPECT_EQ(m->moe.shared_intermediate, 48);
  EXPECT_TRUE(m->moe.shared_gated);
  EXPECT_TRUE(m->moe.normalize_top_k);  // its router always renormalises the top k
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(m->moe.is_sparse(i)) << i;
  // transformers' defaults where absent: 256 experts, 8 a token, widths of 512.
  auto d = load_config(dir, config_json("qwen3_5_moe_text"));
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(d->moe.n_experts, 256);
  EXPECT_EQ(d->moe.top_k, 8);
  EXPECT_EQ(d->moe.expert_intermediate, 512);
  EXPECT_EQ(d->moe.shared_intermediate, 512);
  auto bad = load_config(dir, config_json("qwen3_5_moe_text", R"(,"shared_expert_intermediate_size":0)"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("shared_expert_intermediate_size"), std::string::npos) << bad.message();
}

TEST(ModelConfig, Gemma3SlidingLayersRotateWithTheirOwnBase) {
  TempDir dir;
  // transformers 5.x: rope_parameters per layer type.
  auto v5 = load_config(dir, config_json("gemma3_text", R"(,"head_dim":16,"layer_types":["sliding_attention","full_attention",)"
                                                        R"("sliding_attention","full_attention"],"sliding_window":8,)"
                                                        R"("rope_parameters":{"full_attention":{"rope_theta":1000000.0,)"
                                                        R"("rope_type":"linear","factor":8.0},)"
                                                        R"("sliding_attention":{"rope_theta":10000.0,"rope_type":"default"}})"));
  ASSERT_TRUE(v5.ok()) << v5.message();
  EXPECT_DOUBLE_EQ(v5->rope.theta, 1000000.0);
  EXPECT_EQ(v5->rope.scaling, RopeScaling::kLinear);
  EXPECT_DOUBLE_EQ(v5->rope.factor, 8.0);
  ASSERT_TRUE(v5->sliding_rope.has_value());
  EXPECT_DOUBLE_EQ(v5->sliding_rope->theta, 10000.0);
  EXPECT_EQ(v5->sliding_rope->scaling, RopeScaling::kNone);
  EXPECT_DOUBLE_EQ(v5->rope_of(0).theta, 10000.0);    // sliding
  EXPECT_DOUBLE_EQ(v5->rope_of(1).theta, 1000000.0);  // full
  // transformers 4.x: rope_theta for the full layers, rope_local_base_freq for the sliding ones.
  auto v4 = load_config(dir, config_json("gemma3_text", R"(,"head_dim":16,"rope_theta":1000000.0,"rope_local_base_freq":20000.0)"));
  ASSERT_TRUE(v4.ok()) << v4.message();
  EXPECT_DOUBLE_EQ(v4->rope.theta, 1000000.0);
  ASSERT_TRUE(v4->sliding_rope.has_value());
  EXPECT_DOUBLE_EQ(v4->sliding_rope->theta, 20000.0);
}

TEST(ModelConfig, Phi3LongRopeReadsBothFactorListsAndScalesAttentionAsTransformersDoes) {
  TempDir dir;
  std::string shorts = "[", longs = "[";
  for (int i = 0; i < 8; ++i) {  // head_dim 16: 8 frequencies
    shorts += (i ? "," : "") + std::to_string(1.0 + 0.25 * i);
    longs += (i ? "," : "") + std::to_string(2.0 + i);
  }
  shorts += "]";
  longs += "]";
  auto c = load_config(dir, config_json("phi3", R"(,"max_position_embeddings":131072,"original_max_position_embeddings":4096,)"
                                                R"("rope_theta":10000.0,"rope_scaling":{"type":"longrope","short_factor":)" +
                                                    shorts + R"(,"long_factor":)" + longs + "}"));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->rope.scaling, RopeScaling::kLongRope);
  EXPECT_EQ(c->rope.original_max_position, 4096);
  EXPECT_DOUBLE_EQ(c->rope.factor, 32.0);  // 131072 / 4096
  const auto inv = c->rope.inverse_frequencies(16);
  ASSERT_EQ(inv.size(), 8u);
  for (int i = 0; i < 8; ++i)
    EXPECT_NEAR(inv[i], 1.0 / ((1.0 + 0.25 * i) * std::pow(10000.0, 2.0 * i / 16)), 1e-7 * inv[0]) << i;
  EXPECT_NEAR(c->rope.attention_scaling(), std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-6);
  EXPECT_TRUE(c->layer_window == std::vector<int>(4, 0));  // Phi-3 without sliding_window: none
  auto windowed = load_config(dir, config_json("phi3", R"(,"sliding_window":2047)"));
  ASSERT_TRUE(windowed.ok()) << windowed.message();
  EXPECT_EQ(windowed->layer_window, std::vector<int>(4, 2047));
  auto short_list = load_config(dir, config_json("phi3", R"(,"rope_scaling":{"type":"longrope","short_factor":[1,1],"long_factor":[1,1]})"));
  ASSERT_FALSE(short_list.ok());
  EXPECT_NE(short_list.message().find("short_factor"), std::string::npos) << short_list.message();
}

TEST(ModelConfig, Gemma4LayersHaveTheirOwnWidthsRotaryAndSharing) {
  TempDir dir;
  const std::string types = R"(,"layer_types":["sliding_attention","sliding_attention","sliding_attention","full_attention"],)";
  const std::string rope = R"("rope_parameters":{"full_attention":{"partial_rotary_factor":0.25,"rope_theta":1000000.0,)"
                           R"("rope_type":"proportional"},"sliding_attention":{"rope_theta":10000.0,"rope_type":"default"}})";
  // transformers >= 5.15: per_layer_config.
  auto c = load_config(dir, config_json("gemma4_text", types + rope + R"(,"head_dim":16,"sliding_window":8,)"
                                                      R"("per_layer_config":{"3":{"head_dim":64,"num_key_value_heads":1}},)"
                                                      R"("hidden_size_per_layer_input":8,"final_logit_softcapping":null)"));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->head_dim_of(0), 16);
  EXPECT_EQ(c->head_dim_of(3), 64);
  EXPECT_EQ(c->kv_heads_of(3), 1);
  EXPECT_EQ(c->kv_heads_of(0), 2);
  EXPECT_EQ(c->max_head_dim(), 64);
  EXPECT_EQ(c->max_kv_width(), 64);  // 1 head of 64 beside 2 of 16
  EXPECT_EQ(c->layer_cache(3).k_head_dim, 64u);
  EXPECT_EQ(c->layer_cache(3).n_kv_heads, 1u);
  EXPECT_EQ(c->layer_cache(0).window, 8u);
  EXPECT_FLOAT_EQ(c->norm_weight_offset, 0.0f);
  EXPECT_FLOAT_EQ(c->attention_scale, 1.0f);
  EXPECT_EQ(c->final_logit_softcap, 0.0f);
  EXPECT_TRUE(c->value_norm);
  EXPECT_EQ(c->per_layer_input_width, 8);
  EXPECT_EQ(c->per_layer_vocab, 100);  // vocab_size when vocab_size_per_layer_input is absent
  // The full layer turns the whole head: 64 dims, 8 of 32 angles turning (0.25), spaced over 64.
  EXPECT_EQ(c->rotary_dim_of(3), 64);
  EXPECT_EQ(c->rotary_dim_of(0), 16);
  const auto inv = c->rope_of(3).inverse_frequencies(c->rotary_dim_of(3));
  ASSERT_EQ(inv.size(), 32u);
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(inv[i], i < 8 ? static_cast<float>(1.0 / std::pow(1e6, 2.0 * i / 64)) : 0.0f) << i;
  // transformers <= 5.14: global_head_dim, and num_global_key_value_heads for attention_k_eq_v's full layers;
  // the last two layers attend the K/V of the last earlier layer of their type.
  const std::string alternating = R"(,"layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"],)";
  auto old = load_config(dir, config_json("gemma4_text", alternating + rope + R"(,"head_dim":16,"global_head_dim":32,)"
                                                        R"("attention_k_eq_v":true,"num_global_key_value_heads":1,)"
                                                        R"("num_kv_shared_layers":2,"use_double_wide_mlp":true)"));
  ASSERT_TRUE(old.ok()) << old.message();
  EXPECT_EQ(old->head_dim_of(3), 32);
  EXPECT_EQ(old->kv_heads_of(3), 1);
  EXPECT_TRUE(old->full_k_eq_v);
  EXPECT_EQ(old->kv_shared_from, 2);
  EXPECT_EQ(old->kv_source_of(1), 1);
  EXPECT_EQ(old->kv_source_of(2), 0);  // sliding: layer 0
  EXPECT_EQ(old->kv_source_of(3), 1);  // full: layer 1
  // The cache layout holds layers 0 and 1 only.
  EXPECT_TRUE(old->keeps_cache(1));
  EXPECT_FALSE(old->keeps_cache(2));
  EXPECT_FALSE(old->keeps_cache(3));
  EXPECT_EQ(old->cache_index(1), 1);
  EXPECT_EQ(old->cache_index(old->kv_source_of(3)), 1);
  EXPECT_EQ(old->head_dim_of(2), 16);
  EXPECT_EQ(old->final_logit_softcap, 30.0f);  // absent: transformers' default
  auto lonely = load_config(dir, config_json("gemma4_text", types + rope + R"(,"head_dim":16,"num_kv_shared_layers":1)"));
  ASSERT_FALSE(lonely.ok());  // the only full layer cannot share a full layer's K/V
  EXPECT_NE(lonely.message().find("has no earlier layer of its type"), std::string::npos) << lonely.message();
  auto bad = load_config(dir, config_json("gemma4_text", types + rope + R"(,"per_layer_config":{"9":{"head_dim":64}})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("per_layer_config['9']"), std::string::npos) << bad.message();
  auto moe = load_config(dir, config_json("gemma4_text", types + rope + R"(,"enable_moe_block":true,"num_experts":8,"top_k_experts":9,)"
                                                        R"("moe_intermediate_size":32)"));
  ASSERT_FALSE(moe.ok());
  EXPECT_NE(moe.message().find("top_k_experts"), std::string::npos) << moe.message();
}

TEST(ModelConfig, GptOssDefaultsFollowTransformers) {
  TempDir dir;
  // Nothing but the shapes: GptOssConfig's defaults.
  auto c = load_config(dir, config_json("gpt_oss"));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_FLOAT_EQ(c->norm_eps, 1e-5f);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_TRUE(c->attention_out_bias);
  EXPECT_EQ(c->layer_window, (std::vector<int>{128, 0, 128, 0}));  // alternating, sliding first
  EXPECT_EQ(c->rope.scaling, RopeScaling::kYarn);
  EXPECT_DOUBLE_EQ(c->rope.theta, 150000.0);
  EXPECT_DOUBLE_EQ(c->rope.factor, 32.0);
  EXPECT_EQ(c->rope.original_max_position, 4096);
  EXPECT_FALSE(c->rope.truncate);
  const MoeConfig& m = c->moe;
  EXPECT_EQ(m.n_experts, 128);
  EXPECT_EQ(m.top_k, 4);
  EXPECT_EQ(m.expert_intermediate, 128);  // intermediate_size
  EXPECT_EQ(m.routing, MoeRouting::kTopKSoftmax);
  EXPECT_TRUE(m.router_bias);
  EXPECT_TRUE(m.expert_bias);
  EXPECT_FLOAT_EQ(m.swiglu_alpha, 1.702f);
  EXPECT_FLOAT_EQ(m.swiglu_limit, 7.0f);
  EXPECT_EQ(m.sparse_layer, std::vector<bool>(4, true));
}

TEST(ModelConfig, GptOssReadsItsLayerTypesExpertsClampAndRope) {
  TempDir dir;
  auto c = load_config(dir, config_json("gpt_oss", R"(,"head_dim":16,"rms_norm_eps":1e-6,"num_local_experts":8,"num_experts_per_tok":2,)"
                                                    R"("sliding_window":8,"swiglu_limit":5.5,"attention_bias":false,)"
                                                    R"("layer_types":["full_attention","sliding_attention","sliding_attention","full_attention"],)"
                                                    R"("rope_parameters":{"rope_type":"yarn","rope_theta":10000.0,"factor":4.0,)"
                                                    R"("beta_fast":32.0,"beta_slow":1.0,"original_max_position_embeddings":1024,)"
                                                    R"("truncate":true})"));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_FLOAT_EQ(c->norm_eps, 1e-6f);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->layer_window, (std::vector<int>{0, 8, 8, 0}));
  EXPECT_EQ(c->layer_type(1), LayerType::kSlidingAttention);
  EXPECT_EQ(c->moe.n_experts, 8);
  EXPECT_EQ(c->moe.top_k, 2);
  EXPECT_FLOAT_EQ(c->moe.swiglu_limit, 5.5f);
  EXPECT_FLOAT_EQ(c->moe.swiglu_alpha, 1.702f);
  EXPECT_DOUBLE_EQ(c->rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c->rope.factor, 4.0);
  EXPECT_EQ(c->rope.original_max_position, 1024);
  EXPECT_TRUE(c->rope.truncate);

  const std::pair<std::string, std::string> bad[] = {
      {R"(,"swiglu_limit":-1)", "'swiglu_limit' must be a positive number"},
      {R"(,"swiglu_alpha":0)", "'swiglu_alpha' must be a positive number"},
      {R"(,"num_local_experts":8,"num_experts_per_tok":9)", "0 < num_experts_per_tok <= it"},
      {R"(,"rope_parameters":{"rope_type":"yarn","factor":32.0,"truncate":"no"})", "'truncate' must be a boolean"},
  };
  for (const auto& [extra, message] : bad) {
    auto b = load_config(dir, config_json("gpt_oss", extra));
    ASSERT_FALSE(b.ok()) << extra;
    EXPECT_THAT(b.message(), HasSubstr(message)) << extra;
  }
}

TEST(ModelConfig, DeepseekV3ReadsLatentAttentionAndGroupRouting) {
  TempDir dir;
  const std::string mla = R"(,"head_dim":8,"q_lora_rank":24,"kv_lora_rank":16,"qk_nope_head_dim":16,"qk_rope_head_dim":8,)"
                          R"("v_head_dim":16,"rope_interleave":true,"rope_parameters":{"rope_theta":10000.0,"rope_type":"default"})";
  // The MoE fields, one of them replaced where `key` is set.
  auto moe_with = [](const std::string& key = "", const std::string& value = "") {
    const std::vector<std::pair<std::string, std::string>> fields = {
        {"n_routed_experts", "8"}, {"num_experts_per_tok", "2"}, {"moe_intermediate_size", "32"}, {"n_shared_experts", "1"},
        {"n_group", "2"},          {"topk_group", "1"},          {"norm_topk_prob", "true"},     {"routed_scaling_factor", "2.5"},
        {"first_k_dense_replace", "1"}};
    std::string out;
    for (const auto& [k, v] : fields) out += ",\"" + k + "\":" + (k == key ? value : v);
    return out;
  };
  const std::string moe = moe_with();
  auto c = load_config(dir, config_json("deepseek_v3", mla + moe));
  ASSERT_TRUE(c.ok()) << c.message();
  // head_dim is qk_nope + qk_rope (config.json's head_dim is transformers' rope width); K and V for every head.
  EXPECT_EQ(c->head_dim, 24);
  EXPECT_EQ(c->value_head_dim(), 16);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->mla.q_lora_rank, 24);
  EXPECT_EQ(c->mla.kv_lora_rank, 16);
  EXPECT_EQ(c->rotary_dim(), 8);
  EXPECT_EQ(c->rotary_dim_of(3), 8);
  EXPECT_TRUE(c->rope_interleaved);
  EXPECT_FLOAT_EQ(c->attention_scale, 1.0f / std::sqrt(24.0f));
  const LayerCacheSpec spec = c->layer_cache(1);
  EXPECT_EQ(spec.k_head_dim, 24u);
  EXPECT_EQ(spec.v_head_dim, 16u);
  EXPECT_EQ(c->moe.routing, MoeRouting::kSigmoidGroupLimited);
  EXPECT_EQ(c->moe.n_experts, 8);
  EXPECT_EQ(c->moe.top_k, 2);
  EXPECT_EQ(c->moe.n_group, 2);
  EXPECT_EQ(c->moe.topk_group, 1);
  EXPECT_FLOAT_EQ(c->moe.routed_scaling, 2.5f);
  EXPECT_EQ(c->moe.expert_intermediate, 32);
  EXPECT_EQ(c->moe.shared_intermediate, 32);
  EXPECT_FALSE(c->moe.shared_gated);  // DeepSeek's shared experts are added as they are
  EXPECT_TRUE(c->moe.normalize_top_k);
  EXPECT_EQ(c->moe.sparse_layer, (std::vector<bool>{false, true, true, true}));

  // q_lora_rank null: a plain q_proj. yarn with mscale_all_dim: scores scaled by mscale², cos/sin by mscale ratio.
  const std::string yarn = R"(,"q_lora_rank":null,"kv_lora_rank":16,"qk_nope_head_dim":16,"qk_rope_head_dim":8,"v_head_dim":16,)"
                           R"("rope_scaling":{"type":"yarn","factor":40,"mscale":1.0,"mscale_all_dim":0.707,)"
                           R"("original_max_position_embeddings":4096,"beta_fast":32,"beta_slow":1})";
  auto y = load_config(dir, config_json("deepseek_v3", yarn + moe));
  ASSERT_TRUE(y.ok()) << y.message();
  EXPECT_EQ(y->mla.q_lora_rank, 0);
  const double all_dim = 0.1 * 0.707 * std::log(40.0) + 1.0, own = 0.1 * 1.0 * std::log(40.0) + 1.0;
  EXPECT_NEAR(y->attention_scale, all_dim * all_dim / std::sqrt(24.0), 1e-6);
  EXPECT_NEAR(y->rope.attention_scaling(), own / all_dim, 1e-6);

  // Sizes that cannot route, named.
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"n_group", "3"}, {"topk_group", "3"}, {"num_experts_per_tok", "5"}, {"routed_scaling_factor", "0"}, {"first_k_dense_replace", "-1"}}) {
    auto r = load_config(dir, config_json("deepseek_v3", mla + moe_with(field, value)));
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_NE(r.message().find(field), std::string::npos) << r.message();
  }
  auto odd = load_config(dir, config_json("deepseek_v3", R"(,"kv_lora_rank":16,"qk_nope_head_dim":16,"qk_rope_head_dim":7,"v_head_dim":16)" + moe));
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.message().find("qk_rope_head_dim"), std::string::npos) << odd.message();
  // An odd query/key head (15 + 8) is refused by name (the fuzzer's find: it passed as head_dim 23).
  auto odd_head = load_config(dir, config_json("deepseek_v3", R"(,"kv_lora_rank":16,"qk_nope_head_dim":15,"qk_rope_head_dim":8,"v_head_dim":16)" + moe));
  ASSERT_FALSE(odd_head.ok());
  EXPECT_NE(odd_head.message().find("qk_nope_head_dim"), std::string::npos) << odd_head.message();
  auto no_latent = load_config(dir, config_json("deepseek_v3", R"(,"kv_lora_rank":0)" + moe));
  ASSERT_FALSE(no_latent.ok());
  EXPECT_NE(no_latent.message().find("kv_lora_rank"), std::string::npos) << no_latent.message();
}

// ---- RoPE inverse frequencies ----

TEST(RopeConfig, Llama3RuleMatchesHandComputedValues) {
  RopeConfig rope;
  rope.theta = 500000.0;
  rope.scaling = RopeScaling::kLlama3;
  rope.factor = 8.0;
  rope.low_freq_factor = 1.0;
  rope.high_freq_factor = 4.0;
  rope.original_max_position = 8192;
  const int dim = 128;
  const auto inv = rope.inverse_frequencies(dim);
  ASSERT_EQ(inv.size(), 64u);

  // Wavelength 2π/f: below 8192/4 = 2048 unchanged, above 8192/1 = 8192 divided by 8, between blended with
  // smooth = (8192/wavelength − 1)/(4 − 1): f·((1 − smooth)/8 + smooth).
  // i = 0: f = 1, wavelength 6.28 → 1.
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  // i = 20: f = 500000^(−40/128) ≈ 0.016560, wavelength ≈ 379 → unchanged.
  EXPECT_NEAR(inv[20], 0.0165604401, 1e-9);
  // i = 32: f = 500000^(−1/2) = 1/707.107 = 0.00141421, wavelength = 2π·707.107 = 4442.88 (medium);
  // smooth = (8192/4442.88 − 1)/3 = 0.281286; f·(0.718714/8 + 0.281286) = 0.00141421·0.371125 = 0.00052485.
  EXPECT_NEAR(inv[32], 0.00052485, 2e-8);
  // i = 30: f = 500000^(−60/128) = 0.00213112, wavelength 2948.3 (medium); smooth = 0.592830 → 0.00137189.
  EXPECT_NEAR(inv[30], 0.00137189, 2e-8);
  // i = 35: f = 500000^(−70/128) = 0.000764497, wavelength 8218.7 > 8192 → f/8 = 9.55621e-5.
  EXPECT_NEAR(inv[35], 9.55621e-5, 1e-9);
  // i = 63: f = 500000^(−126/128) = 2.45514e-6 → f/8 = 3.06893e-7.
  EXPECT_NEAR(inv[63], 3.06893e-7, 1e-11);
  EXPECT_FLOAT_EQ(rope.attention_scaling(), 1.0f);
}

TEST(RopeConfig, DefaultAndLinearAndYarn) {
  RopeConfig rope;  // theta 10000
  auto plain = rope.inverse_frequencies(8);
  ASSERT_EQ(plain.size(), 4u);
  EXPECT_FLOAT_EQ(plain[1], 0.1f);   // 10000^(−2/8)
  EXPECT_FLOAT_EQ(plain[2], 0.01f);  // 10000^(−4/8)
  rope.scaling = RopeScaling::kLinear;
  rope.factor = 4.0;
  EXPECT_FLOAT_EQ(rope.inverse_frequencies(8)[2], 0.0025f);
  rope.scaling = RopeScaling::kDynamic;
  EXPECT_FLOAT_EQ(rope.inverse_frequencies(8)[2], 0.01f);

  rope.scaling = RopeScaling::kYarn;
  rope.original_max_position = 4096;
  EXPECT_NEAR(rope.attention_scaling(), 0.1 * std::log(4.0) + 1.0, 1e-6);
  const auto yarn = rope.inverse_frequencies(128);
  EXPECT_FLOAT_EQ(yarn[0], 1.0f);                                      // fast-rotating: extrapolated
  EXPECT_NEAR(yarn[63], std::pow(10000.0, -126.0 / 128) / 4.0, 1e-12);  // slow: interpolated
  rope.attention_factor = 1.5;
  EXPECT_FLOAT_EQ(rope.attention_scaling(), 1.5f);
}

// gpt-oss's yarn (theta 150000, factor 32, a context of 4096, beta 32/1) at head_dim 16: the ramp runs
// from dimension 2.0232 to 4.3495; truncate rounds it out to [2, 5], which changes frequencies 3 and 4
// only. Values from transformers' formula, worked in double precision.
TEST(RopeConfig, YarnTruncateRoundsTheRampToWholeDimensions) {
  RopeConfig rope;
  rope.theta = 150000.0;
  rope.scaling = RopeScaling::kYarn;
  rope.factor = 32.0;
  rope.original_max_position = 4096;
  const double both[8] = {1, 0.2254180002, 0.05081327482, 0, 0, 1.818833668e-05, 4.099978482e-06, 9.242089502e-07};
  for (const bool truncate : {true, false}) {
    rope.truncate = truncate;
    const auto inv = rope.inverse_frequencies(16);
    ASSERT_EQ(inv.size(), 8u);
    for (int i : {0, 1, 2, 5, 6, 7}) EXPECT_NEAR(inv[i], both[i], 1e-6 * both[i]) << i << (truncate ? " truncated" : "");
    EXPECT_NEAR(inv[3], truncate ? 0.007755466058 : 0.00679495949, 1e-6 * inv[3]) << truncate;
    EXPECT_NEAR(inv[4], truncate ? 0.0009144544012 : 0.0004564839192, 1e-6 * inv[4]) << truncate;
  }
  EXPECT_NEAR(rope.attention_scaling(), 0.1 * std::log(32.0) + 1.0, 1e-6);
}

// Found by the fuzz harness (tests/fuzz/model_config_fuzz.cpp) or its review: values a config may hold
// that the model would only trip over later (a zero epsilon after narrowing to float, NaN rope tables,
// per-layer tables of billions of entries, int casts that wrap) are refused when the config is read.
TEST(ModelConfig, RejectsValuesOutsideWhatAModelCanUse) {
  TempDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {R"(,"rms_norm_eps":1e-60)", "'rms_norm_eps' must be positive and fit a float"},
      {R"(,"rms_norm_eps":1e300)", "'rms_norm_eps' must be positive and fit a float"},
      {R"(,"rope_theta":0)", "rope_theta must be greater than 1"},
      {R"(,"rope_theta":-10000)", "rope_theta must be greater than 1"},
      {R"(,"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":-1})", "high_freq_factor, beta_fast"},
      {R"(,"rope_scaling":{"rope_type":"yarn","factor":4,"beta_fast":-1})", "beta_slow must be positive"},
      {R"(,"rope_scaling":{"rope_type":"yarn","factor":4,"original_max_position_embeddings":4294967297})",
       "original_max_position_embeddings must be a positive integer at most"},
      {R"(,"max_position_embeddings":4294967297)", "'max_position_embeddings' must be a positive integer at most"},
      {R"(,"head_dim":1073741824)", "head_dim must be positive and even"},
  };
  for (const auto& [extra, message] : cases) {
    auto c = load_config(dir, config_json("llama", extra));
    ASSERT_FALSE(c.ok()) << extra;
    EXPECT_THAT(c.message(), HasSubstr(message)) << extra;
  }
  std::string many_eos = R"(,"eos_token_id":[0)";
  for (int i = 1; i < 2000; ++i) many_eos += "," + std::to_string(i);
  auto eos = load_config(dir, config_json("llama", many_eos + "]"));
  ASSERT_FALSE(eos.ok());
  EXPECT_THAT(eos.message(), HasSubstr("lists 2000 ids, more than 1024"));

  std::string layers = config_json("llama");
  layers.replace(layers.find("\"num_hidden_layers\":4"), 21, "\"num_hidden_layers\":2147483647");
  auto huge = load_config(dir, layers);
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.message(), HasSubstr("'num_hidden_layers' must be a positive integer at most 4096"));
  std::string kv_heads = config_json("llama");
  kv_heads.replace(kv_heads.find("\"num_key_value_heads\":2"), 23, "\"num_key_value_heads\":4294967298");
  auto kv = load_config(dir, kv_heads);  // 2^32 + 2 would wrap to 2 heads in an int
  ASSERT_FALSE(kv.ok());
  EXPECT_THAT(kv.message(), HasSubstr("'num_key_value_heads' must be between 1 and num_attention_heads (4)"));
  auto experts = load_config(dir, config_json("mixtral", R"(,"num_local_experts":4294967304,"num_experts_per_tok":2)"));
  ASSERT_FALSE(experts.ok());
  EXPECT_THAT(experts.message(), HasSubstr("num_experts (or num_local_experts) in 1..4096"));
}

}  // namespace
}  // namespace sluice
