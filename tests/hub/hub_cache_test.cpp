// The Hugging Face cache layout and the hub ids that name it: what huggingface_hub writes, read and
// written the same way here (hub/hub_cache.h, hub/hub_id.h, hub/model_files.h, hub/model_resolver.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "hub/blob_download.h"
#include "hub/hub_api.h"
#include "hub/hub_cache.h"
#include "hub/hub_id.h"
#include "hub/model_files.h"
#include "hub/model_resolver.h"

namespace sluice::hub {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/sluice-hub-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Sets an environment variable for one test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

const std::string kCommit = "4147a09fefe65c40379d7c0d92f5045da3f3b9db";

TEST(HubId, ParsesOrgNameAndRevision) {
  auto plain = parse_hub_id("Qwen/Qwen2.5-0.5B-Instruct");
  ASSERT_TRUE(plain) << plain.message();
  EXPECT_EQ(plain->repo, "Qwen/Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(plain->revision, "main");
  EXPECT_FALSE(plain->revision_given);
  auto pinned = parse_hub_id("mlx-community/Qwen2.5-3B-Instruct-4bit@" + kCommit);
  ASSERT_TRUE(pinned);
  EXPECT_EQ(pinned->revision, kCommit);
  EXPECT_TRUE(is_commit_hash(pinned->revision));
  auto pr = parse_hub_id("org/name@refs/pr/12");
  ASSERT_TRUE(pr);
  EXPECT_EQ(pr->revision, "refs/pr/12");
  EXPECT_EQ(pr->text(), "org/name@refs/pr/12");
}

TEST(HubId, RefusesWhatTheHubRefusesAndWhatCouldLeaveTheCache) {
  for (const char* bad : {"name-only", "a/b/c", "org/", "/name", "-org/name", "org/name.", "org--x/name", "org/na..me",
                          "org/name.git", "org/na me", "org/name@", "org/name@../../etc", "org/name@/abs", "org/name@a//b",
                          "org/name@.hidden"})
    EXPECT_FALSE(parse_hub_id(bad)) << bad;
  EXPECT_FALSE(parse_hub_id("org/" + std::string(97, 'x')));
  EXPECT_TRUE(parse_hub_id("org/" + std::string(96, 'x')));
}

TEST(HubId, AnExistingFolderIsAFolderNotAHubId) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "org" / "name");
  EXPECT_FALSE(names_hub_model((tmp.path() / "org" / "name").string()));
  EXPECT_TRUE(names_hub_model("org/name"));
  EXPECT_TRUE(names_hub_model("org/name@v1"));
  EXPECT_FALSE(names_hub_model("./org/name"));
  EXPECT_FALSE(names_hub_model("~/models/x"));
  EXPECT_FALSE(names_hub_model("just-a-name"));
}

TEST(HubCache, RootFollowsHuggingFaceHubVariablesInOrder) {
  ScopedEnv home("HOME", "/home/u"), xdg("XDG_CACHE_HOME", nullptr), hf_home("HF_HOME", nullptr),
      legacy("HUGGINGFACE_HUB_CACHE", nullptr), cache("HF_HUB_CACHE", nullptr);
  EXPECT_EQ(hub_cache_root(), fs::path("/home/u/.cache/huggingface/hub"));
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(hub_cache_root(), fs::path("/xdg/huggingface/hub"));
  ::setenv("HF_HOME", "~/hf", 1);
  EXPECT_EQ(hub_cache_root(), fs::path("/home/u/hf/hub"));
  ::setenv("HUGGINGFACE_HUB_CACHE", "/legacy", 1);
  EXPECT_EQ(hub_cache_root(), fs::path("/legacy"));
  ::setenv("HF_HUB_CACHE", "/new", 1);
  EXPECT_EQ(hub_cache_root(), fs::path("/new"));
}

TEST(HubCache, RepoFolderNameAsHuggingFaceHubWritesIt) {
  EXPECT_EQ(repo_folder_name("julien-c/EsperBERTo-small"), "models--julien-c--EsperBERTo-small");
  RepoCache cache("/c", "org/name");
  EXPECT_EQ(cache.folder(), fs::path("/c/models--org--name"));
  EXPECT_EQ(cache.blob("abc"), fs::path("/c/models--org--name/blobs/abc"));
  EXPECT_EQ(cache.incomplete_blob("abc"), fs::path("/c/models--org--name/blobs/abc.incomplete"));
  EXPECT_EQ(cache.snapshot(kCommit), fs::path("/c/models--org--name/snapshots/" + kCommit));
}

TEST(HubCache, RefsMapRevisionsToCommitsAndAreWrittenWithoutNewline) {
  TempDir tmp;
  RepoCache cache(tmp.path(), "org/name");
  EXPECT_FALSE(cache.commit_for("main"));
  EXPECT_EQ(cache.commit_for(kCommit), kCommit);  // a commit names itself, no ref needed
  ASSERT_TRUE(cache.write_ref("main", kCommit));
  ASSERT_TRUE(cache.write_ref("refs/pr/1", kCommit));
  EXPECT_EQ(cache.commit_for("main"), kCommit);
  EXPECT_EQ(cache.commit_for("refs/pr/1"), kCommit);
  std::ifstream in(cache.folder() / "refs" / "main", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, kCommit);
  ASSERT_TRUE(cache.write_ref(kCommit, kCommit));
  EXPECT_FALSE(fs::exists(cache.folder() / "refs" / kCommit));
  write(cache.folder() / "refs" / "broken", "not a hash");
  EXPECT_FALSE(cache.commit_for("broken"));
}

