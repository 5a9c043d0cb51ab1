#pragma once
// What a --model value names, made into a folder the engine loads:
//  - an existing folder is used as it is (a cache snapshot folder, .../models--org--name/snapshots/<commit>,
//    is named org/name rather than after its commit);
//  - `org/name[@revision]` is looked up in the Hugging Face cache and what the model lacks is
//    downloaded from the hub into it (only the files a model needs, several at once). With
//    HF_HUB_OFFLINE the network is never touched: the cache has the model or it is an error.
#include <atomic>
#include <functional>
#include <string>

#include "hub/download_progress.h"
#include "hub/hub_api.h"
#include "hub/hub_id.h"

namespace sluice::hub {

struct ResolvedModel {
  std::string dir;       // the folder to load
  std::string name;      // the model's id: org/name for a hub model, else the folder's name
  bool from_hub = false;
  std::string commit;    // the snapshot's commit (hub models)
};

struct ResolveOptions {
  HubSettings settings = HubSettings::from_environment();
  int parallel = 4;                                     // files downloaded at once
  DownloadProgress* progress = nullptr;                 // optional observer
  std::function<void(const std::string&)> warn;         // e.g. "hub unreachable, using the cached snapshot"
  std::chrono::seconds step_timeout{30};
  // Set from another thread, ends a download between and inside transfers (partial blobs stay for a
  // resume); the result is then an error. Optional.
  std::atomic<bool>* cancel = nullptr;
};

Result<ResolvedModel> resolve_model(const std::string& model, const ResolveOptions& options);
// A hub model into the cache (what `sluice download` does); the snapshot folder.
Result<ResolvedModel> fetch_hub_model(const HubId& id, const ResolveOptions& options);

// org/name when dir is a snapshot folder of the cache layout, else the folder's own name.
std::string model_name_of_folder(const std::string& dir);

}  // namespace sluice::hub
