#pragma once
// The matrix mode of `sluice bench`: every row in its own process, progress on stderr, the markdown
// table on stdout, the result file with --json-out. And the hidden --one-row mode those processes run.
#include "bench_options.h"

namespace sluice::cli::bench {

// 0 when every row was measured, 1 when a row failed (the others are still reported).
int run_matrix(const BenchOptions& options);

// Measures options' single row here and writes {"model": {...}, "row": {...}} (or {"error": "..."},
// exit 1) as one line on stdout.
int run_one_row(const BenchOptions& options);

}  // namespace sluice::cli::bench
