// sluice perplexity: mean NLL and perplexity of the model over a token file or a text file.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "engine/perplexity.h"
#include "engine/runtime.h"
#include "model_options.h"
#include "model_source.h"
#include "util/file_io.h"
#include "util/json.h"

namespace sluice::cli {
namespace {

// A JSON array of ids, or an object whose "ids" member is one.
Result<std::vector<int32_t>> read_ids_file(const std::string& path) {
  auto doc = json::parse_file(path);
  if (!doc) return doc.error();
  const rapidjson::Value* arr = doc->IsArray() ? &*doc : json::member(*doc, "ids");
  if (!arr || !arr->IsArray()) return make_error(path + ": expected a JSON array of token ids or {\"ids\": [...]}");
  std::vector<int32_t> ids;
  ids.reserve(arr->Size());
  for (const auto& v : arr->GetArray()) {
    if (!v.IsInt()) return make_error(path + ": every id must be an integer");
    ids.push_back(v.GetInt());
  }
  return ids;
}

}  // namespace

int run_perplexity(const Args& args) {
  EngineOptions options;
  std::string ids_file, text_file, score = "second-half";
  PerplexityOptions popt;
  po::options_description desc("perplexity options");
  desc.add_options()("help", "show this help");
  add_model_options(desc, options);
  desc.add_options()
      ("ids-file", po::value(&ids_file), "JSON array of token ids")
      ("text-file", po::value(&text_file), "UTF-8 text to tokenize")
      ("ctx", po::value(&popt.ctx)->default_value(512), "tokens per chunk")
      ("chunks", po::value(&popt.chunks)->default_value(0), "chunks to score (0 = all that fit)")
      ("score", po::value(&score)->default_value("second-half"), "second-half (as llama.cpp) | all")
      ("json", "print one JSON line");
  po::variables_map vm;
  if (int rc = parse_or_exit("perplexity", args, desc, vm,
                             "--model DIR (--ids-file F.json | --text-file F) --ctx N [--chunks K] [--score all|second-half] [--json]");
      rc >= 0)
    return rc;
  if (vm.count("ids-file") == vm.count("text-file")) {
    std::cerr << "sluice perplexity: give exactly one of --ids-file and --text-file\n";
    return 2;
  }
  auto model = resolve_model_arg("perplexity", options.model_dir);
  if (!model) return 1;
  options.model_dir = model->dir;
  if (score == "all") {
    popt.scoring = PerplexityScoring::kAll;
  } else if (score != "second-half") {
    std::cerr << "sluice perplexity: --score must be all or second-half\n";
    return 2;
  }
  if (options.ctx_size < popt.ctx) options.ctx_size = popt.ctx;
  options.prefill_size = std::max(options.prefill_size, 1);
  auto rt = Runtime::open(options, static_cast<uint32_t>(popt.ctx));
  if (!rt) {
    std::cerr << "sluice perplexity: " << rt.message() << "\n";
    return 1;
  }
  std::vector<int32_t> ids;
  if (!ids_file.empty()) {
    auto r = read_ids_file(ids_file);
    if (!r) {
      std::cerr << "sluice perplexity: " << r.message() << "\n";
      return 1;
    }
    ids = std::move(*r);
  } else {
    auto text = read_text_file(text_file);
    if (!text) {
      std::cerr << "sluice perplexity: " << text.message() << "\n";
      return 1;
    }
    ids = (*rt)->tokenizer().encode(*text, true);
  }
  popt.progress = [](int chunk, int total, double ppl) {
    std::fprintf(stderr, "\r[%d/%d] ppl %.4f", chunk, total, ppl);
    if (chunk == total) std::fprintf(stderr, "\n");
  };
  auto result = compute_perplexity(**rt, ids, popt);
  if (!result) {
    std::cerr << "sluice perplexity: " << result.message() << "\n";
    return 1;
  }
  if (vm.count("json")) {
    std::printf("{\"ppl\":%.6f,\"mean_nll\":%.6f,\"stderr\":%.6f,\"tokens_scored\":%lld,\"chunks\":%d,\"ctx\":%d,\"kv_codec\":%s,"
                "\"kv_recent\":%u,\"backend\":%s,\"seconds\":%.3f}\n",
                result->ppl, result->mean_nll, result->stderr_nll, static_cast<long long>(result->tokens_scored), result->chunks,
                popt.ctx, json::quote((*rt)->kv().codec_description()).c_str(), (*rt)->kv().recent_window(),
                json::quote((*rt)->backend().description()).c_str(), result->seconds);
  } else {
    std::printf("perplexity %.4f (mean NLL %.5f ± %.5f) over %lld tokens in %d chunks of %d [%s, kv %s, %u newest exact]\n",
                result->ppl, result->mean_nll, result->stderr_nll, static_cast<long long>(result->tokens_scored), result->chunks,
                popt.ctx, (*rt)->backend().description().c_str(), (*rt)->kv().codec_description().c_str(),
                (*rt)->kv().recent_window());
  }
  return 0;
}

}  // namespace sluice::cli
