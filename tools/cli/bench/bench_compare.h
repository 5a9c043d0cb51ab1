#pragma once
// `sluice bench --compare A.json B.json`: rows matched by backend, gpu layers, threads, KV codec,
// expert store and ctx; B's figures against A's as ratios (B / A: above 1 is faster for throughput,
// slower for TTFT and memory), rows found in only one file listed as such.
#include <string>

namespace sluice::cli::bench {

// 0, or 1 when a file cannot be read or is not a result file.
int run_compare(const std::string& a_path, const std::string& b_path);

}  // namespace sluice::cli::bench
