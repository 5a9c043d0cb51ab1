// sluice make-model: a random-weight model of a real shape, bf16 or quantized, written straight to disk.
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "model_options.h"
#include "plugin/plugin_registry.h"
#include "quant/random_model.h"

namespace sluice::cli {
namespace {

// The bundled tokenizer: models/tiny-code-qwen2 next to the build or the sources, or ../shared's copy.
std::filesystem::path default_tokenizer_dir() {
  std::vector<std::filesystem::path> candidates;
  for (const auto& d : PluginRegistry::default_dirs()) {
    candidates.push_back(d / "../../models/tiny-code-qwen2");
    candidates.push_back(d / "../../../shared/models/tiny-code-qwen2");
  }
  candidates.push_back("models/tiny-code-qwen2");
  candidates.push_back("../shared/models/tiny-code-qwen2");
  for (const auto& c : candidates) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(c / "tokenizer.json", ec)) return c.lexically_normal();
  }
  return "models/tiny-code-qwen2";
}

}  // namespace

int run_make_model(const Args& args) {
  quant::MakeModelOptions o;
  std::string out, tok;
  double shard_gb = 5.0;
  bool list = false;
  po::options_description desc("make-model options");
  desc.add_options()
      ("help", "this help")
      ("preset", po::value(&o.preset), "model shape (--list shows them)")
      ("out", po::value(&out), "output folder (created)")
      ("bits", po::value(&o.bits)->default_value(0), "0: bf16; else quantize to 2, 3, 4, 5, 6 or 8 bits as written")
      ("group-size", po::value(&o.group_size)->default_value(64), "quantization group: 32, 64 or 128")
      ("seed", po::value(&o.seed)->default_value(0), "random seed (same seed, same files)")
      ("tokenizer-from", po::value(&tok), "folder whose tokenizer.json/template to copy (default: the bundled tiny-code-qwen2)")
      ("shard-gb", po::value(&shard_gb)->default_value(5.0), "largest output file in GB")
      ("list", po::bool_switch(&list), "list the presets")
      ("quiet", po::bool_switch(&o.quiet), "no progress bar");
  po::variables_map vm;
  if (int rc = parse_or_exit("make-model", args, desc, vm, "--preset NAME [--bits B] --out DIR [--seed S]"); rc >= 0) return rc;
  if (list) {
    for (const auto& p : quant::model_presets()) std::cout << p.name << "\t" << p.description << "\n";
    return 0;
  }
  if (o.preset.empty() || out.empty()) {
    std::cerr << "sluice make-model: --preset and --out are required (--list shows the presets)\n";
    return 2;
  }
  o.output = out;
  o.tokenizer_from = tok.empty() ? default_tokenizer_dir() : std::filesystem::path(tok);
  o.max_shard_bytes = static_cast<uint64_t>(shard_gb * 1e9);
  auto r = quant::make_model(o);
  if (!r) {
    std::cerr << "\nsluice make-model: " << r.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace sluice::cli
