#include "bench_compare.h"

#include <cstdio>
#include <iostream>
#include <map>
#include <optional>

#include "bench_report.h"
#include "util/json.h"

namespace sluice::cli::bench {
namespace {

std::string ratio(const rapidjson::Value& a, const rapidjson::Value& b, const char* field) {
  const auto x = json::number(a, field), y = json::number(b, field);
  if (!x || !y || *x == 0) return "–";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f×", *y / *x);
  return buf;
}

std::string machine_line(const rapidjson::Document& d) {
  const auto* m = json::member(d, "machine");
  const auto* model = json::member(d, "model");
  std::string s;
  if (m && m->IsObject())
    s += json::string(*m, "cpu").value_or("?") + ", " + std::to_string(json::integer(*m, "cores").value_or(0)) + " cores, commit " +
         json::string(*m, "commit").value_or("?").substr(0, 12) + ", " + json::string(*m, "date").value_or("?") + ", load " +
         json::string(*m, "loadavg").value_or("?");
  if (model && model->IsObject()) s += "; model " + json::string(*model, "name").value_or("?");
  return s;
}

}  // namespace

int run_compare(const std::string& a_path, const std::string& b_path) {
  auto a = read_result_file(a_path);
  if (!a) {
    std::cerr << "sluice bench --compare: " << a.message() << "\n";
    return 1;
  }
  auto b = read_result_file(b_path);
  if (!b) {
    std::cerr << "sluice bench --compare: " << b.message() << "\n";
    return 1;
  }
  std::map<std::string, const rapidjson::Value*> b_rows;
  for (const auto& r : (*b)["rows"].GetArray()) b_rows.emplace(row_key(r), &r);
  std::cout << "A: " << a_path << " (" << machine_line(*a) << ")\nB: " << b_path << " (" << machine_line(*b) << ")\n\n"
            << "| backend | gpu layers | threads | kv | experts | ctx | decode tok/s A → B | ratio | prefill tok/s A → B | ratio | "
               "ttft ms A → B | ratio | peak RSS MB A → B | ratio |\n"
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  std::map<std::string, bool> seen;
  for (const auto& r : (*a)["rows"].GetArray()) {
    const std::string key = row_key(r);
    seen[key] = true;
    auto it = b_rows.find(key);
    if (it == b_rows.end()) {
      std::cout << "| " << key << " | only in A | | | | | | | |\n";
      continue;
    }
    const auto& s = *it->second;
    std::cout << "| " << key << " | " << cell(r, "decode_tps", 2) << " → " << cell(s, "decode_tps", 2) << " | " << ratio(r, s, "decode_tps")
              << " | " << cell(r, "prefill_tps", 1) << " → " << cell(s, "prefill_tps", 1) << " | " << ratio(r, s, "prefill_tps") << " | "
              << cell(r, "ttft_ms", 1) << " → " << cell(s, "ttft_ms", 1) << " | " << ratio(r, s, "ttft_ms") << " | " << cell(r, "peak_rss_mb", 0)
              << " → " << cell(s, "peak_rss_mb", 0) << " | " << ratio(r, s, "peak_rss_mb") << " |\n";
  }
  for (const auto& [key, row] : b_rows)
    if (!seen.count(key)) std::cout << "| " << key << " | only in B | | | | | | | |\n";
  return 0;
}

}  // namespace sluice::cli::bench
