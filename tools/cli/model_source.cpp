#include "model_source.h"

#include <cstdio>
#include <optional>

#include "download_bar.h"

namespace sluice::cli {

std::optional<hub::ResolvedModel> resolve_model_arg(const char* command, const std::string& model,
                                                    hub::DownloadProgress* progress) {
  hub::DownloadProgress own;
  hub::ResolveOptions options;
  options.progress = progress ? progress : &own;
  options.warn = [command](const std::string& w) { std::fprintf(stderr, "sluice %s: warning: %s\n", command, w.c_str()); };
  Result<hub::ResolvedModel> resolved = make_error("");
  {
    DownloadBar bar(*options.progress);
    resolved = hub::resolve_model(model, options);
  }
  if (!resolved) {
    std::fprintf(stderr, "sluice %s: %s\n", command, resolved.message().c_str());
    return std::nullopt;
  }
  return *resolved;
}

}  // namespace sluice::cli
