// sluice repack-experts: rewrite a MoE model so each expert is one contiguous byte range.
#include <iostream>

#include "commands.h"
#include "quant/expert_repack.h"

namespace sluice::cli {

int run_repack_experts(const Args& args) {
  std::string in, out;
  bool quiet = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--model" && i + 1 < args.size()) in = args[++i];
    else if (args[i] == "--out" && i + 1 < args.size()) out = args[++i];
    else if (args[i] == "--quiet") quiet = true;
    else if (args[i] == "--help") {
      std::cout << "usage: sluice repack-experts --model IN --out OUT [--quiet]\n"
                   "Writes OUT with every MoE expert's gate/up/down tensors back to back, so a streaming expert store\n"
                   "reads an expert in one request.\n";
      return 0;
    } else {
      std::cerr << "sluice repack-experts: unexpected argument '" << args[i] << "'\nusage: sluice repack-experts --model IN --out OUT\n";
      return 2;
    }
  }
  if (in.empty() || out.empty()) {
    std::cerr << "usage: sluice repack-experts --model IN --out OUT [--quiet]\n";
    return 2;
  }
  auto stats = quant::repack_experts(in, out, quiet);
  if (!stats) {
    std::cerr << "sluice repack-experts: " << stats.message() << "\n";
    return 1;
  }
  std::cout << "repacked " << stats->experts << " experts (" << stats->bytes << " bytes) into " << out << "\n";
  return 0;
}

}  // namespace sluice::cli
