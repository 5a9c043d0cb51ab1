#pragma once
// Running one row in a child process (`sluice bench --one-row ...`, the same program) so that each
// row's peak RSS is its own and a row that crashes or hangs cannot take the matrix down with it.
#include <string>
#include <vector>

#include "util/result.h"

namespace sluice::cli::bench {

// Runs the program at /proc/self/exe with `args`, stderr passed through, and returns what it wrote
// on stdout — also when it exited 1 after writing {"error": ...} there, which the caller reads. An
// error when it cannot start, dies of a signal, exits non-zero with nothing written, or runs past
// timeout_s (> 0), in which case it is killed.
Result<std::string> run_child(const std::vector<std::string>& args, double timeout_s);

}  // namespace sluice::cli::bench
