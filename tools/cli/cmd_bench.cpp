// sluice bench: hardware comparison runs. A matrix of backends, layer splits, thread counts, KV
// codecs, expert stores and context lengths measured row by row (tools/cli/bench/); --compare of two
// result files; --server, a load generator for a running server.
#include "bench/bench_compare.h"
#include "bench/bench_options.h"
#include "bench/matrix_runner.h"
#include "bench/server_load.h"
#include "commands.h"
#include "model_source.h"

namespace sluice::cli {

int run_bench(const Args& args) {
  bench::BenchOptions options;
  if (int status = bench::parse_bench_options(args, options); status >= 0) return status;
  if (options.mode == bench::BenchOptions::Mode::kMatrix) {  // rows run in child processes with the folder
    auto model = resolve_model_arg("bench", options.model_dir);
    if (!model) return 1;
    options.model_dir = model->dir;
  }
  switch (options.mode) {
    case bench::BenchOptions::Mode::kCompare: return bench::run_compare(options.compare[0], options.compare[1]);
    case bench::BenchOptions::Mode::kServer: return bench::run_server_load(options);
    case bench::BenchOptions::Mode::kOneRow: return bench::run_one_row(options);
    case bench::BenchOptions::Mode::kMatrix: break;
  }
  return bench::run_matrix(options);
}

}  // namespace sluice::cli
