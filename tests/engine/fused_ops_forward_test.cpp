// The forward pass with the CPU backend's fusion pass (products of one input joined for q/k/v and
// gate/up, each residual add joined with the norm after it) against the same pass run node by node
// (a table whose graph_compute hands the backend one node at a time, so nothing can join): the
// logits must be the same bits. Dense, quantized, q/k-normed and MoE models; prefill and decode
// batches of two sequences; a model split in stages, also with one stage run node by node.
#include <cstddef>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kv_cache.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "plugin/backend_handle.h"
#include "plugin/expert_store_handle.h"
#include "plugin/plugin_registry.h"
#include "plugin/resident_store.h"
#include "reference.h"

namespace sluice {
namespace {

// The CPU plugin's table as it is, and with a graph_compute that runs each node as a graph of its own.
const sl_backend_api* g_real = nullptr;

sl_status node_by_node(sl_backend* be, const sl_graph* g, const sl_step* step, sl_error* err) {
  for (uint32_t i = 0; i < g->n_nodes; ++i) {
    sl_graph one = *g;
    one.nodes = g->nodes + i;
    one.n_nodes = 1;
    if (sl_status s = g_real->graph_compute(be, &one, step, err); s != SL_OK) return s;
  }
  return SL_OK;
}

// A device that holds only so many wrapped buffers at once (a GPU without room for every expert):
// once armed, wrap_host fails while `g_wrap_room` buffers wrapped since arming are alive.
int g_wrap_room = -1;  // -1: not armed
std::set<const sl_buffer*> g_wrapped_since_armed;

sl_status wrap_with_room(sl_backend* be, const void* host, uint64_t bytes, sl_buffer** out, sl_error* err) {
  if (g_wrap_room >= 0 && static_cast<int>(g_wrapped_since_armed.size()) >= g_wrap_room) {
    std::snprintf(err->message, sizeof(err->message), "out of device memory (test)");
    return SL_ERR_OUT_OF_MEMORY;
  }
  const sl_status s = g_real->wrap_host(be, host, bytes, out, err);
  if (s == SL_OK && g_wrap_room >= 0) g_wrapped_since_armed.insert(*out);
  return s;
}

void free_with_room(sl_backend* be, sl_buffer* b) {
  g_wrapped_since_armed.erase(b);
  g_real->free(be, b);
}

// A device whose largest allocation is smaller than one stack of experts.
sl_status small_allocations(const sl_backend* be, sl_device_info* out, sl_error* err) {
  const sl_status s = g_real->get_device_info(be, out, err);
  out->max_alloc = 4096;
  return s;
}

struct Tables {
  const sl_backend_api* fused = nullptr;
  sl_backend_api single{};
  sl_backend_api small_device{};
  sl_backend_api small_allocations{};
};

class FusedOpsForward : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.scan(test::binary_path("lib"));
    const auto* rec = registry_.find(SL_PLUGIN_BACKEND, "cpu");
    ASSERT_NE(rec, nullptr);
    tables_.fused = static_cast<const sl_backend_api*>(rec->descriptor->api);
    g_real = tables_.fused;
    tables_.single = *tables_.fused;
    tables_.single.graph_compute = node_by_node;
    tables_.small_device = *tables_.fused;
    tables_.small_device.wrap_host = wrap_with_room;
    tables_.small_device.free = free_with_room;
    tables_.small_allocations = *tables_.fused;
    tables_.small_allocations.get_device_info = small_allocations;
  }

  struct Stage {
    const sl_backend_api* api;
    uint32_t n_layers;  // 0: the rest
  };

