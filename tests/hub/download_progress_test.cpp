// What /health shows while a hub model downloads (hub/download_progress.h).
#include <gtest/gtest.h>

#include <rapidjson/document.h>

#include "hub/download_progress.h"

namespace sluice::hub {
namespace {

rapidjson::Document parse(const std::string& text) {
  rapidjson::Document d;
  d.Parse(text.c_str(), text.size());
  EXPECT_FALSE(d.HasParseError()) << text;
  return d;
}

TEST(DownloadProgress, HealthShowsFilesBytesAndPercent) {
  DownloadProgress p;
  p.begin("org/name");
  auto d = parse(loading_health_json(p.view(), "org/name@v1"));
  EXPECT_STREQ(d["status"].GetString(), "loading");
  EXPECT_STREQ(d["model"].GetString(), "org/name@v1");
  EXPECT_STREQ(d["download"]["phase"].GetString(), "resolving");
  EXPECT_EQ(d["download"]["percent"].GetDouble(), 0.0);

  p.plan(3, 1000);
  p.add_bytes(300);
  p.add_bytes(200);
  p.file_done("config.json");
  d = parse(loading_health_json(p.view(), "org/name"));
  EXPECT_STREQ(d["download"]["phase"].GetString(), "downloading");
  EXPECT_EQ(d["download"]["files_done"].GetInt(), 1);
  EXPECT_EQ(d["download"]["files_total"].GetInt(), 3);
  EXPECT_EQ(d["download"]["bytes_done"].GetUint64(), 500u);
  EXPECT_EQ(d["download"]["bytes_total"].GetUint64(), 1000u);
  EXPECT_DOUBLE_EQ(d["download"]["percent"].GetDouble(), 50.0);
  EXPECT_FALSE(d["download"].HasMember("error"));

  p.drop_bytes(700);  // a restart from zero never goes below nothing
  EXPECT_EQ(p.view().done_bytes, 0u);
  p.fail("x: sha256 mismatch");
  d = parse(loading_health_json(p.view(), "org/name"));
  EXPECT_STREQ(d["download"]["phase"].GetString(), "failed");
  EXPECT_STREQ(d["download"]["error"].GetString(), "x: sha256 mismatch");
}

TEST(DownloadProgress, NothingToDownloadReadsAsComplete) {
  DownloadProgress p;
  p.begin("org/name");
  p.set_phase("loading");
  auto d = parse(loading_health_json(p.view(), "org/name"));
  EXPECT_EQ(d["download"]["percent"].GetDouble(), 100.0);
  EXPECT_EQ(p.view().finished.size(), 0u);
}

}  // namespace
}  // namespace sluice::hub
