// DeepSeek-V3's multi-head latent attention keeps the latent in the KV cache (blocks::mla_attention):
// - the cache holds one KV head a layer, K = [latent | k_pe] (kv_lora_rank + qk_rope_head_dim values)
//   and V = the latent (kv_lora_rank), not every head's expanded K and V — in the engine's accounting
//   and in `sluice info`'s estimate alike;
// - prefill in short chunks and a prompt whose first page comes from the prefix cache still give the
//   HF transformers goldens' greedy ids (zoo2/deepseek_v3: 4 heads, kv_lora_rank 16, rope 8, nope 16, v 16);
// - every KV codec takes DeepSeek-V3's latent widths (K 512 + 64 = 576, V 512);
// - a backend table of ABI 2.3 (a plugin built before HEAD_MATMUL) gets the expanded form: its cache
//   holds every head's K and V, and its logits are the latent form's (to float32 rounding) — for the
//   zoo model, and for a random DeepSeek-shaped model (`make-model tiny-deepseek-v3`) in bf16 and with
//   kv_b and every other projection 4- and 8-bit affine, on the CPU and (where it loads) OpenCL backends.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/runtime.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "plugin/backend_handle.h"
#include "plugin/expert_store_handle.h"
#include "plugin/plugin_registry.h"
#include "plugin/resident_store.h"
#include "quant/random_model.h"
#include "golden_run.h"
#include "model_test_files.h"
#include "opencl_probe.h"
#include "quant/model_info.h"
#include "reference.h"
#include "util/json.h"

