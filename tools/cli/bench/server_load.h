#pragma once
// `sluice bench --server URL`: N concurrent streaming clients (Boost.Beast, keep-alive) sending a mix
// of prompt lengths, every other one starting with the same long prefix; aggregate tokens/s, TTFT
// p50/p99 (all, with the shared prefix, without), prompt-cache reuse and errors. Replaces the
// prompt-cache regression check of SwiftLM's scripts with a measured one.
#include "bench_options.h"

namespace sluice::cli::bench {

// 0 when every request succeeded, 1 when any failed or the server could not be reached.
int run_server_load(const BenchOptions& options);

}  // namespace sluice::cli::bench
