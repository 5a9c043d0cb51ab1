// The example plugins of each kind load through the host's loader and behave: the backend passes the
// conformance checks `sluice conformance` runs (against the CPU backend too), the codec round-trips
// within its step, the store serves the bytes of the file ranges it was given.
#include <cmath>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "conformance/conformance.h"
#include "plugin/plugin_registry.h"
#include "reference.h"

namespace sluice {
namespace {

class PluginExamples : public ::testing::Test {
 protected:
  void SetUp() override { registry_.scan(test::binary_path("lib/examples")); }
  const PluginRecord* find(sl_plugin_kind kind, const char* name) {
    const PluginRecord* r = registry_.find(kind, name);
    EXPECT_NE(r, nullptr) << name << " did not load from " << test::binary_path("lib/examples");
    return r;
  }
  PluginRegistry registry_;
};

TEST_F(PluginExamples, BackendPassesTheConformanceChecksAgainstTheCpuBackend) {
  const auto* rec = find(SL_PLUGIN_BACKEND, "example");
  ASSERT_NE(rec, nullptr);
  auto be = BackendHandle::open(static_cast<const sl_backend_api*>(rec->descriptor->api), "example", "", 1);
  ASSERT_TRUE(be) << be.message();
  PluginRegistry cpu_registry;  // as `sluice conformance` compares with the CPU plugin by default
  const auto& cpu_rec = cpu_registry.load_file(test::binary_path("lib/sluice-backend-cpu.so"));
  ASSERT_TRUE(cpu_rec.loaded) << cpu_rec.status;
  auto cpu = BackendHandle::open(static_cast<const sl_backend_api*>(cpu_rec.descriptor->api), "cpu", "", 1);
  ASSERT_TRUE(cpu) << cpu.message();
  conformance::Options o;
  o.quick = true;
  o.against = cpu->get();
  int ran = 0;
  for (const auto& r : conformance::run_all(**be, o)) {
    EXPECT_TRUE(r.passed()) << r.op << ": " << r.status << " " << r.detail;
    if (r.status != "pass") continue;
    ++ran;
    EXPECT_EQ(r.against, "compared") << r.op;
    EXPECT_GT(r.compared, 0) << r.op;
  }
  EXPECT_GE(ran, 15);  // f32 weights and every weight-free op; other weight forms are declared unsupported
}

TEST_F(PluginExamples, KvCodecRoundTripsWithinHalfAStep) {
  const auto* rec = find(SL_PLUGIN_KVCODEC, "example-i8");
  ASSERT_NE(rec, nullptr);
  const auto* api = static_cast<const sl_kvcodec_api*>(rec->descriptor->api);
  sl_kvcodec* c = nullptr;
  sl_error err{};
  ASSERT_EQ(api->create(64, SL_KV_KEYS, "", &c, &err), SL_OK) << err.message;
  sl_kv_format f{};
  f.struct_size = sizeof(f);
  api->get_format(c, &f);
  EXPECT_EQ(f.row_bytes, 68u);
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0, 2);
  std::vector<float> x(3 * 64), y(x.size());
  for (auto& v : x) v = d(rng);
  std::vector<unsigned char> rows(3 * f.row_bytes);
  ASSERT_EQ(api->encode(c, x.data(), 3, rows.data(), &err), SL_OK);
  ASSERT_EQ(api->decode(c, rows.data(), 3, y.data(), &err), SL_OK);
  for (int r = 0; r < 3; ++r) {
    float m = 0;
    for (int i = 0; i < 64; ++i) m = std::max(m, std::abs(x[r * 64 + i]));
    for (int i = 0; i < 64; ++i) EXPECT_NEAR(y[r * 64 + i], x[r * 64 + i], m / 127 / 2 * 1.001) << r << " " << i;
  }
  EXPECT_NE(api->opencl_source(c), nullptr);
  api->destroy(c);
}

TEST_F(PluginExamples, ExpertStoreServesTheBytesOfItsRanges) {
  const auto* rec = find(SL_PLUGIN_EXPERTSTORE, "example-pread");
  ASSERT_NE(rec, nullptr);
  const auto* api = static_cast<const sl_expertstore_api*>(rec->descriptor->api);
  const auto path = std::filesystem::temp_directory_path() / ("sluice-example-store-" + std::to_string(::getpid()));
  std::vector<char> bytes(4096);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const std::string file = path.string();
  const char* files[] = {file.c_str()};
  // 1 layer, 2 experts, 2 parts each.
  const sl_expert_part parts[] = {{0, 0, 100}, {0, 100, 50}, {0, 1000, 300}, {0, 3000, 1096}};
  sl_expertstore_config cfg{};
  cfg.struct_size = sizeof(cfg);
  cfg.n_files = 1;
  cfg.files = files;
  cfg.n_layers = 1;
  cfg.n_experts = 2;
  cfg.n_parts = 2;
  cfg.parts = parts;
  cfg.options = "";
  sl_expertstore* store = nullptr;
  sl_error err{};
  ASSERT_EQ(api->create(&cfg, &store, &err), SL_OK) << err.message;
  const uint32_t experts[] = {1, 0};
  const void* got[4] = {};
  ASSERT_EQ(api->acquire(store, 0, experts, 2, got, &err), SL_OK) << err.message;
  EXPECT_EQ(std::memcmp(got[0], bytes.data() + 1000, 300), 0);
  EXPECT_EQ(std::memcmp(got[1], bytes.data() + 3000, 1096), 0);
  EXPECT_EQ(std::memcmp(got[2], bytes.data(), 100), 0);
  EXPECT_EQ(std::memcmp(got[3], bytes.data() + 100, 50), 0);
  api->release(store, 0, experts, 2);
  sl_expertstore_stats stats{};
  stats.struct_size = sizeof(stats);
  api->get_stats(store, &stats);
  EXPECT_EQ(stats.bytes_read, 1546u);
  EXPECT_EQ(stats.cache_bytes, 0u);
  const uint32_t bad[] = {2};
  EXPECT_NE(api->acquire(store, 0, bad, 1, got, &err), SL_OK);
  api->destroy(store);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace sluice
