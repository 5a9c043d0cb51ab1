// sluice quantize / make-model / info as libraries: the quantizer reproduces MLX's files, the
// generator's models run with finite logits and are deterministic, MoE files have MLX's stacked layout,
// and malformed quantized files are clear errors naming the tensor.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/perplexity.h"
#include "engine/runtime.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "quant/model_files.h"
#include "quant/model_info.h"
#include "quant/quantizer.h"
#include "quant/random_model.h"
#include "golden.h"
#include "reference.h"
#include "util/json.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("sluice-quant-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};


EngineOptions options_for(const fs::path& dir) {
  EngineOptions o;
  o.model_dir = dir.string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = "cpu";
  o.kv_codec = "f32";
  o.threads = 2;
  o.ctx_size = 1024;
  return o;
}

fs::path tokenizer_dir() { return test::reference_path("models/tiny-code-qwen2"); }

// Every tensor of a and b: same names, dtypes, shapes; returns the names whose bytes differ.
std::vector<std::string> differing_tensors(const fs::path& a, const fs::path& b) {
  auto sa = SafetensorsSet::open_dir(a);
  auto sb = SafetensorsSet::open_dir(b);
  EXPECT_TRUE(sa.ok() && sb.ok());
  std::vector<std::string> diff;
  if (!sa.ok() || !sb.ok()) return {"<open failed>"};
  EXPECT_EQ(sa->tensors().size(), sb->tensors().size());
  for (const auto& [name, t] : sa->tensors()) {
    const TensorInfo* u = sb->find(name);
    if (!u || u->dtype != t.dtype || u->shape != t.shape || u->bytes != t.bytes ||
        std::memcmp(u->data, t.data, t.bytes) != 0)
      diff.push_back(name);
  }
  return diff;
}

class QuantizeMlx : public ::testing::TestWithParam<int> {};

TEST_P(QuantizeMlx, QuantizerReproducesTheMlxCommunityFilesBitForBit) {
  const int bits = GetParam();
  const std::string ref = "models/tiny-code-qwen2-" + std::to_string(bits) + "bit";
  SLUICE_REQUIRE_REFERENCE(ref + "/model.safetensors");
  TempDir out;
  quant::QuantizeOptions o;
  o.input = test::reference_path("models/tiny-code-qwen2");
  o.output = out.path();
  o.form = {bits, 64};
  o.quiet = true;
  auto r = quant::quantize_model(o);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->quantized, 1 + 4 * 7);  // embedding + 7 projections per layer
  EXPECT_EQ(differing_tensors(out.path(), test::reference_path(ref)), std::vector<std::string>{});
  auto config = ModelConfig::load(out.path());
  ASSERT_TRUE(config.ok()) << config.message();
  EXPECT_EQ(config->quantization.bits, bits);
  EXPECT_EQ(config->quantization.group_size, 64);
  EXPECT_TRUE(fs::exists(out.path() / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(out.path() / "chat_template.jinja"));
}

INSTANTIATE_TEST_SUITE_P(Bits, QuantizeMlx, ::testing::Values(4, 8));

TEST(Quantize, FourBitGroup64ReproducesTheGoldenMeanNll) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2-4bit/golden.json");
  TempDir out;
  quant::QuantizeOptions o;
  o.input = test::reference_path("models/tiny-code-qwen2");
  o.output = out.path();
  o.form = {4, 64};
  o.quiet = true;
  ASSERT_TRUE(quant::quantize_model(o).ok());
  auto golden = json::parse_file(test::reference_path("models/tiny-code-qwen2-4bit/golden.json"));
  ASSERT_TRUE(golden.ok());
  const auto& eval = (*golden)["nll_eval"];
  auto rt = Runtime::open(options_for(out.path()), 1024);
  ASSERT_TRUE(rt.ok()) << rt.message();
  PerplexityOptions opt;
  opt.ctx = 1024;
  opt.chunks = 1;
  opt.scoring = PerplexityScoring::kAll;
  auto result = compute_perplexity(**rt, test::golden_ids(eval["ids"]), opt);
  ASSERT_TRUE(result.ok()) << result.message();
  EXPECT_NEAR(result->mean_nll, eval["mean_nll"].GetDouble(), 5e-3);
}

