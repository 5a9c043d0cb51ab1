// --calibrate's plan file: written and read back, bounded and checked when read, applied only to the
// options the user did not give; and --mem-limit's sizes and KV sizing (engine/memory_budget.h).
#include <gtest/gtest.h>

#include "engine/memory_budget.h"
#include "server/calibrated_plan.h"
#include "server/options.h"

namespace sluice::server {
namespace {

CalibratedPlan sample_plan() {
  CalibratedPlan p;
  p.model_key = "00000000000000aa";
  p.machine_key = "00000000000000bb";
  p.model = "tiny";
  p.machine = "cpu, 2 cores";
  p.device = "cpu";
  p.host_read_gbps = 12.5;
  p.weight_read_gbps = 3.25;
  p.disk_read_gbps = 0.75;
  p.disk_direct = true;
  p.prefill = {{128, 1000}, {256, 1500}};
  p.decode = {{1, 200}, {2, 380}};
  p.parallel = 2;
  p.prefill_size = 256;
  return p;
}

TEST(CalibratedPlan, WrittenPlanReadsBackTheSame) {
  auto back = parse_plan(plan_json(sample_plan()));
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->model_key, "00000000000000aa");
  EXPECT_EQ(back->machine_key, "00000000000000bb");
  EXPECT_DOUBLE_EQ(back->host_read_gbps, 12.5);
  EXPECT_TRUE(back->disk_direct);
  ASSERT_EQ(back->decode.size(), 2u);
  EXPECT_EQ(back->decode[1].batch, 2);
  EXPECT_EQ(back->parallel, 2);
  EXPECT_EQ(back->prefill_size, 256);
}

TEST(CalibratedPlan, MalformedOrOutOfRangePlansAreErrorsNotCrashes) {
  const std::string good = plan_json(sample_plan());
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, good.size() / 3, good.size() - 3}) EXPECT_FALSE(parse_plan(good.substr(0, cut)).ok()) << cut;
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_FALSE(parse_plan(replaced("\"version\": 1", "\"version\": 2")).ok());
  EXPECT_FALSE(parse_plan(replaced("\"parallel\": 2", "\"parallel\": -1")).ok());
  EXPECT_FALSE(parse_plan(replaced("\"parallel\": 2", "\"parallel\": 100000")).ok());
  EXPECT_FALSE(parse_plan(replaced("\"host_read_gbps\": 12.500", "\"host_read_gbps\": \"fast\"")).ok());
  EXPECT_FALSE(parse_plan(replaced("{\"batch\": 1,", "{\"batch\": 0,")).ok());
  EXPECT_FALSE(parse_plan("[1,2,3]").ok());
  std::string deep(1000, '[');
  EXPECT_FALSE(parse_plan(deep).ok());
  std::string rows;
  for (int i = 0; i < 40; ++i) rows += "{\"batch\": 1, \"tokens_per_second\": 1}, ";
  EXPECT_FALSE(parse_plan(replaced("\"decode\": [", "\"decode\": [" + rows)).ok());  // more rows than a plan has
}

TEST(CalibratedPlan, AppliesOnlyWhatTheUserDidNotGive) {
  ServerOptions o;
  o.parallel = 3;
  const std::string applied = apply_plan(sample_plan(), {"parallel"}, o);
  EXPECT_EQ(o.parallel, 3);
  EXPECT_EQ(o.prefill_size, 256);
  EXPECT_EQ(applied, "prefill-size 256");
  ServerOptions fresh;
  apply_plan(sample_plan(), {}, fresh);
  EXPECT_EQ(fresh.parallel, 2);
}

TEST(CalibratedPlan, MeasuredLayerCountResolvesOnlyAGpuLayersAuto) {
  CalibratedPlan plan = sample_plan();
  plan.gpu_layers = 0;
  auto back = parse_plan(plan_json(plan));
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->gpu_layers, 0);
  ServerOptions with_auto;
  with_auto.gpu_layers = "auto";
  EXPECT_NE(apply_plan(*back, {"gpu-layers"}, with_auto).find("gpu-layers 0"), std::string::npos);
  EXPECT_EQ(with_auto.gpu_layers, "0");
  ServerOptions with_number;
  with_number.gpu_layers = "3";
  apply_plan(*back, {"gpu-layers"}, with_number);
  EXPECT_EQ(with_number.gpu_layers, "3");
  ServerOptions none;  // every layer on --backend: the plan does not split it
  apply_plan(*back, {}, none);
  EXPECT_EQ(none.gpu_layers, "");
  ServerOptions unmeasured;
  unmeasured.gpu_layers = "auto";
  apply_plan(sample_plan(), {"gpu-layers"}, unmeasured);  // -1: calibrated without --gpu-layers auto
  EXPECT_EQ(unmeasured.gpu_layers, "auto");
}

TEST(CalibratedPlan, KeysTellBackendsApart) {
  ServerOptions cpu, opencl;
  cpu.backend = "cpu";
  opencl.backend = "opencl";
  EXPECT_NE(machine_key(cpu), machine_key(opencl));
  EXPECT_EQ(machine_key(cpu), machine_key(cpu));
}

TEST(MemLimit, BareNumberIsMebibytesAndUnitsArePowersOf1024) {
  EXPECT_EQ(*parse_mem_limit("8192"), 8ull << 30);
  EXPECT_EQ(*parse_mem_limit("24G"), 24ull << 30);
  EXPECT_EQ(*parse_mem_limit("24GiB"), 24ull << 30);
  EXPECT_EQ(*parse_mem_limit("512M"), 512ull << 20);
  EXPECT_EQ(*parse_mem_limit("512mb"), 512ull << 20);
  EXPECT_EQ(*parse_mem_limit("1000000B"), 1000000u);
  EXPECT_EQ(*parse_mem_limit("1.5G"), 3ull << 29);
  for (const char* bad : {"0", "-3", "0.0001B", "abc", "8X", "", "G", "nan", "inf", "1e40"}) EXPECT_FALSE(parse_mem_limit(bad).ok()) << bad;
}

TEST(MemLimit, KvPoolGetsWhatTheRestLeavesInWholePages) {
  MemoryBudget b;
  b.limit = 100u << 20;
  b.process = 40u << 20;
  b.weights = 20u << 20;
  b.activations = 5u << 20;
  b.headroom = 15u << 20;
  auto tokens = plan_kv_tokens(b, 2048, 16, 1u << 20);  // 20 MiB left at 2 KiB a token
  ASSERT_TRUE(tokens.ok()) << tokens.message();
  EXPECT_EQ(*tokens, 10240u);
  EXPECT_EQ(b.kv_pages, 20u << 20);
  EXPECT_LE(b.planned(), b.limit);
  // At most what was wanted (ctx × parallel).
  EXPECT_EQ(*plan_kv_tokens(b, 2048, 16, 1000), 1008u);
  // A device that holds the pages caps them too.
  b.device_kv_budget = 1u << 20;
  EXPECT_EQ(*plan_kv_tokens(b, 2048, 16, 1u << 20), 512u);
}

TEST(MemLimit, TooSmallALimitNamesTheNumbers) {
  MemoryBudget b;
  b.limit = 50u << 20;
  b.process = 40u << 20;
  b.weights = 20u << 20;
  auto tokens = plan_kv_tokens(b, 2048, 16, 4096);
  ASSERT_FALSE(tokens.ok());
  EXPECT_NE(tokens.message().find("weights 20.0 MiB"), std::string::npos) << tokens.message();
  EXPECT_NE(tokens.message().find("--mem-limit 50.0 MiB"), std::string::npos) << tokens.message();
}

}  // namespace
}  // namespace sluice::server
