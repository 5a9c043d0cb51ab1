#pragma once
// --model as every command takes it: a folder, or a Hugging Face Hub id (org/name[@revision])
// found in the cache or downloaded into it with a progress bar (hub/model_resolver.h).
#include <optional>
#include <string>

#include "hub/download_progress.h"
#include "hub/model_resolver.h"

namespace sluice::cli {

// Resolves `model` for `sluice <command>`; on failure prints "sluice <command>: <why>" and returns
// nullopt. progress (optional) is also where the download's state is published (the server's /health).
std::optional<hub::ResolvedModel> resolve_model_arg(const char* command, const std::string& model,
                                                    hub::DownloadProgress* progress = nullptr);

}  // namespace sluice::cli
