#pragma once
// The hub's HTTP protocol, as huggingface_hub speaks it:
//   GET  {endpoint}/api/models/{repo}/revision/{rev}   the commit (sha) and the file list (siblings)
//   HEAD {endpoint}/{repo}/resolve/{commit}/{file}     X-Repo-Commit, X-Linked-Etag or ETag, X-Linked-Size
//                                                      or Content-Length; relative redirects (a renamed
//                                                      repo) are followed, an absolute one (the CDN) is
//                                                      where the bytes are
//   GET  <that location> with Range                    the bytes, redirects followed
// `Authorization: Bearer <token>` goes to the endpoint only, never to another host.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "hub/http_client.h"
#include "hub/hub_id.h"
#include "util/result.h"

namespace sluice::hub {

struct HubSettings {
  std::string endpoint = "https://huggingface.co";  // $HF_ENDPOINT, without a trailing '/'
  std::string token;                                // $HF_TOKEN, else the token file
  std::string token_source;                         // where the token came from (for messages)
  bool offline = false;                             // $HF_HUB_OFFLINE (or $TRANSFORMERS_OFFLINE) true

  // huggingface_hub's variables: HF_ENDPOINT, HF_TOKEN, HF_TOKEN_PATH (else $HF_HOME/token),
  // HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE (1, ON, YES, TRUE in any case).
  static HubSettings from_environment();
};

struct RepoInfo {
  std::string commit;               // the 40-hex commit the revision points at
  std::vector<std::string> files;   // every file of the repo at that commit
};

struct FileMetadata {
  std::string etag;         // normalized (no W/, no quotes): the blob's name
  std::string commit;       // X-Repo-Commit
  std::uint64_t size = 0;
  bool size_known = false;
  Url location;             // where GET fetches the bytes (the CDN for large files)
};

// One model as the hub's search (GET /api/models?search=) lists it.
struct ModelSummary {
  std::string id;                 // org/name
  std::int64_t downloads = -1;    // -1: not reported
  std::int64_t likes = -1;
  std::string pipeline_tag;       // "text-generation", ...
  std::string library_name;       // "transformers", "mlx", ...
  bool gated = false;             // "auto"/"manual" on the hub: a token of an account granted access is needed
};

// The hub's search answer (a JSON array of model objects) as summaries; entries without a valid id are
// dropped, at most `limit` kept.
Result<std::vector<ModelSummary>> parse_model_search(std::string_view body, std::size_t limit);

class HubApi {
 public:
  explicit HubApi(HubSettings settings, std::chrono::seconds step_timeout = std::chrono::seconds(30));

  Result<RepoInfo> repo_info(const HubId& id) const;
  Result<FileMetadata> file_metadata(const std::string& repo, const std::string& commit, const std::string& filename) const;
  // GET location from byte offset on (a Range request when offset > 0), redirects followed; the
  // receiver sees the final answer's head (200: from the start, a server may ignore Range; 206: from
  // offset) and its bytes. The final status is returned (the receiver saw the body only for 2xx); an
  // error is a transfer that broke (connection, timeout) or the receiver's own error.
  Result<int> fetch(const Url& location, std::uint64_t offset, const BodyReceiver& receiver) const;

  // GET {endpoint}/api/models?search=<query>&limit=<limit>&sort=downloads: the most downloaded first.
  Result<std::vector<ModelSummary>> search_models(const std::string& query, int limit) const;

  const HubSettings& settings() const { return settings_; }
  std::string repo_url(const std::string& repo) const { return settings_.endpoint + "/" + repo; }

 private:
  std::vector<std::pair<std::string, std::string>> headers_for(const Url& url) const;
  std::string http_error(const HttpResponse& response, const std::string& repo, const std::string& what) const;

  HubSettings settings_;
  HttpClient client_;
  Url endpoint_;
};

std::string percent_encode(std::string_view text, bool keep_slash);

}  // namespace sluice::hub