  // The logits of every row of a fixed series of passes, with the model's layers on CPU backend
  // instances opened over the given tables.
  // device_routing false: every MoE pass routes on the host (Transformer::set_device_routing).
  std::vector<float> logits_of(const std::string& model, std::vector<Stage> stages, int wrap_room_at_attach = -1, bool device_routing = true,
                               bool* routed_on_device = nullptr) {
    const auto dir = test::reference_path("models/" + model);
    auto config = ModelConfig::load(dir);
    EXPECT_TRUE(config.ok()) << config.message();
    auto tensors = SafetensorsSet::open_dir(dir);
    EXPECT_TRUE(tensors.ok()) << tensors.message();
    if (!config.ok() || !tensors.ok()) return {};
    std::vector<std::unique_ptr<BackendHandle>> backends;
    std::vector<StageSpec> specs;
    std::vector<KvStage> kv_stages;
    uint32_t placed = 0;
    for (std::size_t i = 0; i < stages.size(); ++i) {
      auto be = BackendHandle::open(stages[i].api, "cpu", "", 2);
      EXPECT_TRUE(be.ok()) << be.message();
      if (!be.ok()) return {};
      const uint32_t n = stages[i].n_layers ? stages[i].n_layers : static_cast<uint32_t>(config->num_layers) - placed;
      placed += n;
      backends.push_back(std::move(*be));
      specs.push_back({backends.back().get(), n});
      kv_stages.push_back({backends.back().get(), n});
    }
    auto m = Transformer::create(*config, *tensors, specs);
    EXPECT_TRUE(m.ok()) << m.message();
    if (!m.ok()) return {};
    std::unique_ptr<ExpertStoreHandle> store;
    std::vector<std::string> paths;
    std::vector<const char*> c_paths;
    if (const auto& layout = (*m)->expert_layout()) {
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
      auto s = ExpertStoreHandle::open(builtin_resident_store(), "resident", cfg);
      EXPECT_TRUE(s.ok()) << s.message();
      if (!s.ok()) return {};
      store = std::move(*s);
      g_wrap_room = wrap_room_at_attach;
      g_wrapped_since_armed.clear();
      auto attached = (*m)->attach_expert_store(store.get());
      EXPECT_TRUE(attached.ok()) << attached.message();
      if (!attached.ok()) return {};
      (*m)->set_device_routing(device_routing);
      if (routed_on_device) *routed_on_device = (*m)->routes_on_device(0);
    }
    auto codecs = KvCodecChoice::parse("f32");
    auto kv = KvCache::create(kv_stages, registry_, *config, *codecs, 256);
    EXPECT_TRUE(kv.ok()) << kv.message();
    if (!kv.ok()) return {};
    auto pages = (*kv)->pages().allocate(6);
    EXPECT_TRUE(pages.ok());
    if (!pages.ok()) return {};

    // Two sequences of up to 48 positions (3 pages each). Each pass: (sequence, first position,
    // tokens); logits for every row.
    struct Pass {
      std::vector<std::pair<int32_t, int32_t>> runs;  // (sequence, tokens), each from its next position
    };
    const std::vector<Pass> passes = {{{{0, 21}, {1, 6}}},  // prefill of both (27 rows: the GEMM path)
                                      {{{0, 1}, {1, 1}}},   // decode of both
                                      {{{0, 1}}},           // decode of one
                                      {{{1, 3}}},           // a short chunk (3 rows: the matvec path)
                                      {{{0, 5}, {1, 1}}}};  // 6 rows
    const uint32_t vocab = static_cast<uint32_t>(config->vocab_size);
    int32_t next[2] = {0, 0};
    std::vector<float> all, logits;
    for (const Pass& pass : passes) {
      ForwardBatch b;
      b.n_seqs = 2;
      b.max_pages = 3;
      b.page_table = *pages;
      for (auto [seq, count] : pass.runs)
        for (int32_t i = 0; i < count; ++i, ++next[seq]) {
          b.tokens.push_back(static_cast<int32_t>((uint32_t(next[seq]) * 977u + uint32_t(seq) * 131u + 7u) % vocab));
          b.positions.push_back(next[seq]);
          b.seq_slots.push_back(seq);
          b.logit_rows.push_back(static_cast<uint32_t>(b.tokens.size() - 1));
        }
      auto s = (*m)->forward(b, (*kv)->caches(), logits);
      EXPECT_TRUE(s.ok()) << s.message();
      if (!s.ok()) return {};
      all.insert(all.end(), logits.begin(), logits.end());
    }
    (*kv)->pages().release(*pages);
    g_wrap_room = -1;
    return all;
  }

  void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
    ASSERT_FALSE(a.empty()) << what;
    ASSERT_EQ(a.size(), b.size()) << what;
    std::size_t differ = 0, first = a.size();
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i] && differ++ == 0) first = i;
    EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << a.size() << " logits differ, first at " << first;
  }

  PluginRegistry registry_;
  Tables tables_;
};

