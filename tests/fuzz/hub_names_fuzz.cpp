// Fuzzes what the hub and the command line hand to the cache: hub ids (org/name@revision), file names
// from the hub's listing, ETags, and the URLs of redirects.
//   parse_hub_id: an id it accepts has one '/', no "--" or "..", and its cache folder, refs and
//   snapshot paths stay inside the cache root.
//   safe_repo_filename: a name it accepts stays inside the snapshot folder.
//   Url::parse / resolve: a URL it accepts is http(s) with a host, a numeric port and a target starting
//   with '/', and reads back the same from its own text.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>

#include "fuzz_support.h"
#include "hub/hub_cache.h"
#include "hub/hub_id.h"
#include "hub/model_files.h"
#include "hub/url.h"

namespace {

using namespace sluice::hub;

bool inside(const fs::path& root, const fs::path& p) {
  const fs::path n = p.lexically_normal();
  const auto rel = n.lexically_relative(root);
  return !rel.empty() && *rel.begin() != ".." && n != root;
}

void check_url(const Url& u) {
  FUZZ_CHECK(u.scheme == "http" || u.scheme == "https");
  FUZZ_CHECK(!u.host.empty());
  FUZZ_CHECK(!u.port.empty() && u.port.size() <= 5 && u.port.find_first_not_of("0123456789") == std::string::npos);
  FUZZ_CHECK(!u.target.empty() && u.target[0] == '/');
  auto again = Url::parse(u.text());
  FUZZ_CHECK(again, "its own text does not parse: %s", u.text().c_str());
  FUZZ_CHECK(again->scheme == u.scheme && again->host == u.host && again->port == u.port && again->target == u.target,
             "%s reads back differently", u.text().c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string a = in.ConsumeRandomLengthString(512);
  const std::string b = in.ConsumeRandomLengthString(512);

  if (auto id = parse_hub_id(a)) {
    FUZZ_CHECK(std::count(id->repo.begin(), id->repo.end(), '/') == 1);
    FUZZ_CHECK(id->repo.find("--") == std::string::npos && id->repo.find("..") == std::string::npos);
    const fs::path root = "/cache";
    const RepoCache cache(root, id->repo);
    FUZZ_CHECK(cache.folder().parent_path() == root && cache.folder().filename() == repo_folder_name(id->repo));
    FUZZ_CHECK(inside(cache.folder() / "refs", cache.folder() / "refs" / id->revision), "ref escapes: %s", a.c_str());
    FUZZ_CHECK(inside(cache.folder() / "snapshots", cache.snapshot(id->revision)), "snapshot escapes: %s", a.c_str());
  }
  if (safe_repo_filename(b)) FUZZ_CHECK(inside("/snap", fs::path("/snap") / b), "file escapes: %s", b.c_str());
  const std::string etag = normalize_etag(a);
  if (safe_etag(etag)) FUZZ_CHECK(inside("/blobs", fs::path("/blobs") / etag));
  for (const auto& f : select_model_files({a, b})) FUZZ_CHECK(model_needs_file(f) && f.find('/') == std::string::npos);

  if (auto url = Url::parse(a)) {
    check_url(*url);
    if (auto next = url->resolve(b)) check_url(*next);
  }
  return 0;
}