namespace sluice {
namespace {

const std::string kModel = "zoo2/deepseek_v3";
constexpr int kLayers = 3, kHeads = 4, kLatent = 16, kRope = 8, kNope = 16, kValue = 16;

TEST(MlaLatentCache, TheCacheHoldsOneLatentHeadALayerNotEveryHeadsExpandedKv) {
  SLUICE_REQUIRE_REFERENCE("models/" + kModel + "/config.json");
  for (const auto& [codec, element_bytes] : {std::pair{std::string("f32"), 4}, {std::string("f16"), 2}}) {
    SCOPED_TRACE(codec);
    auto rt = Runtime::open(test::golden_options(kModel, "cpu", codec, 256));
    ASSERT_TRUE(rt.ok()) << rt.message();
    EXPECT_TRUE((*rt)->config().mla.latent_cache) << "the CPU backend runs HEAD_MATMUL";
    auto engine = Engine::create(test::golden_options(kModel, "cpu", codec, 256));
    ASSERT_TRUE(engine.ok()) << engine.message();
    const double latent = double(kLayers) * ((kLatent + kRope) + kLatent) * element_bytes;
    const double expanded = double(kLayers) * kHeads * ((kNope + kRope) + kValue) * element_bytes;
    EXPECT_EQ((*engine)->metrics().kv_bytes_per_token, latent) << "expanded per head it would be " << expanded;
  }
  auto info = quant::inspect_model(test::reference_path("models/" + kModel), nullptr);
  ASSERT_TRUE(info.ok()) << info.message();
  ASSERT_GE(info->kv.size(), 2u);
  EXPECT_EQ(info->kv[1].name, "f16");
  EXPECT_EQ(info->kv[1].bytes_per_token, uint64_t(kLayers) * ((kLatent + kRope) + kLatent) * 2);
}

rapidjson::Document golden() {
  auto g = json::parse_file(test::reference_path("models/" + kModel + "/golden.json"));
  EXPECT_TRUE(g.ok()) << g.message();
  return std::move(*g);
}

std::vector<int32_t> greedy(Engine& engine, const std::vector<int32_t>& prompt, int n, int* cached = nullptr) {
  GenerationRequest req;
  req.prompt_ids = prompt;
  req.max_tokens = n;
  req.sampling.temperature = 0;
  req.ignore_eos = true;
  auto result = engine.generate(req);
  EXPECT_NE(result.finish, FinishReason::kError) << result.error;
  if (cached) *cached = result.stats.cached_tokens;
  return result.ids;
}

// The real model's latent widths fit every codec's rules (q4: multiples of 32; turbo: of 16 up to 1024,
// cut into 256 + 256 + 64 rotation blocks; q8: of 8). The zoo model's K of 24 is refused by q4 and
// the turbo codecs — as its expanded heads of 24 were.
TEST(MlaLatentCache, EveryCodecTakesDeepSeekV3sLatentWidths) {
  PluginRegistry registry;
  registry.scan(test::binary_path("lib"));
  for (const char* codec : {"f32", "f16", "q8", "q4", "turbo2", "turbo3", "turbo4", "turbo-prod"}) {
    if (std::string(codec) != "f32" && std::string(codec) != "f16" && !registry.find(SL_PLUGIN_KVCODEC, codec)) {
      ADD_FAILURE() << codec << " is not built";
      continue;
    }
    for (auto [width, role] : {std::pair{576u, SL_KV_KEYS}, {512u, SL_KV_VALUES}}) {
      auto c = KvCodec::create(registry, codec, "", width, role);
      EXPECT_TRUE(c.ok()) << codec << " at " << width << ": " << c.message();
    }
  }
}

TEST(MlaLatentCache, ChunkedPrefillGivesTheGoldensGreedyIds) {
  SLUICE_REQUIRE_REFERENCE("models/" + kModel + "/golden.json");
  const auto g = golden();
  EngineOptions o = test::golden_options(kModel, "cpu", "f32", 256);
  o.prefill_size = 5;  // every prompt over several passes, each attending the latents the earlier ones wrote
  auto engine = Engine::create(o);
  ASSERT_TRUE(engine.ok()) << engine.message();
  for (const auto& prompt : g["prompts"].GetArray()) {
    const auto want = test::golden_ids(prompt["greedy_ids"]);
    EXPECT_EQ(greedy(**engine, test::golden_ids(prompt["ids"]), int(want.size())), want) << prompt["text"].GetString();
  }
}

TEST(MlaLatentCache, APromptReusingACachedPrefixGivesTheGoldensContinuation) {
  SLUICE_REQUIRE_REFERENCE("models/" + kModel + "/golden.json");
  const auto g = golden();
  const auto& prompt = g["prompts"][0];  // 22 prompt ids: its first page of 16 is cached after the first request
  const auto ids = test::golden_ids(prompt["ids"]), want = test::golden_ids(prompt["greedy_ids"]);
  ASSERT_GE(ids.size(), 16u);
  auto engine = Engine::create(test::golden_options(kModel, "cpu", "f32", 256));
  ASSERT_TRUE(engine.ok()) << engine.message();
  EXPECT_EQ(greedy(**engine, ids, int(want.size())), want);
  // The prompt with the first 6 greedy ids appended continues as the golden does from there.
  std::vector<int32_t> longer = ids;
  longer.insert(longer.end(), want.begin(), want.begin() + 6);
  int cached = 0;
  EXPECT_EQ(greedy(**engine, longer, int(want.size()) - 6, &cached), std::vector<int32_t>(want.begin() + 6, want.end()));
  EXPECT_GE(cached, 16) << "the first page came from the prefix cache";
}

// The model in `dir` on one backend (`name`) opened over `api`: whether it keeps the latent, the
// cache's bytes a token, and the logits of a prefill of 21 positions and two decode steps.
struct FormRun {
  bool latent = false;
  double kv_bytes_per_token = 0;
  std::vector<float> logits;
};

FormRun run_form(const sl_backend_api* api, const std::string& name, PluginRegistry& registry, const std::filesystem::path& dir) {
  FormRun out;
  auto config = ModelConfig::load(dir);
  auto tensors = SafetensorsSet::open_dir(dir);
  EXPECT_TRUE(config.ok() && tensors.ok());
  if (!config.ok() || !tensors.ok()) return out;
  auto be = BackendHandle::open(api, name, "", 2);
  EXPECT_TRUE(be.ok()) << be.message();
  if (!be.ok()) return out;
  const StageSpec spec{be->get(), uint32_t(config->num_layers)};
  auto m = Transformer::create(*config, *tensors, std::span(&spec, 1));
  EXPECT_TRUE(m.ok()) << m.message();
  if (!m.ok()) return out;
  std::vector<std::string> paths;
  std::vector<const char*> c_paths;
  std::unique_ptr<ExpertStoreHandle> store;
  if (const auto& layout = (*m)->expert_layout()) {  // the zoo model's routed experts
    for (const auto& f : tensors->files()) paths.push_back(f.string());
    for (const auto& p : paths) c_paths.push_back(p.c_str());
    sl_expertstore_config cfg{};
    cfg.struct_size = sizeof(cfg);
    cfg.n_files = static_cast<uint32_t>(c_paths.size());
    cfg.files = c_paths.data();
    cfg.n_layers = layout->n_moe_layers();
    cfg.n_experts = layout->n_experts();
    cfg.n_parts = layout->n_parts();
    cfg.parts = layout->parts().data();
    cfg.options = "";
    auto opened = ExpertStoreHandle::open(builtin_resident_store(), "resident", cfg);
    EXPECT_TRUE(opened.ok()) << opened.message();
    if (!opened.ok()) return out;
    store = std::move(*opened);
    auto attached = (*m)->attach_expert_store(store.get());
    EXPECT_TRUE(attached.ok()) << attached.message();
    if (!attached.ok()) return out;
  }
  out.latent = (*m)->config().mla.latent_cache;
  const KvStage stage{be->get(), spec.n_layers};
  auto kv = KvCache::create(std::span(&stage, 1), registry, (*m)->config(), *KvCodecChoice::parse("f32"), 64);
  EXPECT_TRUE(kv.ok()) << kv.message();
  if (!kv.ok()) return out;
  out.kv_bytes_per_token = (*kv)->bytes_per_token();
  auto pages = (*kv)->pages().allocate(2);
  EXPECT_TRUE(pages.ok());
  if (!pages.ok()) return out;
  const int32_t vocab = config->vocab_size;
  int32_t next = 0;
  for (int32_t count : {21, 1, 1}) {
    ForwardBatch b;
    b.max_pages = 2;
    b.page_table = *pages;
    for (int32_t i = 0; i < count; ++i, ++next) {
      b.tokens.push_back((next * 977 + 7) % vocab);
      b.positions.push_back(next);
      b.seq_slots.push_back(0);
    }
    b.logit_rows = {uint32_t(count - 1)};
    std::vector<float> logits;
    auto s = (*m)->forward(b, (*kv)->caches(), logits);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) return out;
    out.logits.insert(out.logits.end(), logits.begin(), logits.end());
  }
  (*kv)->pages().release(*pages);
  return out;
}

// The latent and the expanded form of the model in `dir` on backend `name`: the latent where the
// table is the plugin's own (2.4), the expanded one for the same plugin declared 2.3.
struct BothForms {
  FormRun latent, expanded;
};

BothForms both_forms(const std::string& name, const std::filesystem::path& dir) {
  PluginRegistry registry;
  registry.scan(test::binary_path("lib"));
  const auto* rec = registry.find(SL_PLUGIN_BACKEND, name);
  EXPECT_NE(rec, nullptr) << name;
  if (!rec) return {};
  const auto* api = static_cast<const sl_backend_api*>(rec->descriptor->api);
  sl_backend_api older = *api;
  older.abi_version = SL_ABI_VERSION_OF(2, 3);
  return {run_form(api, name, registry, dir), run_form(&older, name, registry, dir)};
}

// The goldens' bound (1e-3 × max|logit|) is for either form against transformers; the two forms
// against each other differ in float32 summation order (1e-6 of the largest logit here), and where the
// CPU backend multiplies quantized weights, in its products' int16 rounding of each activation group
// (quant_kernels.h), which moves these logits by up to ~1.5e-4 of the largest in either form — the
// OpenCL backend's float products put its two forms within 1e-6 of each other at 4 and 8 bits, and
// the CPU's latent and expanded logits each 4-6e-4 from them.
void expect_same_logits(const BothForms& f, float bound = 1e-4f) {
  EXPECT_TRUE(f.latent.latent);
  EXPECT_FALSE(f.expanded.latent);
  ASSERT_EQ(f.latent.logits.size(), f.expanded.logits.size());
  ASSERT_FALSE(f.latent.logits.empty());
  float max_abs = 0, max_err = 0;
  for (std::size_t i = 0; i < f.latent.logits.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(f.expanded.logits[i]));
    max_err = std::max(max_err, std::abs(f.latent.logits[i] - f.expanded.logits[i]));
  }
  EXPECT_LE(max_err, bound * max_abs);
}