TEST(Quantize, KeepPatternLeavesMatchingTensorsInFloatingPointAndOtherWidthsRun) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/config.json");
  for (int bits : {3, 5, 6, 2}) {
    TempDir out;
    quant::QuantizeOptions o;
    o.input = test::reference_path("models/tiny-code-qwen2");
    o.output = out.path();
    o.form = {bits, bits == 2 ? 32 : 128};
    o.keep = {"embed_tokens", "layers\\.0\\.mlp"};
    o.quiet = true;
    auto r = quant::quantize_model(o);
    ASSERT_TRUE(r.ok()) << r.message();
    auto set = SafetensorsSet::open_dir(out.path());
    ASSERT_TRUE(set.ok());
    EXPECT_EQ(set->find("model.embed_tokens.weight")->dtype, DType::kBF16);
    EXPECT_EQ(set->find("model.embed_tokens.scales"), nullptr);
    EXPECT_EQ(set->find("model.layers.0.mlp.up_proj.weight")->dtype, DType::kBF16);
    EXPECT_EQ(set->find("model.layers.1.mlp.up_proj.weight")->dtype, DType::kU32);
    // The model runs and still predicts: a held-out NLL near the float model's (about 1.76).
    auto rt = Runtime::open(options_for(out.path()), 512);
    ASSERT_TRUE(rt.ok()) << rt.message();
    auto golden = json::parse_file(test::reference_path("models/tiny-code-qwen2/golden.json"));
    auto ids = test::golden_ids((*golden)["nll_eval"]["ids"]);
    ids.resize(256);
    PerplexityOptions opt;
    opt.ctx = 256;
    opt.chunks = 1;
    opt.scoring = PerplexityScoring::kAll;
    auto result = compute_perplexity(**rt, ids, opt);
    ASSERT_TRUE(result.ok()) << result.message();
    EXPECT_TRUE(std::isfinite(result->mean_nll));
    EXPECT_LT(result->mean_nll, bits == 2 ? 8.0 : 4.0) << bits << " bits";
  }
}

quant::MakeModelOptions tiny_options(const fs::path& out, int bits, uint64_t seed) {
  quant::MakeModelOptions o;
  o.preset = "tiny-qwen2";
  o.output = out;
  o.bits = bits;
  o.seed = seed;
  o.tokenizer_from = tokenizer_dir();
  o.quiet = true;
  return o;
}

// Gemma 4's experts as transformers stores them (experts.gate_up_proj [E, 2F, H], down_proj [E, H, F],
// no ".weight"): quantized like the other products and read back by the expert layout; the 8-bit
// model still predicts the golden's greedy continuation of its prompt.
TEST(Quantize, GemmaFourStackedExpertsAreQuantizedAndRun) {
  SLUICE_REQUIRE_REFERENCE("models/zoo2/gemma4_text_moe/golden.json");
  const fs::path model = test::reference_path("models/zoo2/gemma4_text_moe");
  TempDir out;
  quant::QuantizeOptions o;
  o.input = model;
  o.output = out.path();
  o.form = {8, 32};  // down_proj's rows are 32 wide
  o.quiet = true;
  auto r = quant::quantize_model(o);
  ASSERT_TRUE(r.ok()) << r.message();
  auto set = SafetensorsSet::open_dir(out.path());
  ASSERT_TRUE(set.ok());
  for (const char* name : {"gate_up_proj", "down_proj"}) {
    const std::string base = std::string("model.layers.0.experts.") + name;
    EXPECT_EQ(set->find(base), nullptr) << base;
    ASSERT_NE(set->find(base + ".weight"), nullptr) << base;
    EXPECT_EQ(set->find(base + ".weight")->dtype, DType::kU32) << base;
    EXPECT_NE(set->find(base + ".scales"), nullptr) << base;
  }
  // It runs, and predicts as the float model does: each golden prompt's first greedy tokens (8-bit
  // weights move the logits by far less than the margins there).
  auto golden = json::parse_file(model / "golden.json");
  ASSERT_TRUE(golden.ok());
  auto engine = Engine::create(options_for(out.path()));
  ASSERT_TRUE(engine.ok()) << engine.message();
  for (const auto& prompt : (*golden)["prompts"].GetArray()) {
    GenerationRequest req;
    req.prompt_ids = test::golden_ids(prompt["ids"]);
    req.max_tokens = 4;
    req.sampling.temperature = 0;
    req.ignore_eos = true;
    auto expected = test::golden_ids(prompt["greedy_ids"]);
    expected.resize(4);
    EXPECT_EQ((*engine)->generate(req).ids, expected);
  }
}

