// Layer partitioning on the OpenCL backend (PoCL here): the first layers on OpenCL and the rest on
// the CPU backend (--gpu-layers N), and the layers split over two OpenCL backend instances of the
// same device (--devices listing it twice: the several-GPU code path, hidden state moving between
// them through the host). Held to the goldens' bounds as the unsplit model: greedy ids identical,
// last-position logits within 1e-3 × max|logit|, held-out mean NLL within 2e-3. And the errors:
// a CPU-only --backend, more layers than the model has, an unknown device, --gpu-layers auto that
// fits nothing — clear messages, never a crash. Skips with a message where no OpenCL device exists.
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/perplexity.h"
#include "engine/runtime.h"
#include "golden.h"
#include "plugin/plugin_registry.h"
#include "opencl_probe.h"
#include "reference.h"
#include "util/json.h"

namespace sluice {
namespace {

struct Split {
  std::string model, gpu_layers, devices;
  std::vector<std::string> backends;  // the stages' backends, in layer order
  std::vector<uint32_t> layers;       // and their layer counts
};
// What gtest prints for a case (without it, the struct's raw bytes land in every test name).
void PrintTo(const Split& s, std::ostream* os) {
  *os << s.model << (s.gpu_layers.empty() ? "" : " --gpu-layers " + s.gpu_layers) << (s.devices.empty() ? "" : " --devices " + s.devices);
}

EngineOptions options_for(const std::string& model, const std::string& gpu_layers, const std::string& devices, int ctx = 512) {
  EngineOptions o;
  o.model_dir = test::reference_path("models/" + model).string();
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = devices.empty() ? "opencl" : "auto";
  o.gpu_layers = gpu_layers;
  o.devices = devices;
  o.kv_codec = "f32";
  o.threads = 2;
  o.ctx_size = ctx;
  return o;
}

EngineOptions options_for(const Split& s, int ctx = 512) { return options_for(s.model, s.gpu_layers, s.devices, ctx); }

void expect_stages(Runtime& rt, const Split& s) {
  const auto stages = rt.model().stages();
  ASSERT_EQ(stages.size(), s.backends.size()) << rt.placement();
  for (std::size_t i = 0; i < stages.size(); ++i) {
    EXPECT_EQ(stages[i].backend->name(), s.backends[i]) << rt.placement();
    EXPECT_EQ(stages[i].n_layers, s.layers[i]) << rt.placement();
  }
  EXPECT_EQ(rt.kv().caches().size(), stages.size());
}

class LayerSplit : public ::testing::TestWithParam<Split> {};

TEST_P(LayerSplit, GreedyIdsAndLastLogitsMatchTransformers) {
  const Split& s = GetParam();
  SLUICE_REQUIRE_REFERENCE("models/" + s.model + "/golden.json");
  if (auto why = test::opencl_unavailable(); !why.empty()) GTEST_SKIP() << "OpenCL backend unavailable: " << why;
  auto golden = json::parse_file(test::reference_path("models/" + s.model + "/golden.json"));
  ASSERT_TRUE(golden.ok()) << golden.message();
  auto rt = Runtime::open(options_for(s));
  ASSERT_TRUE(rt.ok()) << rt.message();
  expect_stages(**rt, s);
  auto engine = Engine::create(options_for(s));
  ASSERT_TRUE(engine.ok()) << engine.message();
  EXPECT_EQ((*engine)->backend_name(), (*rt)->placement());

  for (const auto& prompt : (*golden)["prompts"].GetArray()) {
    const auto ids = test::golden_ids(prompt["ids"]);
    SequenceState seq;
    std::vector<float> logits;
    ASSERT_TRUE((*rt)->run(seq, ids, false, logits).ok());
    (*rt)->release(seq);
    ASSERT_EQ(logits.size(), prompt["last_logits"].Size());
    const auto [max_err, max_abs] = test::logit_distance(logits, prompt["last_logits"]);
    EXPECT_LE(max_err, 1e-3 * max_abs) << s.model << ": prompt " << prompt["text"].GetString();

    GenerationRequest req;
    req.prompt_ids = ids;
    req.max_tokens = static_cast<int>(prompt["greedy_ids"].Size());
    req.sampling.temperature = 0;
    req.ignore_eos = true;
    auto result = (*engine)->generate(req);
    ASSERT_NE(result.finish, FinishReason::kError) << result.error;
    EXPECT_EQ(result.ids, test::golden_ids(prompt["greedy_ids"])) << s.model << ": prompt " << prompt["text"].GetString();
  }
}

TEST_P(LayerSplit, HeldOutWindowMeanNllMatchesTransformers) {
  const Split& s = GetParam();
  SLUICE_REQUIRE_REFERENCE("models/" + s.model + "/golden.json");
  if (auto why = test::opencl_unavailable(); !why.empty()) GTEST_SKIP() << "OpenCL backend unavailable: " << why;
  auto golden = json::parse_file(test::reference_path("models/" + s.model + "/golden.json"));
  ASSERT_TRUE(golden.ok()) << golden.message();
  if (!golden->HasMember("nll_eval")) GTEST_SKIP() << s.model << " has no held-out window in its golden";
  const auto& eval = (*golden)["nll_eval"];
  auto rt = Runtime::open(options_for(s, 1024), 1024);
  ASSERT_TRUE(rt.ok()) << rt.message();
  expect_stages(**rt, s);
  PerplexityOptions opt;
  opt.ctx = 1024;
  opt.chunks = 1;
  opt.scoring = PerplexityScoring::kAll;
  auto result = compute_perplexity(**rt, test::golden_ids(eval["ids"]), opt);
  ASSERT_TRUE(result.ok()) << result.message();
  EXPECT_EQ(result->tokens_scored, static_cast<int64_t>(eval["nll"].Size()));
  EXPECT_NEAR(result->mean_nll, eval["mean_nll"].GetDouble(), 2e-3);
}

// tiny-code-qwen2 and its 4-bit form have 4 layers, the MoE models 2. "opencl:0,opencl:0" opens
// two backend instances of the one PoCL device.
const std::string kTwice = "opencl:0,opencl:0";
INSTANTIATE_TEST_SUITE_P(
    Splits, LayerSplit,
    ::testing::Values(Split{"tiny-code-qwen2", "1", "", {"opencl", "cpu"}, {1, 3}},
                      Split{"tiny-code-qwen2", "2", "", {"opencl", "cpu"}, {2, 2}},
                      Split{"tiny-code-qwen2", "3", "", {"opencl", "cpu"}, {3, 1}},
                      Split{"tiny-code-qwen2", "", kTwice, {"opencl", "opencl"}, {2, 2}},
                      Split{"tiny-code-qwen2", "3", kTwice, {"opencl", "opencl", "cpu"}, {2, 1, 1}},
                      Split{"tiny-code-qwen2-4bit", "1", "", {"opencl", "cpu"}, {1, 3}},
                      Split{"tiny-code-qwen2-4bit", "2", "", {"opencl", "cpu"}, {2, 2}},
                      Split{"tiny-code-qwen2-4bit", "3", "", {"opencl", "cpu"}, {3, 1}},
                      Split{"tiny-code-qwen2-4bit", "", kTwice, {"opencl", "opencl"}, {2, 2}},
                      Split{"zoo/qwen3_moe", "1", "", {"opencl", "cpu"}, {1, 1}},
                      Split{"zoo/qwen3_moe", "", kTwice, {"opencl", "opencl"}, {1, 1}},
                      Split{"zoo/mixtral", "1", "", {"opencl", "cpu"}, {1, 1}},
                      Split{"qwen3_moe-4bit", "1", "", {"opencl", "cpu"}, {1, 1}}),
    [](const auto& info) {
      std::string n = info.param.model + "_gpu" + (info.param.gpu_layers.empty() ? "all" : info.param.gpu_layers) +
                      (info.param.devices.empty() ? "" : "_two_devices");
      for (auto& c : n)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return n;
    });

class LayerSplitErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/config.json");
    if (auto why = test::opencl_unavailable(); !why.empty()) GTEST_SKIP() << "OpenCL backend unavailable: " << why;
  }
  // Opening fails with a message containing each of `parts`.
  void expect_error(const EngineOptions& o, std::vector<std::string> parts, uint32_t capacity = 0) {
    auto rt = Runtime::open(o, capacity);
    ASSERT_FALSE(rt.ok()) << "opened: " << (*rt)->placement();
    for (const auto& p : parts) EXPECT_NE(rt.message().find(p), std::string::npos) << rt.message();
  }
};