TEST(MlaLatentCache, ABackendWithoutHeadMatmulRunsTheExpandedFormToTheSameLogits) {
  SLUICE_REQUIRE_REFERENCE("models/" + kModel + "/config.json");
  const BothForms f = both_forms("cpu", test::reference_path("models/" + kModel));
  EXPECT_EQ(f.latent.kv_bytes_per_token, double(kLayers) * ((kLatent + kRope) + kLatent) * 4);
  EXPECT_EQ(f.expanded.kv_bytes_per_token, double(kLayers) * kHeads * ((kNope + kRope) + kValue) * 4);
  expect_same_logits(f);
}

// kv_b quantized as MLX stores it (and the zoo model's kv_b of 16 columns cannot be: groups are 32 or
// more): a random model of DeepSeek-V3's attention whose widths are all multiples of 32.
TEST(MlaLatentCache, QuantizedKvBGivesTheExpandedFormsLogitsOnEveryBackend) {
  std::vector<std::string> backends = {"cpu"};
  if (test::opencl_unavailable().empty()) backends.push_back("opencl");
  for (int bits : {0, 4, 8}) {
    TempDir dir;
    quant::MakeModelOptions o;
    o.preset = "tiny-deepseek-v3";
    o.output = dir.path();
    o.bits = bits;
    o.group_size = 32;
    o.tokenizer_from = test::reference_path("models/tiny-code-qwen2");
    o.quiet = true;
    auto made = quant::make_model(o);
    ASSERT_TRUE(made.ok()) << made.message();
    auto config = ModelConfig::load(dir.path());
    ASSERT_TRUE(config.ok()) << config.message();
    EXPECT_EQ(config->quantization.bits, bits);
    for (const auto& backend : backends) {
      SCOPED_TRACE(backend + (bits ? ", " + std::to_string(bits) + "-bit" : std::string(", bf16")));
      const BothForms f = both_forms(backend, dir.path());
      // 2 layers, one latent head of K 64 + 16 and V 64, f32; expanded: 4 heads of K 16 + 16 and V 32.
      EXPECT_EQ(f.latent.kv_bytes_per_token, 2.0 * ((64 + 16) + 64) * 4);
      EXPECT_EQ(f.expanded.kv_bytes_per_token, 2.0 * 4 * ((16 + 16) + 32) * 4);
      expect_same_logits(f, bits && backend == "cpu" ? 1e-3f : 1e-4f);
    }
  }
}

}  // namespace
}  // namespace sluice