TEST(MakeModel, TinyPresetGeneratesFiniteLogitsInEveryForm) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/tokenizer.json");
  for (int bits : {0, 4, 8, 3}) {
    TempDir out;
    auto r = quant::make_model(tiny_options(out.path(), bits, 7));
    ASSERT_TRUE(r.ok()) << r.message();
    auto rt = Runtime::open(options_for(out.path()));
    ASSERT_TRUE(rt.ok()) << rt.message();
    SequenceState seq;
    std::vector<int32_t> tokens = {1, 500, 8000, 42};
    std::vector<float> logits;
    for (int step = 0; step < 8; ++step) {
      ASSERT_TRUE((*rt)->run(seq, tokens, false, logits).ok());
      ASSERT_EQ(logits.size(), 8192u);
      float max_abs = 0;
      for (float v : logits) {
        ASSERT_TRUE(std::isfinite(v)) << bits << " bits, step " << step;
        max_abs = std::max(max_abs, std::abs(v));
      }
      EXPECT_GT(max_abs, 0.0f);
      tokens = {static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())};
    }
  }
}

TEST(MakeModel, SameSeedSameFilesOtherSeedOtherWeights) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/tokenizer.json");
  TempDir a, b, c;
  ASSERT_TRUE(quant::make_model(tiny_options(a.path(), 4, 11)).ok());
  ASSERT_TRUE(quant::make_model(tiny_options(b.path(), 4, 11)).ok());
  ASSERT_TRUE(quant::make_model(tiny_options(c.path(), 4, 12)).ok());
  EXPECT_EQ(differing_tensors(a.path(), b.path()), std::vector<std::string>{});
  EXPECT_FALSE(differing_tensors(a.path(), c.path()).empty());
}

TEST(MakeModel, RewritingAFolderWithFewerShardsLeavesNoStaleIndex) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/tokenizer.json");
  TempDir out;
  auto o = tiny_options(out.path(), 0, 5);
  o.max_shard_bytes = 400000;  // several shards
  ASSERT_TRUE(quant::make_model(o).ok());
  EXPECT_TRUE(fs::exists(out.path() / "model.safetensors.index.json"));
  o.max_shard_bytes = 0;  // one file
  ASSERT_TRUE(quant::make_model(o).ok());
  EXPECT_FALSE(fs::exists(out.path() / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(out.path() / "model-00001-of-00002.safetensors"));
  auto rt = Runtime::open(options_for(out.path()));
  EXPECT_TRUE(rt.ok()) << rt.message();
}

TEST(MakeModel, QuantizedGenerationEqualsQuantizingTheBf16Model) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/tokenizer.json");
  TempDir direct, bf16, quantized;
  ASSERT_TRUE(quant::make_model(tiny_options(direct.path(), 4, 3)).ok());
  ASSERT_TRUE(quant::make_model(tiny_options(bf16.path(), 0, 3)).ok());
  quant::QuantizeOptions o;
  o.input = bf16.path();
  o.output = quantized.path();
  o.form = {4, 64};
  o.quiet = true;
  ASSERT_TRUE(quant::quantize_model(o).ok());
  EXPECT_EQ(differing_tensors(direct.path(), quantized.path()), std::vector<std::string>{});
}

