// `sluice`: one program, many subcommands (serve, generate, perplexity, tokenize, ...).
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(const sluice::cli::Args&);
  const char* summary;
};

const Command kCommands[] = {
    {"serve", sluice::cli::run_serve, "serve a model over an OpenAI-compatible HTTP API"},
    {"download", sluice::cli::run_download, "fetch a model from the Hugging Face Hub into its cache (org/name[@revision])"},
    {"generate", sluice::cli::run_generate, "generate text from a prompt"},
    {"perplexity", sluice::cli::run_perplexity, "measure perplexity over a token file or text"},
    {"tokenize", sluice::cli::run_tokenize, "text on stdin -> token ids"},
    {"detokenize", sluice::cli::run_detokenize, "JSON array of ids on stdin -> text"},
    {"chat-template", sluice::cli::run_chat_template, "render a chat template from JSON variables on stdin"},
    {"plugins", sluice::cli::run_plugins, "list the plugins found and whether they loaded"},
    {"repack-experts", sluice::cli::run_repack_experts, "store each MoE expert contiguously (one read per expert)"},
    {"quantize", sluice::cli::run_quantize, "quantize a model folder to MLX affine 2-8 bits"},
    {"make-model", sluice::cli::run_make_model, "write a random-weight model of a real shape"},
    {"info", sluice::cli::run_info, "architecture, parameters, bits per weight, KV bytes per token"},
    {"devices", sluice::cli::run_devices, "list compute devices of every backend plugin"},
    {"conformance", sluice::cli::run_conformance, "check a backend plugin's ops against reference math"},
    {"bench", sluice::cli::run_bench, "benchmark matrix (backends, KV codecs, expert stores, contexts), --compare, --server load"},
};

void print_usage() {
  std::fprintf(stderr, "usage: sluice <command> [options]\n       sluice --model DIR|org/name [serve options]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(stderr, "  %-14s %s\n", c.name, c.summary);
  std::fprintf(stderr, "\n`sluice <command> --help` describes a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) {
      print_usage();
      return 2;
    }
    std::string first = argv[1];
    if (first == "--help" || first == "-h" || first == "help") {
      print_usage();
      return 0;
    }
    // SwiftLM is started as `SwiftLM --model ...`: a leading option means `serve`.
    if (first.rfind("--", 0) == 0) return sluice::cli::run_serve({argv + 1, argv + argc});
    for (const auto& c : kCommands) {
      if (first == c.name) return c.run({argv + 2, argv + argc});
    }
    std::fprintf(stderr, "sluice: unknown command '%s'\n", first.c_str());
    print_usage();
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: %s\n", e.what());
    return 1;
  }
}