TEST_F(LayerSplitErrors, GpuLayersWithTheCpuBackendIsRefused) {
  auto o = options_for("tiny-code-qwen2", "2", "");
  o.backend = "cpu";
  expect_error(o, {"--gpu-layers", "--backend cpu"});
}

TEST_F(LayerSplitErrors, MoreLayersThanTheModelHasIsRefused) {
  expect_error(options_for("tiny-code-qwen2", "5", ""), {"--gpu-layers 5", "4 layers"});
}

TEST_F(LayerSplitErrors, AnUnknownDeviceIsRefusedNamingIt) {
  expect_error(options_for("tiny-code-qwen2", "2", "opencl:0,opencl:0:7"), {"--devices", "7"});
  expect_error(options_for("tiny-code-qwen2", "2", "vulkan:0"), {"--devices", "vulkan"});
}

TEST_F(LayerSplitErrors, DevicesAndAnExplicitBackendTogetherAreRefused) {
  auto o = options_for("tiny-code-qwen2", "2", kTwice);
  o.backend = "opencl";
  expect_error(o, {"--devices", "--backend opencl"});
}

// --backend-options reach the OpenCL backend (checked there: an out-of-range tuning value stops it
// opening, with a message naming the key), alone and in a split — where the CPU backend that runs the
// other layers gets none, so a valid OpenCL option opens both.
TEST_F(LayerSplitErrors, BackendOptionsReachTheOpenclBackendOnly) {
  auto alone = options_for("tiny-code-qwen2", "", "");
  alone.backend_options = "tune.att_wg=100";
  expect_error(alone, {"att_wg", "64, 128 or 256"});
  auto split = options_for("tiny-code-qwen2", "2", "");
  split.backend_options = "tune.nope=1";
  expect_error(split, {"--gpu-layers", "unknown tuning key 'nope'"});
  split.backend_options = "tune.att_short=256,tune.q4_shape_of=384x384=64x2";
  auto rt = Runtime::open(split);
  ASSERT_TRUE(rt.ok()) << rt.message();
  EXPECT_EQ((*rt)->model().stages().size(), 2u) << (*rt)->placement();
}

