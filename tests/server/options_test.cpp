#include "server/options.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

using namespace sluice::server;

namespace {

std::filesystem::path write_config(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".conf");
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST(ServerOptions, DefaultsMatchTheIssue) {
  auto p = parse_server_options({"--model", "m"});
  ASSERT_TRUE(p.ok()) << p.message();
  const auto& o = p->options;
  EXPECT_EQ(o.host, "127.0.0.1");
  EXPECT_EQ(o.port, 5413);
  EXPECT_EQ(o.backend, "auto");
  EXPECT_EQ(o.max_tokens, 2048);
  EXPECT_EQ(o.prefill_size, 512);
  EXPECT_FLOAT_EQ(o.temp, 0.6f);
  EXPECT_FLOAT_EQ(o.top_p, 1.0f);
  EXPECT_EQ(o.body_limit, 16u << 20);
  EXPECT_TRUE(p->warnings.empty());
}

TEST(ServerOptions, ModelIsRequired) {
  auto p = parse_server_options({"--port", "1"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.message().find("--model"), std::string::npos);
}

TEST(ServerOptions, UnknownOptionIsAUsageError) {
  EXPECT_FALSE(parse_server_options({"--model", "m", "--no-such-option"}).ok());
}

TEST(ServerOptions, ConfigFileSuppliesValuesAndTheCommandLineWins) {
  auto path = write_config("sluice-opts", "model = from-config\nport = 6000\ntemp = 0.2\nthinking = true\ncors = *\n");
  auto p = parse_server_options({"--config", path.string(), "--port", "7000"});
  std::filesystem::remove(path);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->options.model, "from-config");
  EXPECT_EQ(p->options.port, 7000);           // command line wins
  EXPECT_FLOAT_EQ(p->options.temp, 0.2f);     // config beats the default
  EXPECT_EQ(default_thinking(p->options), std::optional<bool>(true));
  EXPECT_EQ(p->options.cors_origin, "*");
}

TEST(ServerOptions, UnknownNameInConfigFileIsAnError) {
  auto path = write_config("sluice-bad", "model = m\nbogus = 1\n");
  auto p = parse_server_options({"--config", path.string()});
  std::filesystem::remove(path);
  EXPECT_FALSE(p.ok());
}

TEST(ServerOptions, MissingConfigFileIsAnError) {
  EXPECT_FALSE(parse_server_options({"--config", "/nonexistent/sluice.conf"}).ok());
}

TEST(ServerOptions, MemLimitReachesTheEngineAsBytesWithoutAWarning) {
  auto p = parse_server_options({"--model", "m", "--mem-limit", "8G", "--mem-wait", "5"});
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_TRUE(p->warnings.empty());
  const auto e = to_engine_options(p->options);
  EXPECT_EQ(e.mem_limit_bytes, 8ull << 30);
  EXPECT_EQ(e.mem_wait_ms, 5000);
  // SwiftLM's bare number is megabytes.
  EXPECT_EQ(to_engine_options(parse_server_options({"--model", "m", "--mem-limit", "8192"})->options).mem_limit_bytes, 8ull << 30);
  EXPECT_EQ(to_engine_options(parse_server_options({"--model", "m"})->options).mem_limit_bytes, 0u);
}

TEST(ServerOptions, InvalidOrZeroMemLimitIsAUsageError) {
  for (const char* bad : {"0", "0G", "-1", "8X", "lots", "", "1e30T"}) {
    auto p = parse_server_options({"--model", "m", "--mem-limit", bad});
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_NE(p.message().find("--mem-limit"), std::string::npos) << p.message();
  }
  EXPECT_FALSE(parse_server_options({"--model", "m", "--mem-wait", "-1"}).ok());
}

TEST(ServerOptions, SsdPrefetchSetsTheStreamingStoresQueueDepth) {
  auto p = parse_server_options({"--model", "m", "--stream-experts", "--ssd-prefetch", "16"});
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_TRUE(p->warnings.empty());
  EXPECT_EQ(to_engine_options(p->options).expert_store, "uring:qd=16");
  auto with_options = parse_server_options({"--model", "m", "--expert-store", "uring:direct=0", "--ssd-prefetch", "8"});
  ASSERT_TRUE(with_options.ok());
  EXPECT_EQ(to_engine_options(with_options->options).expert_store, "uring:direct=0,qd=8");
  auto resident = parse_server_options({"--model", "m", "--ssd-prefetch", "8"});
  ASSERT_TRUE(resident.ok());
  ASSERT_EQ(resident->warnings.size(), 1u);
  EXPECT_EQ(to_engine_options(resident->options).expert_store, "resident");
  EXPECT_FALSE(parse_server_options({"--model", "m", "--ssd-prefetch", "-2"}).ok());
}

TEST(ServerOptions, GivenOptionsAreTellableFromDefaults) {
  auto p = parse_server_options({"--model", "m", "--parallel", "1"});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->given.count("parallel"));
  EXPECT_FALSE(p->given.count("prefill-size"));
  EXPECT_FALSE(p->given.count("calibrate"));
}

