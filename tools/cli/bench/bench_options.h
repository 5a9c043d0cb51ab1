#pragma once
// `sluice bench` options: the matrix's axes, the outputs, and the other modes (--compare, --server).
// Parsed once with Boost.Program_options; a bad value is a usage error naming the option.
#include <string>
#include <vector>

#include "bench_lists.h"
#include "row_measure.h"

namespace sluice::cli::bench {

struct ServerLoadOptions {
  std::string url;                       // http://host:port
  int clients = 4;                       // concurrent streaming clients
  int requests = 16;                     // requests in all
  int gen = 32;                          // max_tokens of each
  std::vector<int> prompt_words = {16, 128, 512};  // lengths of the unique part, cycled
  int shared_prefix_words = 1024;        // the long prefix every other request starts with (0 = none)
  std::string api = "completions";      // completions | chat
  std::string api_key;
  double timeout_s = 300;                // per request
  // Conversations: each request becomes a chat of `turns` turns (its answers and a new message added
  // each turn), its turns sent with X-Session-Id (unless session_ids is false) — what keeps a
  // conversation on one replica behind a balancer (docs/DEPLOY.md).
  int turns = 1;
  bool session_ids = true;
};

struct BenchOptions {
  enum class Mode { kMatrix, kOneRow, kCompare, kServer } mode = Mode::kMatrix;
  // The matrix.
  std::string model_dir, plugin_dir;
  std::string backend_options;  // every row's backend gets these (--backend-options)
  std::vector<std::string> backends = {"cpu"};
  std::vector<std::string> gpu_layers = {"all"};
  std::vector<int> threads = {0};
  std::vector<std::string> kv_codecs = {"f16"};
  std::vector<ExpertStoreItem> expert_stores = {ExpertStoreItem{"resident", "resident", 0, 0}};
  std::vector<int> ctx = {128, 512};
  int gen = 32, reps = 1, prefill_size = 512;
  double row_timeout_s = 0;  // 0 = none
  // Outputs and other modes.
  std::string json_out;
  std::vector<std::string> compare;  // two files
  ServerLoadOptions server;

  // Every combination, in the order backend, gpu-layers, threads, KV codec, expert store, ctx.
  std::vector<RowSpec> rows() const;
  // The arguments of `sluice bench --one-row ...` that measure exactly this row.
  std::vector<std::string> one_row_args(const RowSpec& row) const;
};

// Returns -1 with `out` filled, or an exit status (0 after --help, 2 on a usage error, printed).
int parse_bench_options(const std::vector<std::string>& args, BenchOptions& out);

}  // namespace sluice::cli::bench
