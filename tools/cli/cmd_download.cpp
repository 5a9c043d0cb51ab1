// `sluice download org/name[@revision]`: a hub model into the Hugging Face cache (only the files a
// model needs), so that `--model org/name` later starts without the network. Prints the snapshot folder.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "download_bar.h"
#include "hub/model_resolver.h"
#include "model_options.h"

namespace sluice::cli {

int run_download(const Args& args) {
  std::string model;
  int parallel = 4;
  po::options_description desc("download options");
  desc.add_options()
      ("help", "this help")
      ("model", po::value(&model)->required(), "org/name[@revision] (a branch, tag or commit; default main)")
      ("parallel", po::value(&parallel)->default_value(parallel), "files downloaded at once (1-16)");
  po::positional_options_description positional;
  positional.add("model", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).positional(positional).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: sluice download org/name[@revision] [--parallel N]\n\n"
                << "Downloads into $HF_HUB_CACHE (else $HF_HOME/hub, else ~/.cache/huggingface/hub) from $HF_ENDPOINT\n"
                << "(default https://huggingface.co), with $HF_TOKEN (or huggingface_hub's token file) for gated repos.\n\n"
                << desc << "\n";
      return 0;
    }
    po::notify(vm);
    if (parallel < 1 || parallel > 16) throw po::error("--parallel must be 1 to 16");
  } catch (const po::error& e) {
    std::cerr << "sluice download: " << e.what() << "\nusage: sluice download org/name[@revision] [--parallel N]\n";
    return 2;
  }
  auto id = hub::parse_hub_id(model);
  if (!id) {
    std::cerr << "sluice download: " << id.message() << "\n";
    return 2;
  }
  hub::DownloadProgress progress;
  hub::ResolveOptions options;
  options.parallel = parallel;
  options.progress = &progress;
  options.warn = [](const std::string& w) { std::fprintf(stderr, "sluice download: warning: %s\n", w.c_str()); };
  Result<hub::ResolvedModel> resolved = make_error("");
  {
    DownloadBar bar(progress);
    resolved = hub::fetch_hub_model(*id, options);
  }
  if (!resolved) {
    std::cerr << "sluice download: " << resolved.message() << "\n";
    return 1;
  }
  std::printf("%s\n", resolved->dir.c_str());
  return 0;
}

}  // namespace sluice::cli