TEST(MakeModel, MoePresetHasMlxStackedExpertLayout) {
  SLUICE_REQUIRE_REFERENCE("models/qwen3_moe-4bit/model.safetensors");
  TempDir out;
  auto o = tiny_options(out.path(), 4, 1);
  o.preset = "tiny-qwen3-moe";
  o.group_size = 32;
  ASSERT_TRUE(quant::make_model(o).ok());
  auto mine = SafetensorsSet::open_dir(out.path());
  auto mlx = SafetensorsSet::open_dir(test::reference_path("models/qwen3_moe-4bit"));
  ASSERT_TRUE(mine.ok() && mlx.ok());
  ASSERT_EQ(mine->tensors().size(), mlx->tensors().size());
  for (const auto& [name, t] : mlx->tensors()) {
    const TensorInfo* u = mine->find(name);
    ASSERT_NE(u, nullptr) << name;
    EXPECT_EQ(u->shape, t.shape) << name;
    EXPECT_EQ(u->dtype, t.dtype) << name;
  }
  auto doc = json::parse_file(out.path() / "config.json");
  ASSERT_TRUE(doc.ok());
  const auto& q = (*doc)["quantization"];
  EXPECT_EQ(q["model.layers.0.mlp.gate"]["bits"].GetInt(), 8);
  EXPECT_EQ(q["bits"].GetInt(), 4);
  EXPECT_EQ(q["group_size"].GetInt(), 32);
}

// gpt-oss presets have the tensors transformers' GptOssForCausalLM stores (the zoo2 checkpoint's names,
// shapes and dtypes), run, and count 2 of 8 experts as active.
TEST(MakeModel, GptOssPresetHasTransformersLayoutRunsAndCountsActiveExperts) {
  SLUICE_REQUIRE_REFERENCE("models/zoo2/gpt_oss/model.safetensors");
  TempDir out;
  auto o = tiny_options(out.path(), 0, 1);
  o.preset = "tiny-gpt-oss";
  ASSERT_TRUE(quant::make_model(o).ok());
  auto mine = SafetensorsSet::open_dir(out.path());
  auto hf = SafetensorsSet::open_dir(test::reference_path("models/zoo2/gpt_oss"));
  ASSERT_TRUE(mine.ok() && hf.ok());
  ASSERT_EQ(mine->tensors().size(), hf->tensors().size());
  for (const auto& [name, t] : hf->tensors()) {
    const TensorInfo* u = mine->find(name);
    ASSERT_NE(u, nullptr) << name;
    EXPECT_EQ(u->shape, t.shape) << name;
    EXPECT_EQ(u->dtype, t.dtype) << name;
  }
  auto config = ModelConfig::load(out.path());
  ASSERT_TRUE(config.ok()) << config.message();
  EXPECT_EQ(config->moe.routing, MoeRouting::kTopKSoftmax);
  EXPECT_EQ(config->layer_window, (std::vector<int>{8, 0}));
  EXPECT_FALSE(config->rope.truncate);

  auto rt = Runtime::open(options_for(out.path()));
  ASSERT_TRUE(rt.ok()) << rt.message();
  SequenceState seq;
  std::vector<float> logits;
  const std::vector<int32_t> tokens = {1, 500, 8000, 42, 7, 9, 11, 13, 15, 17};  // past the window of 8
  ASSERT_TRUE((*rt)->run(seq, tokens, false, logits).ok());
  ASSERT_EQ(logits.size(), 8192u);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));

  auto info = quant::inspect_model(out.path(), nullptr);
  ASSERT_TRUE(info.ok()) << info.message();
  EXPECT_EQ(info->experts, 8);
  EXPECT_EQ(info->experts_per_token, 2);
  // Per layer 8 experts of gate_up 64×128 + 128 and down 64×64 + 64: 2 of them active.
  const uint64_t per_expert = 64 * 128 + 128 + 64 * 64 + 64;
  EXPECT_EQ(info->expert_params, 2 * 8 * per_expert);
  EXPECT_EQ(info->active_params(), info->params - 2 * 6 * per_expert);

  o.bits = 4;
  auto quantized = quant::make_model(o);
  ASSERT_FALSE(quantized.ok());
  EXPECT_NE(quantized.message().find("bf16 only"), std::string::npos) << quantized.message();
}