TEST(HubCache, SnapshotFilesAreRelativeLinksIntoBlobs) {
  TempDir tmp;
  RepoCache cache(tmp.path(), "org/name");
  write(cache.blob("aa11"), "{}");
  ASSERT_TRUE(cache.link_snapshot_file(kCommit, "config.json", "aa11"));
  ASSERT_TRUE(cache.link_snapshot_file(kCommit, "sub/dir/file.json", "aa11"));
  EXPECT_EQ(fs::read_symlink(cache.snapshot(kCommit) / "config.json"), fs::path("../../blobs/aa11"));
  EXPECT_EQ(fs::read_symlink(cache.snapshot(kCommit) / "sub/dir/file.json"), fs::path("../../../../blobs/aa11"));
  EXPECT_TRUE(cache.has_file(kCommit, "config.json"));
  EXPECT_TRUE(cache.has_file(kCommit, "sub/dir/file.json"));
  ASSERT_TRUE(cache.link_snapshot_file(kCommit, "missing.json", "bb22"));  // dangling: not a file
  EXPECT_FALSE(cache.has_file(kCommit, "missing.json"));
  // A moved cache keeps working: the links are relative.
  const fs::path moved = tmp.path().parent_path() / (tmp.path().filename().string() + "-moved");
  fs::rename(tmp.path(), moved);
  EXPECT_TRUE(RepoCache(moved, "org/name").has_file(kCommit, "config.json"));
  fs::rename(moved, tmp.path());
}

TEST(HubCache, FileNamesAndEtagsFromTheHubCannotEscape) {
  EXPECT_TRUE(safe_repo_filename("config.json"));
  EXPECT_TRUE(safe_repo_filename("onnx/model.onnx"));
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a\\b"}) EXPECT_FALSE(safe_repo_filename(bad)) << bad;
  EXPECT_TRUE(safe_etag("67737db604c0103a64b56d66f22ffabc8fe630b1afd5fec73e5156c615b4460a"));
  EXPECT_FALSE(safe_etag("../blob"));
  EXPECT_FALSE(safe_etag(""));
  EXPECT_EQ(normalize_etag("W/\"abc\""), "abc");
  EXPECT_EQ(normalize_etag("\"abc\""), "abc");
}

TEST(HubCache, SnapshotMissingNamesWhatALoadNeeds) {
  TempDir tmp;
  const fs::path dir = tmp.path();
  EXPECT_EQ(snapshot_missing(dir), "config.json");
  write(dir / "config.json", "{}");
  EXPECT_EQ(snapshot_missing(dir), "tokenizer.json");
  write(dir / "tokenizer.json", "{}");
  EXPECT_EQ(snapshot_missing(dir), "*.safetensors");
  write(dir / "model.safetensors.index.json", R"({"weight_map":{"a":"model-1.safetensors","b":"model-2.safetensors"}})");
  write(dir / "model-1.safetensors", "x");
  EXPECT_EQ(snapshot_missing(dir), "model-2.safetensors");
  write(dir / "model-2.safetensors", "x");
  EXPECT_EQ(snapshot_missing(dir), "");
}

TEST(ModelFiles, OnlyWhatAModelNeedsNotTheDuplicates) {
  const std::vector<std::string> repo = {
      ".gitattributes", "README.md", "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
      "model-00002-of-00002.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "model.gguf",
      "onnx/model.onnx", "original/consolidated.00.pth", "tokenizer.json", "tokenizer_config.json", "tokenizer.model",
      "special_tokens_map.json", "chat_template.jinja", "consolidated.safetensors", "tf_model.h5", "flax_model.msgpack"};
  EXPECT_EQ(select_model_files(repo),
            (std::vector<std::string>{"chat_template.jinja", "config.json", "generation_config.json",
                                      "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                      "model.safetensors.index.json", "special_tokens_map.json", "tokenizer.json",
                                      "tokenizer.model", "tokenizer_config.json"}));
  // Mistral's consolidated weights are the model's only weights when nothing else is there.
  EXPECT_EQ(select_model_files({"config.json", "consolidated.safetensors"}),
            (std::vector<std::string>{"config.json", "consolidated.safetensors"}));
}

TEST(ModelResolver, ASnapshotFolderIsNamedAfterItsRepoNotItsCommit) {
  EXPECT_EQ(model_name_of_folder("/c/models--mlx-community--Qwen2.5-3B-Instruct-4bit/snapshots/" + kCommit),
            "mlx-community/Qwen2.5-3B-Instruct-4bit");
  EXPECT_EQ(model_name_of_folder("/c/models--org--name/snapshots/" + kCommit + "/"), "org/name");
  EXPECT_EQ(model_name_of_folder("models/tiny-code-qwen2"), "tiny-code-qwen2");
  EXPECT_EQ(model_name_of_folder("models/tiny-code-qwen2/"), "tiny-code-qwen2");
}