TEST(ServerOptions, GpuLayersAndDevicesReachTheEngineWithoutAWarning) {
  auto p = parse_server_options({"--model", "m", "--backend", "opencl", "--gpu-layers", "10"});
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_TRUE(p->warnings.empty());
  EXPECT_EQ(to_engine_options(p->options).gpu_layers, "10");
  auto a = parse_server_options({"--model", "m", "--gpu-layers", "auto", "--devices", "opencl:0:0,opencl:0:1"});
  ASSERT_TRUE(a.ok()) << a.message();
  const auto e = to_engine_options(a->options);
  EXPECT_EQ(e.gpu_layers, "auto");
  EXPECT_EQ(e.devices, "opencl:0:0,opencl:0:1");
  EXPECT_EQ(to_engine_options(parse_server_options({"--model", "m"})->options).gpu_layers, "");
}

TEST(ServerOptions, MalformedGpuLayersOrDevicesAreUsageErrors) {
  for (const char* bad : {"ten", "-1", "3x", "all"}) {
    auto p = parse_server_options({"--model", "m", "--gpu-layers", bad});
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_NE(p.message().find("--gpu-layers"), std::string::npos) << p.message();
  }
  for (const char* bad : {"opencl:0,,opencl:1", "opencl:0,", "cpu", "auto"}) {
    auto p = parse_server_options({"--model", "m", "--devices", bad});
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_NE(p.message().find("--devices"), std::string::npos) << p.message();
  }
  auto both = parse_server_options({"--model", "m", "--backend", "opencl:0", "--devices", "opencl:0,opencl:0"});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.message().find("--backend"), std::string::npos) << both.message();
}

TEST(ServerOptions, StreamExpertsSelectsTheUringStoreWithABudget) {
  auto p = parse_server_options({"--model", "m", "--stream-experts", "--mem-limit", "8G"});
  ASSERT_TRUE(p.ok()) << p.message();
  auto e = to_engine_options(p->options);
  EXPECT_EQ(e.expert_store, "uring");
  EXPECT_EQ(e.expert_cache_mb, 4096);  // half of --mem-limit
  auto q = parse_server_options({"--model", "m", "--stream-experts", "--expert-cache-mb", "300"});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(to_engine_options(q->options).expert_cache_mb, 300);
  auto conflict = parse_server_options({"--model", "m", "--stream-experts", "--expert-store", "tape"});
  ASSERT_TRUE(conflict.ok());
  EXPECT_FALSE(check_available(conflict->options).ok());
}

