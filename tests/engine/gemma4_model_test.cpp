// Gemma 4's parts that no golden covers, on `make-model --preset tiny-gemma4` (6 layers: sliding and
// full layers of their own head width, K as V on the full ones, per-layer inputs, the last two layers
// attending earlier layers' K/V with a double-wide MLP): the same tokens whether a prompt runs in one
// pass or in pieces, alone or beside another request — KV sharing reads what its source layer wrote,
// at every step; and a 4-bit file whose packed words lie off their 4-byte alignment (after the 2-byte
// layer_scalar tensors) loads and runs.
#include <filesystem>
#include <future>
#include <random>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/runtime.h"
#include "model/safetensors.h"
#include "quant/random_model.h"
#include "reference.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("sluice_gemma4_" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

Status make_tiny_gemma4(const fs::path& out, int bits) {
  quant::MakeModelOptions o;
  o.preset = "tiny-gemma4";
  o.output = out;
  o.bits = bits;
  o.seed = 5;
  o.tokenizer_from = test::reference_path("models/tiny-code-qwen2");
  o.quiet = true;
  auto r = quant::make_model(o);
  return r ? Status{} : Status(r.error());
}

EngineOptions options(const fs::path& model, int prefill, int parallel = 1) {
  EngineOptions o;
  o.model_dir = model.string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = "cpu";
  o.kv_codec = "f32";
  o.threads = 2;
  o.ctx_size = 256;
  o.prefill_size = prefill;
  o.parallel = parallel;
  return o;
}

GenerationRequest greedy(int seed, int n_prompt, int max_tokens) {
  GenerationRequest r;
  for (int j = 0; j < n_prompt; ++j) r.prompt_ids.push_back(300 + (seed * 613 + j * 97) % 6000);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

TEST(Gemma4Model, PiecesAndBatchesGiveTheTokensOfOnePass) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/tokenizer.json");
  TempDir dir;
  ASSERT_TRUE(make_tiny_gemma4(dir.path(), 0));
  auto whole = Engine::create(options(dir.path(), 64));
  auto pieces = Engine::create(options(dir.path(), 5));
  auto batched = Engine::create(options(dir.path(), 64, 2));
  ASSERT_TRUE(whole.ok()) << whole.message();
  ASSERT_TRUE(pieces.ok() && batched.ok());
  for (int seed : {1, 2}) {
    const auto req = greedy(seed, 30, 20);
    const auto a = (*whole)->generate(req), b = (*pieces)->generate(req);
    ASSERT_EQ(a.finish, FinishReason::kLength) << a.error;
    ASSERT_EQ(a.ids.size(), 20u);
    EXPECT_EQ(a.ids, b.ids) << "seed " << seed;
  }
  // Two requests side by side: each gets what it gets alone.
  auto first = std::async(std::launch::async, [&] { return (*batched)->generate(greedy(1, 30, 20)); });
  auto second = std::async(std::launch::async, [&] { return (*batched)->generate(greedy(2, 17, 20)); });
  EXPECT_EQ(first.get().ids, (*whole)->generate(greedy(1, 30, 20)).ids);
  EXPECT_EQ(second.get().ids, (*whole)->generate(greedy(2, 17, 20)).ids);
}

// Layers 4 and 5 attend the K/V of layers 3 and 2 (num_kv_shared_layers 2) and write none: the cache
// layout holds the four layers that keep their own, the full layer's share of a token's bytes once,
// and the pieces-and-batches test above shows the sharing layers read their sources' pages through it.
TEST(Gemma4Model, KvSharingLayersHaveNoPlaceInTheCache) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/tokenizer.json");
  TempDir dir;
  ASSERT_TRUE(make_tiny_gemma4(dir.path(), 0));
  auto rt = Runtime::open(options(dir.path(), 64));
  ASSERT_TRUE(rt.ok()) << rt.message();
  const ModelConfig& c = (*rt)->config();
  ASSERT_EQ(c.num_layers, 6);
  ASSERT_EQ(c.kv_shared_from, 4);
  EXPECT_EQ((*rt)->kv().n_cache_layers(), 4u);
  EXPECT_EQ(c.cache_index(c.kv_source_of(4)), 3);
  EXPECT_EQ(c.cache_index(c.kv_source_of(5)), 2);
  // Per token: K and V (f32) of the one full layer that keeps a cache (layer 2; layer 5 shares it).
  const double full_layer = 2.0 * c.kv_heads_of(2) * c.head_dim_of(2) * 4;
  EXPECT_DOUBLE_EQ((*rt)->kv().bytes_per_token(), full_layer);
}

TEST(Gemma4Model, PackedWordsOffTheirAlignmentLoadAndRun) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/tokenizer.json");
  TempDir dir;
  ASSERT_TRUE(make_tiny_gemma4(dir.path(), 4));
  auto set = SafetensorsSet::open_dir(dir.path());
  ASSERT_TRUE(set.ok()) << set.message();
  int misaligned = 0;
  for (const auto& [name, t] : set->tensors()) misaligned += t.dtype == DType::kU32 && t.file_offset % 4 != 0;
  ASSERT_GT(misaligned, 0) << "the file no longer has misaligned words: this test checks nothing";
  auto engine = Engine::create(options(dir.path(), 64));
  ASSERT_TRUE(engine.ok()) << engine.message();
  auto pieces = Engine::create(options(dir.path(), 5));
  ASSERT_TRUE(pieces.ok()) << pieces.message();
  const auto r = (*engine)->generate(greedy(3, 20, 12));
  EXPECT_EQ(r.finish, FinishReason::kLength) << r.error;
  EXPECT_EQ(r.ids.size(), 12u);
  EXPECT_EQ(r.ids, (*pieces)->generate(greedy(3, 20, 12)).ids);
}

}  // namespace
}  // namespace sluice
