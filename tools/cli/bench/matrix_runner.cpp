#include "matrix_runner.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "bench_report.h"
#include "machine_info.h"
#include "row_process.h"
#include "util/json.h"
#include "util/memory_bandwidth.h"

namespace sluice::cli::bench {
namespace {

std::string describe(const RowSpec& r) {
  std::string s = r.engine.backend;
  if (r.gpu_layers_label != "all") s += " gpu-layers " + r.gpu_layers_label;
  if (r.engine.threads > 0) s += " threads " + std::to_string(r.engine.threads);
  return s + " kv " + r.engine.kv_codec + " experts " + r.expert_label + " ctx " + std::to_string(r.ctx);
}

std::string one_line(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  v.Accept(w);
  return buf.GetString();
}

// The row's identifying fields, for a row that failed before it could report them itself.
rapidjson::Value failed_row(const RowSpec& r, const std::string& error, rapidjson::Document::AllocatorType& a) {
  auto s = [&](const std::string& v) { return rapidjson::Value(v.c_str(), static_cast<rapidjson::SizeType>(v.size()), a); };
  rapidjson::Value row(rapidjson::kObjectType);
  row.AddMember("backend", s(r.engine.backend), a);
  row.AddMember("backend_options", s(r.engine.backend_options), a);
  row.AddMember("gpu_layers", s(r.gpu_layers_label), a);
  row.AddMember("threads", r.engine.threads, a);
  row.AddMember("kv_codec", s(r.engine.kv_codec), a);
  row.AddMember("expert_store", s(r.expert_label), a);
  row.AddMember("ctx", r.ctx, a);
  row.AddMember("gen", r.gen, a);
  row.AddMember("reps", r.reps, a);
  row.AddMember("error", s(error), a);
  return row;
}

}  // namespace

int run_one_row(const BenchOptions& options) {
  const RowSpec spec = options.rows().front();
  rapidjson::Document out(rapidjson::kObjectType);
  auto& a = out.GetAllocator();
  auto progress = [](const std::string& line) { std::fprintf(stderr, "      %s\n", line.c_str()); };
  auto row = measure_row(spec, a, progress);
  auto model = row ? model_record(spec.engine.model_dir, a) : Result<rapidjson::Value>(make_error(""));
  if (!row || !model) {
    const std::string message = !row ? row.message() : model.message();
    out.AddMember("error", rapidjson::Value(message.c_str(), a), a);
    std::printf("%s\n", one_line(out).c_str());
    return 1;
  }
  out.AddMember("model", *model, a);
  out.AddMember("row", *row, a);
  std::printf("%s\n", one_line(out).c_str());
  return 0;
}

int run_matrix(const BenchOptions& options) {
  const auto specs = options.rows();
  rapidjson::Document doc(rapidjson::kObjectType);
  auto& a = doc.GetAllocator();
  doc.AddMember("machine", machine_record(options.plugin_dir, a), a);
  doc.AddMember("model", rapidjson::Value(rapidjson::kNullType), a);
  doc.AddMember("rows", rapidjson::Value(rapidjson::kArrayType), a);
  doc["machine"].AddMember("loadavg_end", rapidjson::Value(""), a);
  // The file is rewritten after every row: a run stopped from outside (a time limit) keeps its rows.
  auto save = [&]() -> bool {
    // The load during the run, beside the load before it: a busy machine explains noisy figures.
    doc["machine"]["loadavg_end"].SetString(loadavg().c_str(), a);
    if (options.json_out.empty()) return true;
    if (auto s = write_json_file(options.json_out, doc); !s) {
      std::cerr << "sluice bench: " << s.message() << "\n";
      return false;
    }
    return true;
  };
  // The host's read bandwidth for each thread count a CPU row runs with, measured once before the rows:
  // each CPU row's decode is set against it (the share of what this memory can give).
  std::map<int, double> read_gbs;
  for (const RowSpec& spec : specs)
    if (spec.engine.backend == "cpu" && spec.gen > 0 && !read_gbs.count(spec.engine.threads)) {
      const MemoryBandwidth bw = measure_memory_bandwidth(static_cast<unsigned>(std::max(spec.engine.threads, 0)));
      read_gbs[spec.engine.threads] = bw.read_gbs;
      rapidjson::Value m(rapidjson::kObjectType);
      m.AddMember("threads", spec.engine.threads, a);
      m.AddMember("read_gbs", bw.read_gbs, a);
      m.AddMember("copy_gbs", bw.copy_gbs, a);
      if (!doc["machine"].HasMember("memory_bandwidth")) doc["machine"].AddMember("memory_bandwidth", rapidjson::Value(rapidjson::kArrayType), a);
      doc["machine"]["memory_bandwidth"].PushBack(m, a);
      std::fprintf(stderr, "memory read bandwidth on %s threads: %.2f GB/s\n",
                   spec.engine.threads > 0 ? std::to_string(spec.engine.threads).c_str() : "all", bw.read_gbs);
    }
  if (!save()) return 1;
  int failed = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const RowSpec& spec = specs[i];
    std::fprintf(stderr, "[%zu/%zu] %s, gen %d, reps %d\n", i + 1, specs.size(), describe(spec).c_str(), spec.gen, spec.reps);
    auto out = run_child(options.one_row_args(spec), options.row_timeout_s);
    std::string error;
    rapidjson::Document child;
    if (!out) {
      error = out.message();
    } else if (auto parsed = json::parse(*out, "the row process's output"); !parsed) {
      error = parsed.message();
    } else {
      child = std::move(*parsed);
      if (auto e = json::string(child, "error")) error = *e;
      else if (!json::member(child, "row") || !json::member(child, "model")) error = "the row process reported no row";
    }
    if (!error.empty()) {
      ++failed;
      std::fprintf(stderr, "      failed: %s\n", error.c_str());
      doc["rows"].PushBack(failed_row(spec, error, a), a);
    } else {
      if (doc["model"].IsNull()) doc["model"].CopyFrom(child["model"], a);
      rapidjson::Value row;
      row.CopyFrom(child["row"], a);
      const auto gbs = json::number(row, "decode_gbs");
      if (const auto bw = read_gbs.find(spec.engine.threads); bw != read_gbs.end() && gbs && bw->second > 0)
        row.AddMember("decode_read_fraction", *gbs / bw->second, a);
      std::fprintf(stderr, "      ttft %s ms, prefill %s tokens/s, decode %s tokens/s, peak RSS %s MB\n", cell(row, "ttft_ms", 1).c_str(),
                   cell(row, "prefill_tps", 1).c_str(), cell(row, "decode_tps", 2).c_str(), cell(row, "peak_rss_mb", 0).c_str());
      doc["rows"].PushBack(row, a);
    }
    if (!save()) return 1;
  }
  std::cout << markdown_table(doc["rows"]) << std::flush;
  if (!options.json_out.empty()) std::fprintf(stderr, "wrote %s\n", options.json_out.c_str());
  if (failed > 0) std::fprintf(stderr, "sluice bench: %d of %zu rows failed\n", failed, specs.size());
  return failed > 0 ? 1 : 0;
}

}  // namespace sluice::cli::bench
