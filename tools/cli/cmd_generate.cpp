// sluice generate: run one prompt through the engine and print the completion (streamed), or with
// --json a final line {"prompt_ids":[...],"ids":[...],"text":"...","stats":{...}}.
#include <cstdio>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "engine/engine.h"
#include "model_options.h"
#include "model_source.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

namespace sluice::cli {
namespace {

Result<std::vector<int32_t>> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      std::size_t used = 0;
      long v = std::stol(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return make_error("--prompt-ids: '" + item + "' is not a token id");
    }
  }
  return ids;
}

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// The expert store's counters, for Mixture-of-Experts models ("" for dense ones).
std::string expert_stats_json(const EngineMetrics& m) {
  if (m.expert_store.empty()) return "";
  std::ostringstream out;
  const double bandwidth = m.expert_read_seconds > 0 ? m.expert_bytes_read / m.expert_read_seconds : 0;
  out << ",\"expert_store\":" << json::quote(m.expert_store) << ",\"expert_bytes_read\":" << m.expert_bytes_read
      << ",\"expert_read_requests\":" << m.expert_read_requests << ",\"expert_hits\":" << m.expert_hits
      << ",\"expert_misses\":" << m.expert_misses << ",\"expert_prefetched\":" << m.expert_prefetched
      << ",\"expert_cache_bytes\":" << m.expert_cache_bytes << ",\"expert_budget_bytes\":" << m.expert_budget_bytes
      << ",\"expert_read_seconds\":" << m.expert_read_seconds << ",\"expert_read_bandwidth\":" << bandwidth
      << ",\"expert_read_p50_us\":" << m.expert_read_p50_us << ",\"expert_read_p99_us\":" << m.expert_read_p99_us;
  return out.str();
}

}  // namespace

int run_generate(const Args& args) {
  EngineOptions options;
  std::string prompt, prompt_ids;
  int max_tokens = 128;
  SamplingParams sampling;
  float temp = 0.0f;
  uint64_t seed = 0;
  po::options_description desc("generate options");
  desc.add_options()("help", "show this help");
  add_model_options(desc, options);
  desc.add_options()
      ("prompt", po::value(&prompt), "prompt text (tokenized without special tokens)")
      ("prompt-ids", po::value(&prompt_ids), "prompt as comma-separated token ids")
      ("max-tokens", po::value(&max_tokens)->default_value(128), "tokens to generate at most")
      ("temp", po::value(&temp)->default_value(0.0f), "temperature (0 = greedy)")
      ("top-k", po::value(&sampling.top_k)->default_value(0), "top-k (0 = off)")
      ("top-p", po::value(&sampling.top_p)->default_value(1.0f), "top-p")
      ("min-p", po::value(&sampling.min_p)->default_value(0.0f), "min-p")
      ("repeat-penalty", po::value(&sampling.repeat_penalty)->default_value(1.0f), "repetition penalty")
      ("seed", po::value(&seed), "random seed")
      ("ignore-eos", "keep generating past end-of-sequence tokens")
      ("json", "print one JSON line with ids, text and stats");
  po::variables_map vm;
  if (int rc = parse_or_exit("generate", args, desc, vm, "--model DIR (--prompt TEXT | --prompt-ids 1,2,3) [options]"); rc >= 0)
    return rc;
  if (vm.count("prompt") == vm.count("prompt-ids")) {
    std::cerr << "sluice generate: give exactly one of --prompt and --prompt-ids\n";
    return 2;
  }
  sampling.temperature = temp;
  if (vm.count("seed")) sampling.seed = seed;
  const bool json_out = vm.count("json") > 0;
  auto model = resolve_model_arg("generate", options.model_dir);
  if (!model) return 1;
  options.model_dir = model->dir;
  if (!options.draft_model.empty()) {
    auto draft = resolve_model_arg("generate", options.draft_model);
    if (!draft) return 1;
    options.draft_model = draft->dir;
  }

  auto engine = Engine::create(options);
  if (!engine) {
    std::cerr << "sluice generate: " << engine.message() << "\n";
    return 1;
  }
  GenerationRequest req;
  if (vm.count("prompt")) {
    req.prompt_ids = (*engine)->tokenizer().encode(prompt, false);
  } else {
    auto ids = parse_id_list(prompt_ids);
    if (!ids) {
      std::cerr << "sluice generate: " << ids.message() << "\n";
      return 2;
    }
    req.prompt_ids = *ids;
  }
  req.max_tokens = max_tokens;
  req.sampling = sampling;
  req.ignore_eos = vm.count("ignore-eos") > 0;
  StreamingDecoder stream((*engine)->tokenizer());
  if (!json_out) {
    req.on_token = [&](const TokenEvent& e) {
      std::cout << stream.push(e.id) << std::flush;
      return true;
    };
  }
  const std::vector<int32_t> prompt_used = req.prompt_ids;
  const GenerationResult result = (*engine)->generate(std::move(req));
  (*engine)->shutdown();
  if (result.finish == FinishReason::kError) {
    std::cerr << "sluice generate: " << result.error << "\n";
    return 1;
  }
  const auto& st = result.stats;
  if (json_out) {
    const std::string text = (*engine)->tokenizer().decode(result.ids);
    std::cout << "{\"prompt_ids\":" << ids_json(prompt_used) << ",\"ids\":" << ids_json(result.ids)
              << ",\"text\":" << json::quote(text) << ",\"finish_reason\":\"" << to_string(result.finish)
              << "\",\"stats\":{\"prompt_tokens\":" << st.prompt_tokens << ",\"completion_tokens\":" << st.completion_tokens
              << ",\"prefill_ms\":" << st.prefill_ms << ",\"decode_ms\":" << st.decode_ms
              << ",\"prefill_tps\":" << st.prefill_tps() << ",\"decode_tps\":" << st.decode_tps()
              << ",\"decode_passes\":" << st.decode_passes << ",\"tokens_per_pass\":" << st.tokens_per_pass()
              << ",\"draft_tokens\":" << st.draft_tokens << ",\"draft_accepted\":" << st.draft_accepted
              << ",\"acceptance_rate\":" << st.acceptance_rate()
              << ",\"backend\":" << json::quote((*engine)->backend_name()) << expert_stats_json((*engine)->metrics()) << "}}" << std::endl;
  } else {
    std::cout << stream.flush() << std::endl;
    std::fprintf(stderr, "[%d prompt tokens, %.1f tok/s prefill; %d generated, %.1f tok/s decode; %s]\n", st.prompt_tokens,
                 st.prefill_tps(), st.completion_tokens, st.decode_tps(), to_string(result.finish));
    if (st.draft_tokens > 0)
      std::fprintf(stderr, "[speculative: %d of %d guesses kept (%.0f%%), %.2f tokens per target pass]\n", st.draft_accepted,
                   st.draft_tokens, 100.0 * st.acceptance_rate(), st.tokens_per_pass());
  }
  return 0;
}

}  // namespace sluice::cli
