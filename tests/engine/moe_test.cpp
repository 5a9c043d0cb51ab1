// Mixture-of-Experts models against HF transformers' goldens, with every expert resident and with
// experts streamed through the uring store under small budgets — where the store's counters must
// account for every byte it read.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/engine.h"
#include "quant/expert_repack.h"
#include "golden.h"
#include "reference.h"
#include "util/json.h"

namespace sluice {
namespace {


struct Case {
  std::string model;
  std::string store;
  int cache_mb;
};

class MoeGolden : public ::testing::TestWithParam<Case> {};

TEST_P(MoeGolden, GreedyIdsMatchTransformers) {
  const Case c = GetParam();
  SLUICE_REQUIRE_REFERENCE("models/" + c.model + "/golden.json");
  auto golden = json::parse_file(test::reference_path("models/" + c.model + "/golden.json"));
  ASSERT_TRUE(golden.ok());
  EngineOptions o;
  o.model_dir = test::reference_path("models/" + c.model).string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = "cpu";
  o.kv_codec = "f32";
  o.threads = 2;
  o.ctx_size = 256;
  o.expert_store = c.store;
  o.expert_cache_mb = c.cache_mb;
  auto engine = Engine::create(o);
  ASSERT_TRUE(engine.ok()) << engine.message();
  for (const auto& prompt : (*golden)["prompts"].GetArray()) {
    GenerationRequest req;
    req.prompt_ids = test::golden_ids(prompt["ids"]);
    req.max_tokens = static_cast<int>(prompt["greedy_ids"].Size());
    req.sampling.temperature = 0;
    req.ignore_eos = true;
    auto result = (*engine)->generate(req);
    ASSERT_NE(result.finish, FinishReason::kError) << result.error;
    EXPECT_EQ(result.ids, test::golden_ids(prompt["greedy_ids"])) << c.model << " / " << c.store << ": " << prompt["text"].GetString();
  }
  const auto m = (*engine)->metrics();
  EXPECT_EQ(m.expert_store, c.store.substr(0, c.store.find(':')));
  if (c.store == "resident") {
    EXPECT_EQ(m.expert_bytes_read, 0u);
    EXPECT_GT(m.expert_hits, 0u);
  } else {
    EXPECT_GT(m.expert_misses, 0u);
    EXPECT_GT(m.expert_bytes_read, 0u);
    EXPECT_LE(m.expert_cache_bytes, m.expert_budget_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, MoeGolden,
    ::testing::Values(Case{"zoo/mixtral", "resident", 0}, Case{"zoo/qwen3_moe", "resident", 0}, Case{"zoo/olmoe", "resident", 0},
                      Case{"qwen3_moe-4bit", "resident", 0}, Case{"zoo/mixtral", "uring", 1}, Case{"zoo/qwen3_moe", "uring", 1},
                      Case{"zoo/olmoe", "uring", 1}, Case{"qwen3_moe-4bit", "uring", 1}, Case{"zoo2/gemma4_text_moe", "resident", 0},
                      Case{"zoo2/gemma4_text_moe", "uring", 1}, Case{"zoo2/deepseek_v3", "resident", 0}, Case{"zoo2/deepseek_v3", "uring", 1}),
    [](const auto& info) {
      std::string n = info.param.model + "_" + info.param.store;
      for (auto& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

// A budget far below one layer's experts: nearly every acquire misses. Without O_DIRECT each read
// is exactly one expert, so bytes read = (misses + prefetched) × the expert's size.
TEST(MoeStreaming, NearlyEveryExpertStreamsAndEveryByteIsCounted) {
  SLUICE_REQUIRE_REFERENCE("models/zoo/qwen3_moe/golden.json");
  auto golden = json::parse_file(test::reference_path("models/zoo/qwen3_moe/golden.json"));
  ASSERT_TRUE(golden.ok());
  EngineOptions o;
  o.model_dir = test::reference_path("models/zoo/qwen3_moe").string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = "cpu";
  o.kv_codec = "f32";
  o.ctx_size = 256;
  o.expert_store = "uring:direct=0";
  o.expert_cache_mb = 0;
  auto engine = Engine::create(o);
  ASSERT_TRUE(engine.ok()) << engine.message();
  // zoo/qwen3_moe: 16 experts of gate+up [32, 64] and down [64, 32] in bf16 = 12288 bytes each; the
  // default budget (a quarter of all experts) holds 8 of the 32.
  constexpr uint64_t kExpertBytes = 3 * 32 * 64 * 2;
  const auto& prompt = (*golden)["prompts"][0];
  GenerationRequest req;
  req.prompt_ids = test::golden_ids(prompt["ids"]);
  req.max_tokens = static_cast<int>(prompt["greedy_ids"].Size());
  req.sampling.temperature = 0;
  req.ignore_eos = true;
  auto result = (*engine)->generate(req);
  EXPECT_EQ(result.ids, test::golden_ids(prompt["greedy_ids"]));
  const auto m = (*engine)->metrics();
  EXPECT_GT(m.expert_misses, m.expert_hits / 4);
  EXPECT_EQ(m.expert_bytes_read, (m.expert_misses + m.expert_prefetched) * kExpertBytes);
  // The file stores each expert's three tensors back to back: one request per expert.
  EXPECT_EQ(m.expert_read_requests, m.expert_misses + m.expert_prefetched);
  EXPECT_EQ(m.expert_budget_bytes, 2 * 16 * kExpertBytes / 4);
}

TEST(MoeStreaming, UnknownStoreIsAClearError) {
  SLUICE_REQUIRE_REFERENCE("models/zoo/mixtral/config.json");
  EngineOptions o;
  o.model_dir = test::reference_path("models/zoo/mixtral").string();
  o.plugin_dir = test::binary_path("lib").string();
  o.expert_store = "tape-drive";
  auto engine = Engine::create(o);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.message().find("unknown expert store 'tape-drive'"), std::string::npos) << engine.message();
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Repacking MLX's stacked experts (9 slices per expert: weight, scales, biases of 3 projections, each
// in a different tensor) gives one contiguous range per expert: the same outputs, a ninth of the reads.
TEST(MoeRepack, RepackedModelGivesTheSameIdsWithOneReadPerExpert) {
  SLUICE_REQUIRE_REFERENCE("models/qwen3_moe-4bit/golden.json");
  const auto out = std::filesystem::temp_directory_path() / ("sluice_repack_" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  auto stats = quant::repack_experts(test::reference_path("models/qwen3_moe-4bit"), out, true);
  ASSERT_TRUE(stats.ok()) << stats.message();
  EXPECT_EQ(stats->experts, 2u * 16u);
  auto golden = json::parse_file(test::reference_path("models/qwen3_moe-4bit/golden.json"));
  ASSERT_TRUE(golden.ok());
  uint64_t requests[2] = {0, 0}, reads[2] = {0, 0};
  for (int repacked = 0; repacked < 2; ++repacked) {
    EngineOptions o;
    o.model_dir = repacked ? out.string() : test::reference_path("models/qwen3_moe-4bit").string();
    o.plugin_dir = test::binary_path("lib").string();
    o.backend = "cpu";
    o.kv_codec = "f32";
    o.ctx_size = 256;
    o.expert_store = "uring:direct=0";
    auto engine = Engine::create(o);
    ASSERT_TRUE(engine.ok()) << engine.message();
    for (const auto& prompt : (*golden)["prompts"].GetArray()) {
      GenerationRequest req;
      req.prompt_ids = test::golden_ids(prompt["ids"]);
      req.max_tokens = static_cast<int>(prompt["greedy_ids"].Size());
      req.sampling.temperature = 0;
      req.ignore_eos = true;
      EXPECT_EQ((*engine)->generate(req).ids, test::golden_ids(prompt["greedy_ids"])) << (repacked ? "repacked" : "stacked");
    }
    const auto m = (*engine)->metrics();
    requests[repacked] = m.expert_read_requests;
    reads[repacked] = m.expert_misses + m.expert_prefetched;
  }
  EXPECT_EQ(requests[0], 9 * reads[0]);  // stacked: weight, scales, biases of gate, up, down apart
  EXPECT_EQ(requests[1], reads[1]);      // repacked: one request per expert
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A model file truncated under a running engine: requests that need the lost experts fail with a
// message naming the file, the engine keeps serving, and once the file is whole again requests
// succeed. (A repacked copy puts every expert after the dense tensors, so only experts are cut.)
TEST(MoeStreaming, TruncatedModelFileFailsRequestsButNotTheEngine) {
  SLUICE_REQUIRE_REFERENCE("models/zoo/qwen3_moe/golden.json");
  const auto dir = std::filesystem::temp_directory_path() / ("sluice_cut_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(quant::repack_experts(test::reference_path("models/zoo/qwen3_moe"), dir, true).ok());
  const auto file = dir / "model.safetensors";
  const auto whole = std::filesystem::file_size(file);
  std::string original;
  {
    std::ifstream in(file, std::ios::binary);
    original.assign(std::istreambuf_iterator<char>(in), {});
  }
  EngineOptions o;
  o.model_dir = dir.string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = "cpu";
  o.ctx_size = 128;
  o.expert_store = "uring:direct=0";
  o.expert_cache_mb = 0;
  auto engine = Engine::create(o);
  ASSERT_TRUE(engine.ok()) << engine.message();
  auto golden = json::parse_file(test::reference_path("models/zoo/qwen3_moe/golden.json"));
  ASSERT_TRUE(golden.ok());
  GenerationRequest req;
  req.prompt_ids = test::golden_ids((*golden)["prompts"][1]["ids"]);
  req.max_tokens = 4;
  req.sampling.temperature = 0;
  req.ignore_eos = true;

  // Layer 1's 16 experts (12288 bytes each) are the file's last bytes: cut them all off.
  std::filesystem::resize_file(file, whole - 16 * 12288);
  for (int i = 0; i < 2; ++i) {
    auto failed = (*engine)->generate(req);
    EXPECT_EQ(failed.finish, FinishReason::kError);
    EXPECT_NE(failed.error.find("short read"), std::string::npos) << failed.error;
    EXPECT_NE(failed.error.find(file.string()), std::string::npos) << failed.error;
  }
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << original;
  }
  auto ok = (*engine)->generate(req);
  EXPECT_EQ(ok.finish, FinishReason::kLength) << ok.error;
  EXPECT_EQ(ok.ids.size(), 4u);
  engine->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