TEST(ServerOptions, TurboKvSelectsTheRecommendedPair) {
  // With the recent window (the default) keys at 4 bits and values at 3; without it turbo4 for both,
  // values with 16 rotations (plugins/turbo/recommended.h).
  auto p = parse_server_options({"--model", "m", "--turbo-kv"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(to_engine_options(p->options).kv_codec, "k=turbo4,v=turbo3");
  EXPECT_EQ(to_engine_options(p->options).kv_recent, -1);
  auto off = parse_server_options({"--model", "m", "--turbo-kv", "--kv-recent", "0"});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(to_engine_options(off->options).kv_codec, "k=turbo4,v=turbo4:rot=16");
  EXPECT_EQ(to_engine_options(off->options).kv_recent, 0);
  auto wide = parse_server_options({"--model", "m", "--kv-codec", "turbo3", "--kv-recent", "64"});
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(to_engine_options(wide->options).kv_recent, 64);
  auto bad = parse_server_options({"--model", "m", "--kv-recent", "-3"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--kv-recent"), std::string::npos) << bad.message();
}

TEST(ServerOptions, OpenClBackendIsAccepted) {
  auto p = parse_server_options({"--model", "m", "--backend", "opencl:0:0"});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(check_available(p->options).ok());
}

TEST(ServerOptions, OutOfRangeValuesAreRejected) {
  EXPECT_FALSE(parse_server_options({"--model", "m", "--port", "70000"}).ok());
  EXPECT_FALSE(parse_server_options({"--model", "m", "--top-p", "0"}).ok());
  EXPECT_FALSE(parse_server_options({"--model", "m", "--log-level", "loud"}).ok());
  EXPECT_FALSE(parse_server_options({"--model", "m", "--port", "abc"}).ok());
  EXPECT_FALSE(parse_server_options({"--model", "m", "--decode-ahead", "sometimes"}).ok());
  const auto negative_grace = parse_server_options({"--model", "m", "--shutdown-grace", "-1"});
  ASSERT_FALSE(negative_grace.ok());
  EXPECT_NE(negative_grace.message().find("--shutdown-grace"), std::string::npos) << negative_grace.message();
  EXPECT_TRUE(parse_server_options({"--model", "m", "--shutdown-grace", "0"}).ok());
}

TEST(ServerOptions, MapToEngineOptions) {
  auto p = parse_server_options({"--model", "dir", "--backend", "cpu", "--kv-codec", "f32", "--threads", "3",
                                 "--ctx-size", "1024", "--prefill-size", "64", "--parallel", "2", "--decode-ahead", "off",
                                 "--backend-options", "tune.att_wg=128 portable"});
  ASSERT_TRUE(p.ok());
  auto e = to_engine_options(p->options);
  EXPECT_EQ(e.model_dir, "dir");
  EXPECT_EQ(e.backend, "cpu");
  EXPECT_EQ(e.kv_codec, "f32");
  EXPECT_EQ(e.threads, 3);
  EXPECT_EQ(e.ctx_size, 1024);
  EXPECT_EQ(e.prefill_size, 64);
  EXPECT_EQ(e.parallel, 2);
  EXPECT_EQ(e.decode_ahead, "off");
  EXPECT_EQ(e.backend_options, "tune.att_wg=128 portable");
}

TEST(ServerOptions, HelpIsRecognized) {
  auto p = parse_server_options({"--help"});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->help);
  EXPECT_NE(p->help_text.find("--kv-codec"), std::string::npos);
}

TEST(ServerOptions, WorkPoolSizeIsReadAndChecked) {
  auto p = parse_server_options({"--model", "m", "--work-threads", "3", "--work-queue", "5"});
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->options.work_threads, 3);
  EXPECT_EQ(p->options.work_queue, 5);
  auto defaults = parse_server_options({"--model", "m"});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->options.work_threads, 2);
  EXPECT_EQ(defaults->options.work_queue, 64);
  EXPECT_FALSE(parse_server_options({"--model", "m", "--work-threads", "0"}).ok());
  EXPECT_FALSE(parse_server_options({"--model", "m", "--work-queue", "0"}).ok());
}

TEST(ServerOptions, ThinkingDefaultsToTheTemplateAndTakesOnOrOff) {
  auto plain = parse_server_options({"--model", "m"});
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_EQ(default_thinking(plain->options), std::nullopt);
  auto bare = parse_server_options({"--model", "m", "--thinking"});
  ASSERT_TRUE(bare.ok()) << bare.message();
  EXPECT_EQ(default_thinking(bare->options), std::optional<bool>(true));
  auto off = parse_server_options({"--model", "m", "--thinking=off"});
  ASSERT_TRUE(off.ok()) << off.message();
  EXPECT_EQ(default_thinking(off->options), std::optional<bool>(false));
  auto on = parse_server_options({"--model", "m", "--thinking=on"});
  ASSERT_TRUE(on.ok()) << on.message();
  EXPECT_EQ(default_thinking(on->options), std::optional<bool>(true));
  auto spaced = parse_server_options({"--model", "m", "--thinking", "off"});
  ASSERT_TRUE(spaced.ok()) << spaced.message();
  EXPECT_EQ(default_thinking(spaced->options), std::optional<bool>(false));
  auto bad = parse_server_options({"--model", "m", "--thinking=maybe"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--thinking"), std::string::npos);
}

// SwiftLM's speculative decoding flags mean what they say there; its flags for features Sluice does
// not have parse (so the message is not "unrecognised option") and are refused naming the feature.
TEST(ServerOptions, SwiftLmDraftFlagsAreAccepted) {
  auto p = parse_server_options({"--model", "m", "--draft-model", "small", "--num-draft-tokens", "5"});
  ASSERT_TRUE(p.ok()) << p.message();
  const auto e = to_engine_options(p->options);
  EXPECT_EQ(e.draft_model, "small");
  EXPECT_EQ(e.num_draft_tokens, 5);
  EXPECT_TRUE(e.draft.empty());
  EXPECT_TRUE(check_available(p->options).ok());
  auto ngram = parse_server_options({"--model", "m", "--draft", "ngram", "--spec-max-batch", "4"});
  ASSERT_TRUE(ngram.ok()) << ngram.message();
  EXPECT_EQ(to_engine_options(ngram->options).draft, "ngram");
  EXPECT_EQ(to_engine_options(ngram->options).spec_max_batch, 4);
}

TEST(ServerOptions, BadDraftOptionsAreUsageErrorsNamingTheOption) {
  auto bad = parse_server_options({"--model", "m", "--draft", "medusa"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--draft"), std::string::npos) << bad.message();
  auto both = parse_server_options({"--model", "m", "--draft", "ngram", "--draft-model", "x"});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.message().find("give one"), std::string::npos) << both.message();
  auto zero = parse_server_options({"--model", "m", "--num-draft-tokens", "0"});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.message().find("--num-draft-tokens"), std::string::npos) << zero.message();
}

TEST(ServerOptions, SwiftLmFlagsForMissingFeaturesAreRefusedByName) {
  const std::pair<const char*, const char*> flags[] = {{"--dflash", "DFlash"}, {"--vision", "image input"}, {"--audio", "audio input"}};
  for (const auto& [flag, feature] : flags) {
    auto p = parse_server_options({"--model", "m", flag});
    ASSERT_TRUE(p.ok()) << flag << ": " << p.message();
    const auto available = check_available(p->options);
    ASSERT_FALSE(available.ok()) << flag;
    EXPECT_NE(available.message().find(flag), std::string::npos) << available.message();
    EXPECT_NE(available.message().find(feature), std::string::npos) << available.message();
    EXPECT_NE(available.message().find("not available"), std::string::npos) << available.message();
  }
}
