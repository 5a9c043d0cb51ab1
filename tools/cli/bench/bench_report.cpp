#include "bench_report.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include "util/json.h"

namespace sluice::cli::bench {
namespace {

std::string text(const rapidjson::Value& row, const char* field) {
  const auto* v = json::member(row, field);
  if (!v) return "–";
  if (v->IsString()) return v->GetString();
  if (v->IsInt64()) return std::to_string(v->GetInt64());
  return "–";
}

}  // namespace

Status write_json_file(const std::string& path, const rapidjson::Document& doc) {
  rapidjson::StringBuffer buf;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buf);
  w.SetIndent(' ', 1);
  doc.Accept(w);
  // Written beside and renamed over: a run killed mid-write leaves the previous whole file.
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return make_error("cannot write " + tmp);
  out << buf.GetString() << "\n";
  out.close();
  if (!out) return make_error("writing " + tmp + " failed");
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  return {};
}

Result<rapidjson::Document> read_result_file(const std::string& path) {
  auto doc = json::parse_file(path);
  if (!doc) return doc.error();
  if (!doc->IsObject() || !json::member(*doc, "rows") || !(*doc)["rows"].IsArray())
    return make_error(path + ": not a `sluice bench` result file (no \"rows\" array)");
  return std::move(*doc);
}

std::string cell(const rapidjson::Value& row, const char* field, int decimals, double times) {
  const auto* v = json::member(row, field);
  if (!v || !v->IsNumber()) return "–";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v->GetDouble() * times);
  return buf;
}

std::string row_key(const rapidjson::Value& row) {
  return text(row, "backend") + " | " + text(row, "gpu_layers") + " | " + text(row, "threads") + " | " + text(row, "kv_codec") + " | " +
         text(row, "expert_store") + " | " + text(row, "ctx");
}

std::string markdown_table(const rapidjson::Value& rows) {
  std::string t =
      "| backend | device | gpu layers | threads | kv | experts | ctx | ttft ms | prefill tok/s | decode tok/s (min–max) | "
      "decode GB/s (% of read) | peak RSS MB | device MB | KV MB | expert MB/token | hit rate |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& r : rows.GetArray()) {
    if (const auto* e = json::member(r, "error"); e && e->IsString()) {
      t += "| " + row_key(r) + " | failed: " + e->GetString() + " |\n";
      continue;
    }
    const auto kv = json::number(r, "kv_bytes");
    const auto per_token = json::number(r, "expert_bytes_read_per_token");
    char kv_mb[32] = "–", expert_mb[32] = "–";
    if (kv) std::snprintf(kv_mb, sizeof(kv_mb), "%.2f", *kv / (1 << 20));
    if (per_token) std::snprintf(expert_mb, sizeof(expert_mb), "%.2f", *per_token / (1 << 20));
    const std::string threads = text(r, "threads") == "0" ? "all" : text(r, "threads");
    // The bytes a decode step reads per second, and on the CPU the share of the host's measured read
    // bandwidth that is (a GPU's own bandwidth is not measured here).
    std::string decode_gbs = cell(r, "decode_gbs", 1);
    if (json::number(r, "decode_read_fraction")) decode_gbs += " (" + cell(r, "decode_read_fraction", 0, 100) + "%)";
    // The backend with the options it was created with, where there were any.
    const std::string options = json::string(r, "backend_options").value_or("");
    t += "| " + text(r, "backend") + (options.empty() ? "" : " (" + options + ")") + " | " + text(r, "device") + " | " + text(r, "gpu_layers") + " | " + threads + " | " + text(r, "kv_codec") +
         " | " + text(r, "expert_store") + " | " + text(r, "ctx") + " | " + cell(r, "ttft_ms", 1) + " | " + cell(r, "prefill_tps", 1) + " | " +
         cell(r, "decode_tps", 2) + " (" + cell(r, "decode_tps_min", 2) + "–" + cell(r, "decode_tps_max", 2) + ") | " + decode_gbs + " | " + cell(r, "peak_rss_mb", 0) +
         " | " + cell(r, "device_mem_mb", 1) + " | " + kv_mb + " | " + expert_mb + " | " + cell(r, "hit_rate", 3) + " |\n";
  }
  return t;
}

}  // namespace sluice::cli::bench
