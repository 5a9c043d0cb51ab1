#pragma once
// The `sluice` program's subcommands. Each lives in its own cmd_<name>.cpp and receives the
// arguments after the subcommand name; it returns the process exit status (0 success, 1 runtime
// failure, 2 usage error) and never throws.
#include <string>
#include <vector>

namespace sluice::cli {

using Args = std::vector<std::string>;

int run_serve(const Args& args);          // cmd_serve.cpp (also plain `sluice --model ...`)
int run_generate(const Args& args);       // cmd_generate.cpp
int run_perplexity(const Args& args);     // cmd_perplexity.cpp
int run_tokenize(const Args& args);       // cmd_tokenize.cpp
int run_detokenize(const Args& args);     // cmd_tokenize.cpp
int run_chat_template(const Args& args);  // cmd_chat_template.cpp
int run_plugins(const Args& args);        // cmd_plugins.cpp
int run_quantize(const Args& args);       // cmd_quantize.cpp
int run_make_model(const Args& args);     // cmd_make_model.cpp
int run_info(const Args& args);           // cmd_info.cpp
int run_devices(const Args& args);        // cmd_devices.cpp
int run_conformance(const Args& args);    // cmd_conformance.cpp
int run_repack_experts(const Args& args); // cmd_repack_experts.cpp
int run_download(const Args& args);       // cmd_download.cpp
int run_bench(const Args& args);          // cmd_bench.cpp (pieces in bench/)

}  // namespace sluice::cli