// Qwen3.5 MoE presets: the attention, Gated DeltaNet and norm tensors transformers' Qwen3_5MoeForCausalLM
// stores (the zoo2 checkpoint's names and shapes at the same tiny widths), the experts stacked as MLX
// stacks them; the model runs, its experts stream through the uring store to the same logits, 4 of 16
// experts count as active, and the full shape is 35B with about 3B active, as its name says.
TEST(MakeModel, Qwen35MoePresetHasTransformersLayoutRunsStreamsAndCountsActiveExperts) {
  SLUICE_REQUIRE_REFERENCE("models/zoo2/qwen3_5_moe_text/model.safetensors");
  TempDir out;
  auto o = tiny_options(out.path(), 0, 1);
  o.preset = "tiny-qwen3.5-moe";
  ASSERT_TRUE(quant::make_model(o).ok());
  auto mine = SafetensorsSet::open_dir(out.path());
  auto hf = SafetensorsSet::open_dir(test::reference_path("models/zoo2/qwen3_5_moe_text"));
  ASSERT_TRUE(mine.ok() && hf.ok());
  int compared = 0;
  for (const auto& [name, t] : hf->tensors()) {
    if (name.find(".mlp.") != std::string::npos) continue;  // the zoo model has 8 experts of 32, ours 16 of 64
    const TensorInfo* u = mine->find(name);
    ASSERT_NE(u, nullptr) << name;
    EXPECT_EQ(u->shape, t.shape) << name;
    ++compared;
  }
  EXPECT_GT(compared, 20);
  const TensorInfo* gate = mine->find("model.layers.0.mlp.switch_mlp.gate_proj.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->shape, (std::vector<int64_t>{16, 64, 64}));
  ASSERT_NE(mine->find("model.layers.3.mlp.shared_expert_gate.weight"), nullptr);

  auto config = ModelConfig::load(out.path());
  ASSERT_TRUE(config.ok()) << config.message();
  EXPECT_EQ(config->linear.conv_kernel, 4);
  const std::vector<int32_t> tokens = {1, 500, 8000, 42, 7, 9, 11, 13, 15, 17};
  std::vector<std::vector<float>> logits;
  for (const char* store : {"resident", "uring"}) {
    auto opts = options_for(out.path());
    opts.expert_store = store;
    opts.expert_cache_mb = 1;
    auto rt = Runtime::open(opts);
    ASSERT_TRUE(rt.ok()) << store << ": " << rt.message();
    SequenceState seq;
    std::vector<float> l;
    ASSERT_TRUE((*rt)->run(seq, tokens, false, l).ok()) << store;
    ASSERT_EQ(l.size(), 8192u);
    for (float v : l) ASSERT_TRUE(std::isfinite(v));
    if (std::string(store) == "uring") {
      ASSERT_NE((*rt)->expert_store(), nullptr);
      EXPECT_GT((*rt)->expert_store()->stats().bytes_read, 0u) << "the experts came from the file";
    }
    logits.push_back(std::move(l));
  }
  EXPECT_EQ(logits[0], logits[1]) << "experts read through the uring store compute the same logits";

  auto info = quant::inspect_model(out.path(), nullptr);
  ASSERT_TRUE(info.ok()) << info.message();
  EXPECT_EQ(info->experts, 16);
  EXPECT_EQ(info->experts_per_token, 4);
  const uint64_t per_expert = 3 * 64 * 64;  // gate, up, down of 64 × 64
  EXPECT_EQ(info->expert_params, 4 * 16 * per_expert);
  EXPECT_EQ(info->active_params(), info->params - 4 * 12 * per_expert);

  // The 4-bit form: the shared expert's gate is a router (8 bits), the model runs.
  TempDir q4;
  auto oq = o;
  oq.output = q4.path();
  oq.bits = 4;
  ASSERT_TRUE(quant::make_model(oq).ok());
  auto doc = json::parse_file(q4.path() / "config.json");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ((*doc)["quantization"]["model.layers.0.mlp.shared_expert_gate"]["bits"].GetInt(), 8);
  auto rt = Runtime::open(options_for(q4.path()));
  ASSERT_TRUE(rt.ok()) << rt.message();
  SequenceState seq;
  std::vector<float> l;
  ASSERT_TRUE((*rt)->run(seq, tokens, false, l).ok());
  for (float v : l) ASSERT_TRUE(std::isfinite(v));

  const quant::ModelPreset* full = quant::find_preset("qwen3.5-35b-a3b");
  ASSERT_NE(full, nullptr);
  uint64_t params = 0, experts = 0;
  for (const auto& t : quant::preset_tensors(*full)) {
    uint64_t n = 1;
    for (auto d : t.shape) n *= static_cast<uint64_t>(d);
    params += n;
    if (t.name.find("switch_mlp") != std::string::npos) experts += n;
  }
  const uint64_t active = params - experts + experts / 256 * 8;
  EXPECT_GT(params, 34'000'000'000u);
  EXPECT_LT(params, 36'000'000'000u);
  EXPECT_GT(active, 2'500'000'000u);
  EXPECT_LT(active, 3'500'000'000u);
}

TEST(MakeModel, TheDraftPresetHasLlama3sVocabularyAndLlama32_1BsParameters) {
  // llama3.2-1b drafts for llama3-8b: the same vocabulary, and Meta's published 1,235,814,400
  // parameters (tied embeddings).
  const quant::ModelPreset* draft = quant::find_preset("llama3.2-1b");
  const quant::ModelPreset* target = quant::find_preset("llama3-8b");
  ASSERT_TRUE(draft && target);
  EXPECT_EQ(draft->vocab, target->vocab);
  uint64_t params = 0;
  for (const auto& t : quant::preset_tensors(*draft)) {
    uint64_t n = 1;
    for (auto d : t.shape) n *= static_cast<uint64_t>(d);
    params += n;
  }
  EXPECT_EQ(params, 1235814400u);
}

TEST(MakeModel, UnknownPresetNamesTheKnownOnes) {
  TempDir out;
  auto o = tiny_options(out.path(), 0, 0);
  o.preset = "gpt-7";
  auto r = quant::make_model(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("qwen2-0.5b"), std::string::npos) << r.message();
}

TEST(Info, CountsLogicalParametersBitsPerWeightAndKvBytes) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2-4bit/model.safetensors");
  auto full = quant::inspect_model(test::reference_path("models/tiny-code-qwen2"), nullptr);
  auto q4 = quant::inspect_model(test::reference_path("models/tiny-code-qwen2-4bit"), nullptr);
  auto q8 = quant::inspect_model(test::reference_path("models/tiny-code-qwen2-8bit"), nullptr);
  ASSERT_TRUE(full.ok() && q4.ok() && q8.ok()) << full.message() << q4.message() << q8.message();
  EXPECT_EQ(full->architecture, "qwen2");
  EXPECT_EQ(q4->params, full->params);
  EXPECT_EQ(q8->params, full->params);
  EXPECT_NEAR(full->bits_per_weight(), 16.0, 1e-9);
  EXPECT_NEAR(q4->quantized_bits_per_weight(), 4.5, 1e-9);  // 4 + (16 + 16) / 64
  EXPECT_NEAR(q8->quantized_bits_per_weight(), 8.5, 1e-9);
  EXPECT_EQ(q4->forms.at("4-bit g64"), 29);
  ASSERT_GE(q4->kv.size(), 2u);
  EXPECT_EQ(q4->kv[0].name, "f32");
  EXPECT_EQ(q4->kv[0].bytes_per_token, 4u * 2 * 64 * 2 * 4);  // layers × KV heads × head_dim × (K, V) × 4 B
  EXPECT_EQ(q4->kv[1].bytes_per_token, 4u * 2 * 64 * 2 * 2);
}

// ---- malformed quantized files ------------------------------------------------------------------

// A copy of the 4-bit model with one tensor's shape changed (its data cut or zero-padded to fit) and
// optionally a different quantization block.
void write_variant(const fs::path& out, const std::string& tensor, std::vector<int64_t> shape, DType dtype,
                   int config_bits = 4) {
  const fs::path src = test::reference_path("models/tiny-code-qwen2-4bit");
  auto set = SafetensorsSet::open_dir(src);
  ASSERT_TRUE(set.ok());
  std::vector<quant::TensorPlan> plan;
  for (const auto& [name, t] : set->tensors())
    plan.push_back(name == tensor ? quant::TensorPlan{name, dtype, shape} : quant::TensorPlan{name, t.dtype, t.shape});
  auto w = quant::SafetensorsWriter::create(out, plan);
  ASSERT_TRUE(w.ok()) << w.message();
  for (const auto& p : plan) {
    const TensorInfo* t = set->find(p.name);
    std::vector<std::byte> bytes(p.bytes(), std::byte{0});
    std::memcpy(bytes.data(), t->data, std::min<uint64_t>(t->bytes, bytes.size()));
    ASSERT_TRUE(w->append(bytes).ok());
  }
  ASSERT_TRUE(w->finish().ok());
  auto config = json::parse_file(src / "config.json");
  ASSERT_TRUE(config.ok());
  quant::set_quantization(*config, {config_bits, 64}, {});
  ASSERT_TRUE(quant::write_json(*config, out / "config.json").ok());
  ASSERT_TRUE(quant::copy_tokenizer_files(src, out).ok());
}

std::string open_error(const fs::path& dir) {
  auto rt = Runtime::open(options_for(dir));
  return rt.ok() ? "" : rt.message();
}

TEST(MalformedQuantized, ScalesOfTheWrongShapeNameTheTensor) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2-4bit/model.safetensors");
  TempDir out;
  write_variant(out.path(), "model.layers.1.self_attn.q_proj.scales", {384, 5}, DType::kBF16);
  const std::string e = open_error(out.path());
  EXPECT_NE(e.find("model.layers.1.self_attn.q_proj.scales"), std::string::npos) << e;
}

TEST(MalformedQuantized, PackedWordsOfTheWrongWidthNameTheTensor) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2-4bit/model.safetensors");
  TempDir out;
  write_variant(out.path(), "model.layers.2.mlp.down_proj.weight", {384, 96}, DType::kU32);
  const std::string e = open_error(out.path());
  EXPECT_NE(e.find("model.layers.2.mlp.down_proj.weight"), std::string::npos) << e;
}

TEST(MalformedQuantized, FloatWeightBesideScalesIsAnError) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2-4bit/model.safetensors");
  TempDir out;
  write_variant(out.path(), "model.layers.0.self_attn.k_proj.weight", {128, 96}, DType::kBF16);
  const std::string e = open_error(out.path());
  EXPECT_NE(e.find("model.layers.0.self_attn.k_proj.weight"), std::string::npos) << e;
}

TEST(MalformedQuantized, UnsupportedBitsAreAClearError) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2-4bit/model.safetensors");
  TempDir out;
  write_variant(out.path(), "model.norm.weight", {384}, DType::kBF16, 7);
  const std::string e = open_error(out.path());
  EXPECT_NE(e.find("bits"), std::string::npos) << e;
}