TEST_F(FusedOpsForward, EveryArchitectureGivesTheLogitsOfTheSingleNodes) {
  for (const char* model : {"tiny-code-qwen2", "tiny-code-qwen2-4bit", "tiny-code-qwen2-8bit", "zoo/llama", "zoo/mistral", "zoo/qwen3",
                            "zoo/qwen3_moe", "zoo/olmoe", "zoo/mixtral", "qwen3_moe-4bit"}) {
    SLUICE_REQUIRE_REFERENCE(std::string("models/") + model + "/config.json");
    const auto fused = logits_of(model, {{tables_.fused, 0}});
    const auto single = logits_of(model, {{&tables_.single, 0}});
    expect_same_bits(fused, single, model);
  }
}

TEST_F(FusedOpsForward, EachStageAddsItsLastResidualBeforeTheHiddenStateMovesOn) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/config.json");
  const auto single = logits_of("tiny-code-qwen2", {{&tables_.single, 0}});
  expect_same_bits(logits_of("tiny-code-qwen2", {{tables_.fused, 1}, {tables_.fused, 0}}), single, "stages 1 + 3, both fused");
  expect_same_bits(logits_of("tiny-code-qwen2", {{tables_.fused, 2}, {tables_.fused, 0}}), single, "stages 2 + 2, both fused");
  expect_same_bits(logits_of("tiny-code-qwen2", {{tables_.fused, 3}, {&tables_.single, 0}}), single, "stages 3 + 1, the second without");
  expect_same_bits(logits_of("tiny-code-qwen2", {{&tables_.single, 2}, {tables_.fused, 0}}), single, "stages 2 + 2, the first without");
}

// With the resident store every expert is bound to the backend once (Transformer::attach_expert_store).
// A device with room for one MoE layer's experts but not both: binding stops, that stage's experts are
// wrapped as each pass routes them (the way before binding), the model loads and gives the same bits.
TEST_F(FusedOpsForward, ExpertsThatDoNotAllFitTheDeviceAreSentEachPassInstead) {
  SLUICE_REQUIRE_REFERENCE("models/zoo/qwen3_moe/config.json");
  const auto bound = logits_of("zoo/qwen3_moe", {{tables_.fused, 0}});
  const int one_layer = 16 * 3;  // 16 experts of 3 float parts: what one pass can route at most
  const auto sent = logits_of("zoo/qwen3_moe", {{&tables_.small_device, 0}}, one_layer);
  expect_same_bits(sent, bound, "experts sent each pass against bound once");
  EXPECT_EQ(g_wrap_room, -1);
}

// Stacked experts (MLX's switch_mlp) on a backend of ABI 2.5 are chosen on the device in the passes of
// up to Transformer::kDeviceRoutedTokens tokens (every pass here but the 27-row prefill): the CPU's
// MOE_ROUTE is the host's routing, its MATMUL_ID multiplies each expert's slots together as the host
// path does its rows, and MOE_COMBINE adds the experts in the host's order — the same bits. Experts
// in one tensor each (zoo/qwen3_moe, wrapped in place) stay routed on the host, and so do stacks
// larger than the device's largest allocation.
TEST_F(FusedOpsForward, ExpertsChosenOnTheDeviceGiveTheHostRoutedLogits) {
  SLUICE_REQUIRE_REFERENCE("models/qwen3_moe-4bit/config.json");
  bool on_device = false;
  const auto device = logits_of("qwen3_moe-4bit", {{tables_.fused, 0}}, -1, true, &on_device);
  EXPECT_TRUE(on_device);
  bool host_only = true;
  const auto host = logits_of("qwen3_moe-4bit", {{tables_.fused, 0}}, -1, false, &host_only);
  EXPECT_FALSE(host_only);
  expect_same_bits(device, host, "experts chosen on the device against routed on the host");
  expect_same_bits(logits_of("qwen3_moe-4bit", {{&tables_.single, 0}}), host, "node by node, chosen on the device");
  // A device whose allocations cannot hold a stack: routed on the host, expert by expert, same bits.
  bool small = true;
  const auto chunked = logits_of("qwen3_moe-4bit", {{&tables_.small_allocations, 0}}, -1, true, &small);
  EXPECT_FALSE(small);
  expect_same_bits(chunked, host, "stacks larger than an allocation, routed on the host");
  SLUICE_REQUIRE_REFERENCE("models/zoo/qwen3_moe/config.json");
  bool per_tensor = true;
  logits_of("zoo/qwen3_moe", {{tables_.fused, 0}}, -1, true, &per_tensor);
  EXPECT_FALSE(per_tensor);
}

}  // namespace
}  // namespace sluice
