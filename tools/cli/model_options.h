#pragma once
// The model/runtime options shared by generate, perplexity and the other model-driving commands,
// with the same names as the server's (--model, --backend, --kv-codec, --threads, ...).
#include <string>

#include <boost/program_options.hpp>

#include "engine/engine.h"

namespace sluice::cli {

namespace po = boost::program_options;

void add_model_options(po::options_description& desc, EngineOptions& options);
// Parses args against desc; prints usage/errors. Returns -1 to continue, else an exit status.
int parse_or_exit(const char* command, const std::vector<std::string>& args, const po::options_description& desc,
                  po::variables_map& vm, const char* synopsis);

}  // namespace sluice::cli
