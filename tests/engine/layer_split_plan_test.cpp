// Layer partitioning's policy (engine/layer_split.h) and its mechanism without a GPU: the values of
// --gpu-layers and --devices, the even split, --gpu-layers auto against device budgets, the weight
// footprint the budgets are compared with, and a model split over two CPU backend instances (one
// KV cache each, the hidden state moving between them through the host) against the golden.
#include <memory>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kv_cache.h"
#include "engine/layer_split.h"
#include "golden.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "plugin/backend_handle.h"
#include "plugin/plugin_registry.h"
#include "reference.h"
#include "util/json.h"

namespace sluice {
namespace {

TEST(GpuLayersOption, ParsesEmptyCountsAndAutoAndRefusesTheRest) {
  EXPECT_EQ(GpuLayers::parse("")->kind, GpuLayers::Kind::kAll);
  EXPECT_EQ(GpuLayers::parse("auto")->kind, GpuLayers::Kind::kAuto);
  auto n = GpuLayers::parse("12");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->kind, GpuLayers::Kind::kCount);
  EXPECT_EQ(n->count, 12u);
  EXPECT_EQ(GpuLayers::parse("0")->count, 0u);
  for (const char* bad : {"-1", "1.5", "12 ", "x", "all", "99999999999"}) {
    auto r = GpuLayers::parse(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.message().find("--gpu-layers"), std::string::npos);
  }
}

TEST(DevicesOption, ListsBackendSpecsInOrderAndRefusesTheCpuAutoAndEmptyEntries) {
  auto d = parse_devices("opencl:0:0,opencl:0:1,./libsluice-backend-x.so");
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(*d, (std::vector<std::string>{"opencl:0:0", "opencl:0:1", "./libsluice-backend-x.so"}));
  for (const char* bad : {"", "opencl:0,", ",opencl:0", "opencl:0,cpu", "cpu:0", "auto"}) EXPECT_FALSE(parse_devices(bad).ok()) << bad;
}

TEST(SplitEvenly, GivesTheRemainderToTheFirstDevices) {
  EXPECT_EQ(split_evenly(10, 3), (std::vector<uint32_t>{4, 3, 3}));
  EXPECT_EQ(split_evenly(4, 2), (std::vector<uint32_t>{2, 2}));
  EXPECT_EQ(split_evenly(1, 2), (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(split_evenly(32, 1), (std::vector<uint32_t>{32}));
}

TEST(UsableDeviceBytes, KeepsATenthAndTheActivationsAndPrefersReportedFreeMemory) {
  EXPECT_EQ(usable_device_bytes(1000, 0, 50), 850u);   // OpenCL: free unknown, total used
  EXPECT_EQ(usable_device_bytes(1000, 600, 50), 450u);  // the free memory, less the same reserve
  EXPECT_EQ(usable_device_bytes(1000, 0, 2000), 0u);
}

LayerCosts costs(uint32_t layers, uint64_t each, uint64_t embed, uint64_t head, bool tied) {
  LayerCosts c;
  c.layer_bytes.assign(layers, each);
  c.embed_bytes = embed;
  c.head_bytes = head;
  c.tied_head = tied;
  return c;
}

TEST(AutoGpuLayers, TakesAsManyLayersAsFitWithTheEmbedding) {
  const std::vector<uint64_t> one{1000};
  EXPECT_EQ(auto_gpu_layers(costs(8, 100, 250, 0, false), one), 7u);  // 250 + 7 × 100 ≤ 1000 < 250 + 8 × 100
  EXPECT_EQ(auto_gpu_layers(costs(4, 100, 250, 0, false), one), 4u);
  EXPECT_EQ(auto_gpu_layers(costs(4, 1000, 1, 0, false), one), 0u);  // not one layer
}

TEST(AutoGpuLayers, EveryLayerOnlyWhenTheHeadFitsToo) {
  const std::vector<uint64_t> one{1000};
  EXPECT_EQ(auto_gpu_layers(costs(4, 100, 200, 400, false), one), 4u);  // 200 + 400 + 400
  EXPECT_EQ(auto_gpu_layers(costs(4, 100, 200, 401, false), one), 3u);  // the head stays on the CPU
  // Tied on one device: the head reads the embedding already there.
  EXPECT_EQ(auto_gpu_layers(costs(4, 100, 500, 10, true), one), 4u);
}

TEST(AutoGpuLayers, SplitsEvenlyAndIsBoundByTheSmallestShare) {
  // Two devices, 8 layers of 100: 4 each; the first also holds the embedding.
  EXPECT_EQ(auto_gpu_layers(costs(8, 100, 100, 0, false), std::vector<uint64_t>{500, 400}), 8u);
  // The second device holds 2 layers: the even split stops at 3 + 2 (the first takes the remainder).
  EXPECT_EQ(auto_gpu_layers(costs(8, 100, 100, 0, false), std::vector<uint64_t>{500, 200}), 5u);
  // A tied head on the last device needs the embedding table there too.
  EXPECT_EQ(auto_gpu_layers(costs(4, 100, 300, 0, true), std::vector<uint64_t>{1000, 500}), 4u);
  EXPECT_EQ(auto_gpu_layers(costs(4, 100, 300, 0, true), std::vector<uint64_t>{1000, 499}), 3u);
}

// The footprint accounts for every weight byte: dense weights are the embedding, the head and the
// layers; a MoE model's routed experts are left out (the store serves them).
TEST(WeightFootprint, SumsToTheDenseWeights) {
  for (const char* model : {"tiny-code-qwen2", "tiny-code-qwen2-4bit", "zoo/qwen3_moe"}) {
    SLUICE_REQUIRE_REFERENCE(std::string("models/") + model + "/config.json");
    const auto dir = test::reference_path(std::string("models/") + model);
    auto config = ModelConfig::load(dir);
    ASSERT_TRUE(config.ok()) << config.message();
    auto tensors = SafetensorsSet::open_dir(dir);
    ASSERT_TRUE(tensors.ok()) << tensors.message();
    auto f = Transformer::footprint(*config, *tensors);
    ASSERT_TRUE(f.ok()) << f.message();
    ASSERT_EQ(f->layer_bytes.size(), static_cast<std::size_t>(config->num_layers));
    const uint64_t sum = std::accumulate(f->layer_bytes.begin(), f->layer_bytes.end(), uint64_t{0}) + f->embed_bytes + f->head_bytes;
    uint64_t experts = 0;
    if (config->moe.enabled()) {
      auto layout = ExpertLayout::find(*config, *tensors);
      ASSERT_TRUE(layout.ok()) << layout.message();
      experts = layout->total_bytes();
      EXPECT_GT(experts, 0u);
    }
    EXPECT_EQ(sum, tensors->total_bytes() - experts) << model;
    EXPECT_EQ(f->tied_head, config->tie_word_embeddings) << model;
    for (uint64_t b : f->layer_bytes) EXPECT_EQ(b, f->layer_bytes.front()) << model << ": identical layers";
  }
}

// Two instances of the CPU backend, layers 0-1 and 2-3 of tiny-code-qwen2: the same logits as the
// golden, through one KV cache per stage and the host hop between them.
TEST(TwoCpuStages, LastLogitsMatchTransformers) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/golden.json");
  const auto dir = test::reference_path("models/tiny-code-qwen2");
  auto golden = json::parse_file(dir / "golden.json");
  ASSERT_TRUE(golden.ok());
  auto config = ModelConfig::load(dir);
  ASSERT_TRUE(config.ok());
  auto tensors = SafetensorsSet::open_dir(dir);
  ASSERT_TRUE(tensors.ok());
  PluginRegistry registry;
  registry.scan(test::binary_path("lib"));
  const auto* rec = registry.find(SL_PLUGIN_BACKEND, "cpu");
  ASSERT_NE(rec, nullptr);
  const auto* api = static_cast<const sl_backend_api*>(rec->descriptor->api);
  auto a = BackendHandle::open(api, "cpu", "", 2);
  auto b = BackendHandle::open(api, "cpu", "", 2);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<StageSpec> stages{{a->get(), 2}, {b->get(), 2}};
  auto model = Transformer::create(*config, *tensors, stages);
  ASSERT_TRUE(model.ok()) << model.message();
  const std::vector<KvStage> kv_stages{{a->get(), 2}, {b->get(), 2}};
  auto codecs = KvCodecChoice::parse("f32");
  ASSERT_TRUE(codecs.ok());
  auto kv = KvCache::create(kv_stages, registry, *config, *codecs, 256);
  ASSERT_TRUE(kv.ok()) << kv.message();
  ASSERT_EQ((*kv)->caches().size(), 2u);

  // One KV cache for a two-stage model is a clear error, not a wrong answer.
  ForwardBatch probe;
  probe.tokens = {1};
  probe.positions = {0};
  probe.seq_slots = {0};
  std::vector<float> logits;
  EXPECT_FALSE((*model)->forward(probe, (*kv)->raw(), logits).ok());

  for (const auto& prompt : (*golden)["prompts"].GetArray()) {
    const auto ids = test::golden_ids(prompt["ids"]);
    auto pages = (*kv)->pages().allocate(static_cast<uint32_t>((ids.size() + 15) / 16));
    ASSERT_TRUE(pages.ok());
    ForwardBatch batch;
    batch.tokens = ids;
    for (std::size_t i = 0; i < ids.size(); ++i) batch.positions.push_back(static_cast<int32_t>(i));
    batch.seq_slots.assign(ids.size(), 0);
    batch.max_pages = static_cast<uint32_t>(pages->size());
    batch.page_table = *pages;
    batch.logit_rows = {static_cast<uint32_t>(ids.size() - 1)};
    ASSERT_TRUE((*model)->forward(batch, (*kv)->caches(), logits).ok());
    (*kv)->pages().release(*pages);
    const auto [max_err, max_abs] = test::logit_distance(logits, prompt["last_logits"]);
    EXPECT_LE(max_err, 1e-3 * max_abs) << prompt["text"].GetString();
  }
}

}  // namespace
}  // namespace sluice
