#include "hub/hub_api.h"

#include <cstdlib>
#include <fstream>

#include "hub/hub_cache.h"
#include "util/json.h"

namespace sluice::hub {
namespace {

constexpr int kMaxRedirects = 10;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool env_true(const std::string& v) {
  std::string u;
  for (char c : v) u += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return u == "1" || u == "ON" || u == "YES" || u == "TRUE";
}

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

std::optional<std::uint64_t> to_u64(const std::string& s) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoull(s);
}

}  // namespace

std::string percent_encode(std::string_view text, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                            c == '.' || c == '_' || c == '~' || (keep_slash && c == '/');
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

HubSettings HubSettings::from_environment() {
  HubSettings s;
  if (auto e = env("HF_ENDPOINT"); !e.empty()) s.endpoint = e;
  while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();
  s.offline = env_true(env("HF_HUB_OFFLINE")) || env_true(env("TRANSFORMERS_OFFLINE"));
  if (auto t = trim(env("HF_TOKEN")); !t.empty()) {
    s.token = t;
    s.token_source = "HF_TOKEN";
  } else {
    const auto path = env("HF_TOKEN_PATH").empty() ? hf_home() / "token" : fs::path(env("HF_TOKEN_PATH"));
    std::ifstream in(path);
    std::string line;
    if (in && std::getline(in, line) && !trim(line).empty()) {
      s.token = trim(line);
      s.token_source = path.string();
    }
  }
  return s;
}

HubApi::HubApi(HubSettings settings, std::chrono::seconds step_timeout) : settings_(std::move(settings)), client_(step_timeout) {
  if (auto u = Url::parse(settings_.endpoint)) endpoint_ = *u;
}

std::vector<std::pair<std::string, std::string>> HubApi::headers_for(const Url& url) const {
  std::vector<std::pair<std::string, std::string>> h;
  // The token is for the hub; a CDN's signed URL needs none, and another host must never see it.
  if (!settings_.token.empty() && url.origin() == endpoint_.origin()) h.emplace_back("Authorization", "Bearer " + settings_.token);
  return h;
}

std::string HubApi::http_error(const HttpResponse& r, const std::string& repo, const std::string& what) const {
  const std::string code = r.header("X-Error-Code");
  std::string detail = r.header("X-Error-Message");
  if (detail.empty()) {
    if (auto doc = json::parse(r.body, "the hub's error answer"); doc && doc->IsObject())
      detail = json::string(*doc, "error").value_or("");
  }
  const std::string status = "HTTP " + std::to_string(r.status);
  const std::string token_hint =
      settings_.token.empty()
          ? "no token is set: put one in HF_TOKEN (or log in with `hf auth login`), from an account that was granted access"
          : "the token from " + settings_.token_source + " was not accepted for it";
  if (code == "GatedRepo" || ((r.status == 401 || r.status == 403) && detail.find("gated") != std::string::npos))
    return repo + " is a gated model (" + status + "): accept its conditions at " + repo_url(repo) + ", then " +
           (settings_.token.empty() ? "set HF_TOKEN to a token of that account (or log in with `hf auth login`)"
                                    : "make sure the token from " + settings_.token_source + " belongs to that account");
  if (code == "RevisionNotFound") return repo + ": revision not found (" + status + ") for " + what;
  if (code == "EntryNotFound") return repo + ": " + what + " not found (" + status + ")";
  if (r.status == 401 || code == "RepoNotFound")
    return repo + ": repository not found, or private or gated (" + status + "): " + token_hint;
  if (r.status == 403) return repo + ": access denied (" + status + (detail.empty() ? "" : ": " + detail) + "): " + token_hint;
  if (r.status == 404) return repo + ": " + what + " not found (" + status + ")";
  return repo + ": " + what + ": " + status + (detail.empty() ? "" : " (" + detail + ")");
}

Result<RepoInfo> HubApi::repo_info(const HubId& id) const {
  auto url = Url::parse(settings_.endpoint + "/api/models/" + id.repo + "/revision/" + percent_encode(id.revision, false));
  if (!url) return make_error("HF_ENDPOINT: " + url.message());
  HttpResponse r;
  for (int hop = 0;; ++hop) {
    auto answer = client_.send({"GET", *url, headers_for(*url)});
    if (!answer) return make_error("cannot reach the hub for " + id.repo + ": " + answer.message());
    r = std::move(*answer);
    if (!r.is_redirect()) break;
    if (hop == kMaxRedirects) return make_error(id.repo + ": too many redirects");
    auto next = url->resolve(r.header("Location"));
    if (!next) return make_error(id.repo + ": bad redirect: " + next.message());
    url = std::move(next);
  }
  if (r.status != 200) return make_error(http_error(r, id.repo, "revision " + id.revision));
  auto doc = json::parse(r.body, "the hub's model info for " + id.repo);
  if (!doc) return doc.error();
  RepoInfo info;
  info.commit = json::string(*doc, "sha").value_or("");
  if (!is_commit_hash(info.commit)) return make_error(id.repo + ": the hub's model info has no commit (sha)");
  const auto* siblings = json::member(*doc, "siblings");
  if (!siblings || !siblings->IsArray()) return make_error(id.repo + ": the hub's model info has no file list (siblings)");
  for (const auto& s : siblings->GetArray()) {
    if (!s.IsObject()) continue;
    if (auto name = json::string(s, "rfilename"); name && safe_repo_filename(*name)) info.files.push_back(*name);
  }
  return info;
}

Result<std::vector<ModelSummary>> parse_model_search(std::string_view body, std::size_t limit) {
  json::JsonLimits limits;
  limits.max_bytes = 8u << 20;
  limits.max_depth = 32;
  auto doc = json::parse(body, "the hub's search answer", limits);
  if (!doc) return doc.error();
  if (!doc->IsArray()) return make_error("the hub's search answer is not a list of models");
  std::vector<ModelSummary> out;
  for (const auto& m : doc->GetArray()) {
    if (out.size() >= limit) break;
    if (!m.IsObject()) continue;
    ModelSummary s;
    s.id = json::string(m, "id").value_or(json::string(m, "modelId").value_or(""));
    if (auto id = parse_hub_id(s.id); !id || id->revision_given) continue;
    s.downloads = json::integer(m, "downloads").value_or(-1);
    s.likes = json::integer(m, "likes").value_or(-1);
    s.pipeline_tag = json::string(m, "pipeline_tag").value_or("");
    s.library_name = json::string(m, "library_name").value_or("");
    if (const auto* gated = json::member(m, "gated"))  // false, or the kind of gate ("auto", "manual")
      s.gated = gated->IsString() || (gated->IsBool() && gated->GetBool());
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<ModelSummary>> HubApi::search_models(const std::string& query, int limit) const {
  if (settings_.offline) return make_error("HF_HUB_OFFLINE is set: the hub is not searched");
  auto url = Url::parse(settings_.endpoint + "/api/models?search=" + percent_encode(query, false) +
                        "&limit=" + std::to_string(limit) + "&sort=downloads&direction=-1");
  if (!url) return make_error("HF_ENDPOINT: " + url.message());
  auto answer = client_.send({"GET", *url, headers_for(*url)}, nullptr, 8u << 20);
  if (!answer) return make_error("cannot reach the hub: " + answer.message());
  if (answer->status != 200) return make_error(http_error(*answer, "search", "\"" + query + "\""));
  return parse_model_search(answer->body, static_cast<std::size_t>(limit));
}

Result<FileMetadata> HubApi::file_metadata(const std::string& repo, const std::string& commit, const std::string& filename) const {
  auto url = Url::parse(settings_.endpoint + "/" + repo + "/resolve/" + commit + "/" + percent_encode(filename, true));
  if (!url) return make_error("HF_ENDPOINT: " + url.message());
  HttpResponse r;
  for (int hop = 0;; ++hop) {
    auto headers = headers_for(*url);
    headers.emplace_back("Accept-Encoding", "identity");  // the size of the file, not of a compressed answer
    auto answer = client_.send({"HEAD", *url, headers});
    if (!answer) return make_error(filename + ": " + answer.message());
    r = std::move(*answer);
    if (!r.is_redirect()) break;
    const std::string location = r.header("Location");
    if (location.find("://") != std::string::npos || location.starts_with("//")) break;  // absolute: the CDN
    if (hop == kMaxRedirects) return make_error(filename + ": too many redirects");
    auto next = url->resolve(location);
    if (!next) return make_error(filename + ": bad redirect: " + next.message());
    url = std::move(next);
  }
  if (r.status != 200 && !r.is_redirect()) return make_error(http_error(r, repo, filename));
  FileMetadata m;
  m.commit = r.header("X-Repo-Commit");
  m.etag = normalize_etag(r.header("X-Linked-Etag").empty() ? r.header("ETag") : r.header("X-Linked-Etag"));
  if (m.etag.empty()) return make_error(filename + ": the hub sent no ETag; is HF_ENDPOINT a Hugging Face hub?");
  if (!safe_etag(m.etag)) return make_error(filename + ": unexpected ETag '" + m.etag + "'");
  auto size = to_u64(r.header("X-Linked-Size"));
  if (!size && !r.is_redirect()) size = to_u64(r.header("Content-Length"));
  if (size) m.size = *size, m.size_known = true;
  if (r.is_redirect()) {
    auto location = url->resolve(r.header("Location"));
    if (!location) return make_error(filename + ": bad redirect: " + location.message());
    m.location = *location;
  } else {
    m.location = *url;
  }
  return m;
}

Result<int> HubApi::fetch(const Url& location, std::uint64_t offset, const BodyReceiver& receiver) const {
  Url url = location;
  for (int hop = 0;; ++hop) {
    auto headers = headers_for(url);
    if (offset > 0) headers.emplace_back("Range", "bytes=" + std::to_string(offset) + "-");
    auto answer = client_.send({"GET", url, headers}, &receiver);
    if (!answer) return answer.error();
    if (answer->is_redirect()) {
      if (hop == kMaxRedirects) return make_error("too many redirects");
      auto next = url.resolve(answer->header("Location"));
      if (!next) return make_error("bad redirect: " + next.message());
      url = std::move(*next);
      continue;
    }
    return answer->status;
  }
}

}  // namespace sluice::hub
