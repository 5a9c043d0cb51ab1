// Mixture-of-Experts models against HF transformers' goldens, with every expert resident and with
// experts streamed through the uring store under small budgets — where the store's counters must
// account for every byte it read.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <tuple>

#include "engine/engine.h"
#include "engine/runtime.h"
#include "model/safetensors.h"
#include "quant/expert_repack.h"
#include "quant/model_info.h"
#include "quant/safetensors_writer.h"
#include "golden.h"
#include "golden_run.h"
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
                      Case{"zoo2/gemma4_text_moe", "uring", 1}, Case{"zoo2/gpt_oss", "resident", 0}, Case{"zoo2/gpt_oss", "uring", 1},
                      Case{"zoo2/qwen3_5_moe_text", "resident", 0}, Case{"zoo2/qwen3_5_moe_text", "uring", 1},
                      Case{"zoo2/deepseek_v3", "resident", 0}, Case{"zoo2/deepseek_v3", "uring", 1}),
    [](const auto& info) {
      std::string n = info.param.model + "_" + info.param.store;
      for (auto& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

// gpt-oss (attention sinks, alternating sliding/full layers, yarn without truncation, a biased router
// with softmax over its top k, fused input-major experts with biases and the clamped SwiGLU): the last
// logits too, with the experts resident and streamed at a 1 MB budget.
class GptOssGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(GptOssGolden, GreedyIdsAndLastLogitsMatchTransformers) {
  const std::string model = "zoo2/gpt_oss";
  SLUICE_REQUIRE_REFERENCE("models/" + model + "/golden.json");
  auto golden = json::parse_file(test::reference_path("models/" + model + "/golden.json"));
  ASSERT_TRUE(golden.ok());
  EngineOptions o = test::golden_options(model, "cpu", "f32", 256);
  o.expert_store = GetParam();
  o.expert_cache_mb = GetParam() == "uring" ? 1 : 0;
  auto rt = Runtime::open(o);
  ASSERT_TRUE(rt.ok()) << rt.message();
  auto engine = Engine::create(o);
  ASSERT_TRUE(engine.ok()) << engine.message();
  test::expect_golden_prompts(**rt, **engine, *golden, model);
}

INSTANTIATE_TEST_SUITE_P(Stores, GptOssGolden, ::testing::Values("resident", "uring"));

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

namespace sluice {
namespace {

// bf16 of a float that bf16 holds exactly.
uint16_t exact_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// zoo2/gpt_oss with its experts replaced by random MXFP4 codes (as OpenAI's checkpoints store them:
// blocks [E, out, in / 32, 16], scales [E, out, in / 32]) in one folder, and by those values decoded
// here — lut[code] · 2^(scale − 127), low nibble first — in transformers' bf16 layout ([E, in, out],
// gate_up's outputs interleaved) in another. The CPU backend multiplies MXFP4 weights in place (ABI
// 2.3), so the MXFP4 experts reach it as MXFP4 — gate and up parted row by row, down as the store holds
// it — and its kernels make the same float32 values the bf16 decoding holds and sum them in the bf16
// kernels' lanes and order (backends/cpu/mxfp4_kernels.h; prefill's GEMM blocks are the same floats):
// the logits must equal the bf16 path's bit for bit (the bf16 path is the one held to transformers'
// golden), resident and streamed.
TEST(GptOssMxfp4, ExpertsGiveExactlyTheLogitsOfTheirBf16Decoding) {
  SLUICE_REQUIRE_REFERENCE("models/zoo2/gpt_oss/golden.json");
  const auto source = test::reference_path("models/zoo2/gpt_oss");
  auto set = SafetensorsSet::open_dir(source);
  ASSERT_TRUE(set.ok()) << set.message();
  const auto base = std::filesystem::temp_directory_path() / ("sluice_mxfp4_" + std::to_string(::getpid()));
  const auto mx_dir = base / "mxfp4", bf_dir = base / "bf16";
  std::filesystem::remove_all(base);
  for (const auto& d : {mx_dir, bf_dir}) {
    std::filesystem::create_directories(d);
    for (const auto& f : std::filesystem::directory_iterator(source))
      if (f.path().extension() != ".safetensors") std::filesystem::copy_file(f.path(), d / f.path().filename());
  }
  static constexpr float kFp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  std::mt19937 rng(5);
  std::vector<quant::TensorPlan> mx_plan, bf_plan;
  std::vector<std::vector<std::byte>> mx_bytes, bf_bytes;
  for (const auto& [name, t] : set->tensors()) {
    const bool gate_up = name.ends_with("mlp.experts.gate_up_proj"), down = name.ends_with("mlp.experts.down_proj");
    std::vector<std::byte> raw(t.data, t.data + t.bytes);
    if (!gate_up && !down) {
      mx_plan.push_back({name, t.dtype, t.shape});
      bf_plan.push_back({name, t.dtype, t.shape});
      mx_bytes.push_back(raw);
      bf_bytes.push_back(std::move(raw));
      continue;
    }
    const int64_t E = t.shape[0], in = t.shape[1], out = t.shape[2];  // stored [E, in, out]
    std::vector<uint8_t> blocks(std::size_t(E * out * in / 2)), scales(std::size_t(E * out * in / 32));
    for (auto& b : blocks) b = static_cast<uint8_t>(rng());
    for (auto& s : scales) s = static_cast<uint8_t>(120 + rng() % 5);  // 2^-7 .. 2^-3
    std::vector<uint16_t> decoded(std::size_t(E * in * out));
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = 0; r < out; ++r)
        for (int64_t c = 0; c < in; ++c) {
          const std::size_t row = std::size_t(e * out + r);
          const uint8_t byte = blocks[row * in / 2 + c / 2];
          const float v = kFp4[c % 2 == 0 ? byte & 0x0F : byte >> 4] * std::pow(2.0f, float(scales[row * in / 32 + c / 32]) - 127.0f);
          decoded[std::size_t((e * in + c) * out + r)] = exact_bf16(v);
        }
    mx_plan.push_back({name + "_blocks", DType::kU8, {E, out, in / 32, 16}});
    mx_bytes.push_back(std::vector<std::byte>(reinterpret_cast<const std::byte*>(blocks.data()),
                                              reinterpret_cast<const std::byte*>(blocks.data() + blocks.size())));
    mx_plan.push_back({name + "_scales", DType::kU8, {E, out, in / 32}});
    mx_bytes.push_back(std::vector<std::byte>(reinterpret_cast<const std::byte*>(scales.data()),
                                              reinterpret_cast<const std::byte*>(scales.data() + scales.size())));
    bf_plan.push_back({name, DType::kBF16, t.shape});
    bf_bytes.push_back(std::vector<std::byte>(reinterpret_cast<const std::byte*>(decoded.data()),
                                              reinterpret_cast<const std::byte*>(decoded.data() + decoded.size())));
  }
  for (auto [dir, plan, bytes] : {std::tuple{mx_dir, &mx_plan, &mx_bytes}, std::tuple{bf_dir, &bf_plan, &bf_bytes}}) {
    auto w = quant::SafetensorsWriter::create(dir, *plan, 0, {{"format", "pt"}});
    ASSERT_TRUE(w.ok()) << w.message();
    for (const auto& b : *bytes) ASSERT_TRUE(w->append(b));
    ASSERT_TRUE(w->finish());
  }

  // `sluice info` counts the same parameters in both forms (two 4-bit values a block byte).
  auto mx_info = quant::inspect_model(mx_dir, nullptr), bf_info = quant::inspect_model(bf_dir, nullptr);
  ASSERT_TRUE(mx_info.ok() && bf_info.ok()) << mx_info.message() << bf_info.message();
  EXPECT_EQ(mx_info->params, bf_info->params);
  EXPECT_EQ(mx_info->expert_params, bf_info->expert_params);
  EXPECT_EQ(mx_info->active_params(), bf_info->active_params());
  EXPECT_EQ(mx_info->forms["mxfp4"], 4);  // gate_up and down of 2 layers

  auto golden = json::parse_file(test::reference_path("models/zoo2/gpt_oss/golden.json"));
  ASSERT_TRUE(golden.ok());
  std::vector<std::vector<float>> want;
  for (const char* store : {"resident", "resident", "uring"}) {
    const bool mx = want.size() > 0 || std::string(store) == "uring";
    EngineOptions o = test::golden_options("zoo2/gpt_oss", "cpu", "f32", 256);
    o.model_dir = (want.empty() ? bf_dir : mx_dir).string();
    o.expert_store = store;
    o.expert_cache_mb = std::string(store) == "uring" ? 1 : 0;
    auto rt = Runtime::open(o);
    ASSERT_TRUE(rt.ok()) << rt.message();
    EXPECT_EQ((*rt)->model().experts_in_mxfp4(), mx) << store;  // not decoded to bf16 on the host
    std::size_t i = 0;
    const bool record = want.empty();
    for (const auto& prompt : (*golden)["prompts"].GetArray()) {
      SequenceState seq;
      std::vector<float> logits;
      ASSERT_TRUE((*rt)->run(seq, test::golden_ids(prompt["ids"]), false, logits).ok());
      (*rt)->release(seq);
      if (record) {
        want.push_back(logits);
        continue;
      }
      ASSERT_EQ(logits, want[i++]) << (mx ? "mxfp4 / " : "") << store << ": " << prompt["text"].GetString();
    }
    if (record) {
      // The experts count: with the random codes in place of the checkpoint's experts the logits
      // are far from the golden's.
      const auto [max_err, max_abs] = test::logit_distance(want.front(), (*golden)["prompts"][0]["last_logits"]);
      EXPECT_GT(max_err, 1e-2 * max_abs);
    }
  }
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace sluice
