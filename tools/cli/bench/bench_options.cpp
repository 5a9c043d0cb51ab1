#include "bench_options.h"

#include <iostream>

#include <boost/program_options.hpp>

#include "engine/kv_cache.h"

namespace sluice::cli::bench {
namespace {

namespace po = boost::program_options;

const char* kSynopsis =
    "--model DIR [--backends cpu,opencl] [--kv-codecs f16,q8] [--ctx 128,512] [--gen N] [--reps R] [--json-out FILE] ...\n"
    "       sluice bench --compare A.json B.json\n"
    "       sluice bench --server URL [--clients N] [--requests M] [--json-out FILE] ...";

struct UsageError {
  std::string message;
};

std::vector<std::string> items_of(const std::vector<std::string>& values, const char* option) {
  std::vector<std::string> out;
  for (const auto& v : values)
    for (auto& item : split_items(v)) out.push_back(std::move(item));
  if (out.empty()) throw UsageError{std::string("--") + option + ": empty list"};
  return out;
}

std::vector<int> ints_of(const std::string& text, const char* option, int max) {
  auto r = parse_int_list(text, (std::string("--") + option).c_str(), max);
  if (!r) throw UsageError{r.message()};
  return *r;
}

void require_range(const char* option, double v, double lo, double hi) {
  if (v < lo || v > hi)
    throw UsageError{std::string("--") + option + " must be from " + std::to_string(static_cast<long long>(lo)) + " to " +
                     std::to_string(static_cast<long long>(hi))};
}

}  // namespace

std::vector<RowSpec> BenchOptions::rows() const {
  std::vector<RowSpec> out;
  for (const auto& backend : backends)
    for (const auto& layers : gpu_layers)
      for (int t : threads)
        for (const auto& kv : kv_codecs)
          for (const auto& store : expert_stores)
            for (int c : ctx) {
              RowSpec r;
              r.engine.model_dir = model_dir;
              r.engine.plugin_dir = plugin_dir;
              r.engine.backend = backend;
              r.engine.backend_options = backend_options;
              r.engine.gpu_layers = *parse_gpu_layers(layers);
              r.gpu_layers_label = layers;
              r.engine.threads = t;
              r.engine.kv_codec = kv;
              r.engine.expert_store = store.spec;
              r.engine.prefill_size = prefill_size;
              r.expert_label = store.label;
              r.expert_budget_mb = store.budget_mb;
              r.expert_budget_pct = store.budget_pct;
              r.ctx = c;
              r.gen = gen;
              r.reps = reps;
              out.push_back(std::move(r));
            }
  return out;
}

std::vector<std::string> BenchOptions::one_row_args(const RowSpec& r) const {
  // ';' keeps each single value whole whatever commas it contains (k=A,v=B; uring options).
  std::vector<std::string> a = {"bench", "--one-row", "--model", r.engine.model_dir, "--backends", r.engine.backend + ";",
                                "--gpu-layers", r.gpu_layers_label, "--threads", std::to_string(r.engine.threads),
                                "--kv-codecs", r.engine.kv_codec + ";", "--expert-stores", r.expert_label + ";",
                                "--ctx", std::to_string(r.ctx), "--gen", std::to_string(r.gen), "--reps", std::to_string(r.reps),
                                "--prefill-size", std::to_string(r.engine.prefill_size)};
  if (!r.engine.plugin_dir.empty()) a.insert(a.end(), {"--plugin-dir", r.engine.plugin_dir});
  if (!r.engine.backend_options.empty()) a.insert(a.end(), {"--backend-options", r.engine.backend_options});
  return a;
}

int parse_bench_options(const std::vector<std::string>& args, BenchOptions& o) {
  std::vector<std::string> backends, gpu_layers, kv_codecs, expert_stores;
  std::string threads = "0", ctx = "128,512", prompt_lengths = "16,128,512", session_ids = "on";
  po::options_description matrix("Matrix (lists are comma-separated; ';' also separates, e.g. \"f16;k=turbo4,v=turbo3\")");
  matrix.add_options()
      ("help", "this help")
      ("model", po::value(&o.model_dir), "model folder")
      ("backends", po::value(&backends)->composing(), "cpu, opencl, opencl:P:D, auto or a plugin path (default cpu)")
      ("gpu-layers", po::value(&gpu_layers)->composing(), "layer splits: N (first N layers on the GPU backend), all, auto (default all)")
      ("threads", po::value(&threads), "CPU thread counts (default 0 = all cores)")
      ("kv-codecs", po::value(&kv_codecs)->composing(), "KV codecs: f16, f32, q8, q4, turbo2/3/4, turbo-prod, k=A,v=B (default f16)")
      ("expert-stores", po::value(&expert_stores)->composing(),
       "MoE expert stores with budgets: resident, uring, uring@MiB, uring@N% of the experts (default resident)")
      ("ctx", po::value(&ctx), "prompt lengths: prefill that many tokens, then decode at that depth (default 128,512)")
      ("gen", po::value(&o.gen), "tokens decoded per rep (default 32)")
      ("reps", po::value(&o.reps), "repetitions per row: median with min-max (default 1)")
      ("prefill-size", po::value(&o.prefill_size), "prompt tokens per forward pass (default 512)")
      ("plugin-dir", po::value(&o.plugin_dir), "where the sluice-*.so plugins are (default: next to the program)")
      ("backend-options", po::value(&o.backend_options),
       "options for every row's backend, e.g. the CPU's \"activations=int8\" or OpenCL's \"tune.att_wg=128\"")
      ("row-timeout", po::value(&o.row_timeout_s), "seconds before a row is stopped and recorded as failed (default: none)")
      ("json-out", po::value(&o.json_out), "write {\"machine\",\"model\",\"rows\"} to FILE");
  po::options_description modes("Other modes");
  modes.add_options()
      ("compare", po::value(&o.compare)->multitoken(), "A.json B.json: B's figures against A's, row by row")
      ("server", po::value(&o.server.url), "load a running server at URL (http://host:port)")
      ("clients", po::value(&o.server.clients), "--server: concurrent streaming clients (default 4)")
      ("requests", po::value(&o.server.requests), "--server: requests in all (default 16)")
      ("prompt-lengths", po::value(&prompt_lengths), "--server: words in each request's own part, cycled (default 16,128,512)")
      ("shared-prefix", po::value(&o.server.shared_prefix_words),
       "--server: words of the shared prefix every other request starts with (default 1024; 0 = none)")
      ("api", po::value(&o.server.api), "--server: completions | chat (default completions)")
      ("api-key", po::value(&o.server.api_key), "--server: bearer key")
      ("request-timeout", po::value(&o.server.timeout_s), "--server: seconds per request (default 300)")
      ("turns", po::value(&o.server.turns), "--server: turns of each conversation (chat; default 1)")
      ("session-ids", po::value(&session_ids), "--server --turns: send X-Session-Id with each turn, on | off (default on)");
  po::options_description hidden;
  hidden.add_options()("one-row", "measure one row in this process (used by the matrix runner)");
  po::options_description all;
  all.add(matrix).add(modes).add(hidden);
  po::options_description visible;
  visible.add(matrix).add(modes);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(all).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: sluice bench " << kSynopsis << "\n\n" << visible << "\n";
      return 0;
    }
    po::notify(vm);
    const bool server_only = vm.count("clients") || vm.count("requests") || vm.count("prompt-lengths") || vm.count("shared-prefix") ||
                             vm.count("turns") || vm.count("session-ids") ||
                             vm.count("api") || vm.count("api-key") || vm.count("request-timeout");
    const int n_modes = (vm.count("compare") ? 1 : 0) + (vm.count("server") ? 1 : 0) + (vm.count("one-row") ? 1 : 0);
    if (n_modes > 1) throw UsageError{"--compare, --server and --one-row are separate modes: give one"};
    if (vm.count("compare")) {
      o.mode = BenchOptions::Mode::kCompare;
      if (o.compare.size() != 2) throw UsageError{"--compare takes two result files: --compare A.json B.json"};
      return -1;
    }
    if (vm.count("server")) {
      o.mode = BenchOptions::Mode::kServer;
      auto& s = o.server;
      if (s.url.rfind("http://", 0) != 0) throw UsageError{"--server: '" + s.url + "' is not an http:// URL (https is not supported)"};
      if (vm.count("gen")) s.gen = o.gen;
      require_range("clients", s.clients, 1, 1024);
      require_range("requests", s.requests, 1, 1000000);
      require_range("gen", s.gen, 1, 1 << 20);
      require_range("shared-prefix", s.shared_prefix_words, 0, 1 << 20);
      require_range("request-timeout", s.timeout_s, 1, 86400);
      s.prompt_words = ints_of(prompt_lengths, "prompt-lengths", 1 << 20);
      if (s.api != "completions" && s.api != "chat") throw UsageError{"--api: '" + s.api + "' is not completions or chat"};
      require_range("turns", s.turns, 1, 1000);
      if (s.turns > 1 && s.api != "chat") throw UsageError{"--turns above 1 needs --api chat (a conversation's history is messages)"};
      if (session_ids != "on" && session_ids != "off") throw UsageError{"--session-ids: '" + session_ids + "' is not on or off"};
      s.session_ids = session_ids == "on";
      return -1;
    }
    if (server_only) throw UsageError{"--clients, --requests, --prompt-lengths, --shared-prefix, --api and --api-key need --server URL"};
    o.mode = vm.count("one-row") ? BenchOptions::Mode::kOneRow : BenchOptions::Mode::kMatrix;
    if (o.model_dir.empty()) throw UsageError{"--model DIR is required"};
    if (!backends.empty()) o.backends = items_of(backends, "backends");
    if (!gpu_layers.empty()) {
      o.gpu_layers = items_of(gpu_layers, "gpu-layers");
      for (const auto& g : o.gpu_layers)
        if (auto r = parse_gpu_layers(g); !r) throw UsageError{r.message()};
    }
    o.threads = ints_of(threads, "threads", 4096);
    if (!kv_codecs.empty()) o.kv_codecs = items_of(kv_codecs, "kv-codecs");
    for (const auto& kv : o.kv_codecs)
      if (auto r = KvCodecChoice::parse(kv); !r) throw UsageError{"--kv-codecs: '" + kv + "': " + r.message()};
    if (!expert_stores.empty()) {
      o.expert_stores.clear();
      for (const auto& item : items_of(expert_stores, "expert-stores")) {
        auto e = parse_expert_store(item);
        if (!e) throw UsageError{e.message()};
        o.expert_stores.push_back(*e);
      }
    }
    o.ctx = ints_of(ctx, "ctx", 1 << 22);
    require_range("gen", o.gen, 1, 1 << 20);
    require_range("reps", o.reps, 1, 1000);
    require_range("prefill-size", o.prefill_size, 1, 1 << 20);
    require_range("row-timeout", o.row_timeout_s, 0, 86400 * 7);
    if (o.mode == BenchOptions::Mode::kOneRow && o.rows().size() != 1) throw UsageError{"--one-row takes exactly one value per axis"};
  } catch (const po::error& e) {
    std::cerr << "sluice bench: " << e.what() << "\nusage: sluice bench " << kSynopsis << "\n(--help for all options)\n";
    return 2;
  } catch (const UsageError& e) {
    std::cerr << "sluice bench: " << e.message << "\nusage: sluice bench " << kSynopsis << "\n(--help for all options)\n";
    return 2;
  }
  return -1;
}

}  // namespace sluice::cli::bench