// The device reports its memory (PoCL: the host's); a KV cache of 2^31 positions per layer fits no
// device, and auto says so before allocating anything.
TEST_F(LayerSplitErrors, AutoThatFitsNotOneLayerSaysWhy) {
  expect_error(options_for("tiny-code-qwen2", "auto", ""), {"--gpu-layers auto", "not even one layer", "MiB"}, 1u << 31);
}

TEST_F(LayerSplitErrors, AutoFitsTheTinyModelAndMatchesTheGolden) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/golden.json");
  auto rt = Runtime::open(options_for("tiny-code-qwen2", "auto", ""));
  ASSERT_TRUE(rt.ok()) << rt.message();
  const auto stages = (*rt)->model().stages();
  ASSERT_FALSE(stages.empty());
  EXPECT_EQ(stages.front().backend->name(), "opencl") << (*rt)->placement();
  // A few MiB of weights beside gigabytes of device memory: every layer fits, no CPU stage.
  EXPECT_EQ(stages.size(), 1u) << (*rt)->placement();
  auto golden = json::parse_file(test::reference_path("models/tiny-code-qwen2/golden.json"));
  ASSERT_TRUE(golden.ok());
  const auto& prompt = (*golden)["prompts"][0];
  SequenceState seq;
  std::vector<float> logits;
  ASSERT_TRUE((*rt)->run(seq, test::golden_ids(prompt["ids"]), false, logits).ok());
  const auto [max_err, max_abs] = test::logit_distance(logits, prompt["last_logits"]);
  EXPECT_LE(max_err, 1e-3 * max_abs);
}

// A malformed value is a usage error of the command line: exit status 2 and the option named.
TEST(LayerSplitCli, MalformedGpuLayersOrDevicesExitWithStatusTwo) {
  const std::string sluice = test::binary_path("bin/sluice").string();
  const std::string model = test::reference_path("models/tiny-code-qwen2").string();
  for (const std::string bad : {"--gpu-layers ten", "--gpu-layers -3", "--devices cpu", "--devices opencl:0,,opencl:0"}) {
    const std::string cmd = sluice + " generate --model " + model + " --prompt-ids 1,2 --max-tokens 1 " + bad + " 2>/dev/null";
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << cmd;
    EXPECT_EQ(WEXITSTATUS(status), 2) << cmd;
  }
}

}  // namespace
}  // namespace sluice