TEST(ModelResolver, OfflineFindsTheCacheAndNeverAsks) {
  TempDir tmp;
  ScopedEnv cache_env("HF_HUB_CACHE", tmp.path().c_str());
  RepoCache cache(tmp.path(), "org/name");
  for (const char* f : {"config.json", "tokenizer.json", "model.safetensors"}) {
    write(cache.blob(std::string("b") + std::to_string(std::hash<std::string>{}(f) % 1000)), "{}");
    ASSERT_TRUE(cache.link_snapshot_file(kCommit, f, std::string("b") + std::to_string(std::hash<std::string>{}(f) % 1000)));
  }
  ResolveOptions options;
  options.settings.offline = true;
  options.settings.endpoint = "http://127.0.0.1:9";  // would fail if asked
  EXPECT_FALSE(resolve_model("org/name", options));  // no ref for main yet
  ASSERT_TRUE(cache.write_ref("main", kCommit));
  auto resolved = resolve_model("org/name", options);
  ASSERT_TRUE(resolved) << resolved.message();
  EXPECT_EQ(resolved->dir, cache.snapshot(kCommit).string());
  EXPECT_EQ(resolved->name, "org/name");
  EXPECT_EQ(resolved->commit, kCommit);
  auto folder = resolve_model(cache.snapshot(kCommit).string(), options);
  ASSERT_TRUE(folder);
  EXPECT_FALSE(folder->from_hub);
  EXPECT_EQ(folder->name, "org/name");
}

TEST(BlobDownload, RefusesADownloadTheDiskCannotHold) {
  TempDir tmp;
  EXPECT_TRUE(check_free_space(tmp.path(), 1));
  auto refused = check_free_space(tmp.path(), std::uint64_t{1} << 62);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.message().find("not enough disk space in " + tmp.path().string()), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("HF_HUB_CACHE"), std::string::npos);
}

TEST(HubSettings, ReadsHuggingFaceHubVariables) {
  TempDir tmp;
  ScopedEnv endpoint("HF_ENDPOINT", "http://hub.local:8080/"), token("HF_TOKEN", nullptr), path("HF_TOKEN_PATH", nullptr),
      home("HF_HOME", tmp.path().c_str()), offline("HF_HUB_OFFLINE", "yes"), transformers("TRANSFORMERS_OFFLINE", nullptr);
  write(tmp.path() / "token", "hf_from_file\n");
  auto s = HubSettings::from_environment();
  EXPECT_EQ(s.endpoint, "http://hub.local:8080");
  EXPECT_EQ(s.token, "hf_from_file");
  EXPECT_TRUE(s.offline);
  ::setenv("HF_TOKEN", "hf_env", 1);
  ::setenv("HF_HUB_OFFLINE", "0", 1);
  s = HubSettings::from_environment();
  EXPECT_EQ(s.token, "hf_env");
  EXPECT_EQ(s.token_source, "HF_TOKEN");
  EXPECT_FALSE(s.offline);
}

TEST(Url, ParsesAndResolvesRedirects) {
  auto u = Url::parse("https://huggingface.co/org/name/resolve/main/config.json");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "huggingface.co");
  EXPECT_EQ(u->port, "443");
  EXPECT_EQ(u->origin(), "https://huggingface.co");
  auto relative = u->resolve("/org/renamed/resolve/main/config.json");
  ASSERT_TRUE(relative);
  EXPECT_EQ(relative->text(), "https://huggingface.co/org/renamed/resolve/main/config.json");
  auto cdn = u->resolve("https://cdn-lfs.hf.co/repos/ab/cd/blob?X-Amz-Signature=1");
  ASSERT_TRUE(cdn);
  EXPECT_EQ(cdn->host, "cdn-lfs.hf.co");
  EXPECT_EQ(cdn->target, "/repos/ab/cd/blob?X-Amz-Signature=1");
  auto local = Url::parse("http://127.0.0.1:5000");
  ASSERT_TRUE(local);
  EXPECT_EQ(local->port, "5000");
  EXPECT_EQ(local->target, "/");
  EXPECT_FALSE(Url::parse("ftp://x/y"));
  EXPECT_FALSE(Url::parse("http://a:b:80/"));      // a colon in a name
  EXPECT_FALSE(Url::parse("http://[::1]x:80/"));   // text after the brackets
  EXPECT_FALSE(Url::parse("http://[::g]/"));
  auto v6 = Url::parse("http://[::1]:8080/x#frag");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->target, "/x");
  EXPECT_EQ(v6->origin(), "http://[::1]:8080");
  EXPECT_EQ(v6->resolve("y#frag")->target, "/y");
  EXPECT_FALSE(Url::parse("http://user:pw@host/"));
  EXPECT_EQ(percent_encode("a b/c.json", true), "a%20b/c.json");
  EXPECT_EQ(percent_encode("refs/pr/1", false), "refs%2Fpr%2F1");
}

}  // namespace
}  // namespace sluice::hub