TEST(MalformedQuantized, ConfigBitsThatDisagreeWithTheShapesNameTheTensor) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2-4bit/model.safetensors");
  TempDir out;
  write_variant(out.path(), "model.norm.weight", {384}, DType::kBF16, 8);  // the files are 4-bit
  const std::string e = open_error(out.path());
  EXPECT_NE(e.find("model.embed_tokens.weight"), std::string::npos) << e;
}

TEST(QuantizationConfig, PerModuleOverridesAndFalseEntriesParse) {
  TempDir dir;
  fs::create_directories(dir.path());
  std::ofstream(dir.path() / "config.json") << R"({"model_type":"qwen2","hidden_size":64,"intermediate_size":128,
    "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":100,
    "quantization":{"group_size":32,"bits":4,"model.layers.0.mlp.gate":{"group_size":64,"bits":8},
                    "lm_head":false}})";
  auto c = ModelConfig::load(dir.path());
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->quantization.for_module("model.layers.0.mlp.gate").bits, 8);
  EXPECT_EQ(c->quantization.for_module("model.layers.0.mlp.gate").group_size, 64);
  EXPECT_EQ(c->quantization.for_module("lm_head").bits, 0);
  EXPECT_EQ(c->quantization.for_module("model.layers.1.self_attn.q_proj").bits, 4);
  EXPECT_EQ(c->quantization.for_module("model.layers.1.self_attn.q_proj").group_size, 32);
}

}  // namespace
}  // namespace sluice
