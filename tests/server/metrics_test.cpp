#include "server/metrics.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

using namespace sluice;
using namespace sluice::server;

namespace {

std::string sample_text() {
  EngineMetrics e;
  e.requests_total = 3;
  e.prompt_tokens_total = 30;
  e.completion_tokens_total = 12;
  e.prefill_seconds_total = 0.5;
  e.decode_seconds_total = 1.5;
  e.queue_depth = 2;
  e.weight_bytes = 1000;
  e.expert_store = "uring";
  e.expert_bytes_read = 4096;
  e.expert_misses = 2;
  e.expert_hits = 6;
  e.kv_pages_total = 64;
  e.kv_pages_cached = 5;
  e.decode_passes_total = 4;
  e.decode_pass_tokens_total = 10;
  e.draft_tokens_total = 8;
  e.draft_accepted_total = 6;
  ServerCounters c;
  c.count_request("/v1/chat/completions", 200);
  c.count_request("/v1/chat/completions", 200);
  c.count_request("other", 404);
  ServerInfo info{"tiny \"model\"", "cpu (x)", "f16", "resident", "0.1.0", "replica-a"};
  return render_metrics(e, c, info, 12.5);
}

}  // namespace

TEST(Metrics, ExpertStoreCountersAreExported) {
  const std::string text = sample_text();
  EXPECT_NE(text.find("sluice_expert_bytes_read_total 4096"), std::string::npos) << text;
  EXPECT_NE(text.find("sluice_expert_misses_total 2"), std::string::npos);
  EXPECT_NE(text.find("sluice_expert_hits_total 6"), std::string::npos);
}

TEST(Metrics, CountsRequestsByRouteAndCode) {
  std::string text = sample_text();
  EXPECT_NE(text.find("sluice_http_requests_total{route=\"/v1/chat/completions\",code=\"200\"} 2"), std::string::npos);
  EXPECT_NE(text.find("sluice_http_requests_total{route=\"other\",code=\"404\"} 1"), std::string::npos);
  EXPECT_NE(text.find("sluice_queue_depth 2"), std::string::npos);
  EXPECT_NE(text.find("sluice_decode_tokens_per_second 8"), std::string::npos);
  EXPECT_NE(text.find("model=\"tiny \\\"model\\\"\""), std::string::npos);  // label escaping
}

TEST(Metrics, KvPageGaugesSeparateSequencesFromThePrefixCache) {
  EngineMetrics e;
  e.kv_pages_total = 128;
  e.kv_pages_in_use = 3;
  e.kv_pages_cached = 40;
  e.kv_recent_pages_in_use = 2;
  const std::string text = render_metrics(e, ServerCounters{}, ServerInfo{}, 1.0);
  EXPECT_NE(text.find("\nsluice_kv_pages_capacity 128\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nsluice_kv_pages_in_use 3\n"), std::string::npos);
  EXPECT_NE(text.find("\nsluice_kv_pages_cached 40\n"), std::string::npos);
  EXPECT_NE(text.find("\nsluice_kv_recent_pages_in_use 2\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE sluice_kv_pages_in_use gauge"), std::string::npos);
}

TEST(Metrics, PassesPromtoolCheck) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "promtool not installed (Debian: prometheus)";
  auto path = std::filesystem::temp_directory_path() / ("sluice-metrics-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(path) << sample_text();
  std::string cmd = "promtool check metrics < " + path.string() + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe)) output += buf;
  int status = ::pclose(pipe);
  std::filesystem::remove(path);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "") << "promtool lint findings:\n" << output;
}

TEST(Metrics, SpeculativeDecodingAcceptanceAndTokensPerPass) {
  const std::string text = sample_text();
  EXPECT_NE(text.find("\nsluice_spec_draft_tokens_total 8\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nsluice_spec_accepted_tokens_total 6\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nsluice_spec_acceptance_rate 0.75\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nsluice_tokens_per_target_pass 2.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nsluice_decode_passes_total 4\n"), std::string::npos) << text;
}
