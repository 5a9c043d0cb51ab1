// The plugin loader against stub plugins that are each wrong in one way, the real CPU backend, and
// `sluice plugins --json`.
#include <dlfcn.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "plugin/plugin_registry.h"
#include "reference.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

fs::path stub_dir() { return SLUICE_STUB_PLUGIN_DIR; }
fs::path cpu_plugin() { return test::binary_path("lib") / "sluice-backend-cpu.so"; }

// Records of one scan of the stub directory, by file name.
std::map<std::string, PluginRecord> scan_stubs(PluginRegistry& registry) {
  registry.scan(stub_dir());
  std::map<std::string, PluginRecord> by_file;
  for (const auto& r : registry.records()) by_file[fs::path(r.path).filename().string()] = r;
  return by_file;
}

// Runs a command and returns its standard output (and exit status).
std::string run_command(const std::string& command, int* exit_status) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  std::array<char, 4096> chunk;
  std::size_t got;
  while ((got = fread(chunk.data(), 1, chunk.size(), pipe)) > 0) out.append(chunk.data(), got);
  const int status = pclose(pipe);
  if (exit_status) *exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

void expect_skipped(const std::map<std::string, PluginRecord>& records, const std::string& file,
                    const std::string& reason) {
  SCOPED_TRACE(file);
  auto it = records.find(file);
  ASSERT_NE(it, records.end()) << "the scan did not record " << file;
  EXPECT_FALSE(it->second.loaded);
  EXPECT_EQ(it->second.descriptor, nullptr);
  EXPECT_EQ(it->second.status.rfind("skipped: ", 0), 0u) << it->second.status;
  EXPECT_NE(it->second.status.find(reason), std::string::npos) << "status: " << it->second.status;
}

TEST(PluginLoader, StubDirectoryWasBuilt) {
  ASSERT_TRUE(fs::is_directory(stub_dir())) << stub_dir();
  EXPECT_TRUE(fs::exists(stub_dir() / "sluice-stub-newer-backend.so"));
}

TEST(PluginLoader, ScanRecordsEveryMatchingFileAndIgnoresOthers) {
  PluginRegistry registry;
  const auto records = scan_stubs(registry);
  EXPECT_EQ(records.size(), 14u);
  EXPECT_EQ(records.count("not-a-plugin.txt"), 0u);
  EXPECT_EQ(records.count("sluice-garbage.so"), 1u);
}

TEST(PluginLoader, ScanningTwiceDoesNotLoadAgain) {
  PluginRegistry registry;
  registry.scan(stub_dir());
  const auto first = registry.records().size();
  registry.scan(stub_dir());
  EXPECT_EQ(registry.records().size(), first);
}

TEST(PluginLoader, MissingDirectoryFindsNothing) {
  PluginRegistry registry;
  registry.scan(stub_dir() / "does-not-exist");
  EXPECT_TRUE(registry.records().empty());
}

TEST(PluginLoader, WrongAbiMajorIsSkippedNamingBothVersions) {
  PluginRegistry registry;
  const auto records = scan_stubs(registry);
  expect_skipped(records, "sluice-stub-wrong-abi.so",
                 "built for plugin ABI " + std::to_string(SL_ABI_MAJOR + 98) + ".3; this host runs ABI " + std::to_string(SL_ABI_MAJOR) +
                     "." + std::to_string(SL_ABI_MINOR));
  EXPECT_EQ(records.at("sluice-stub-wrong-abi.so").name, "stub-abi");  // still named from its descriptor
  EXPECT_EQ(registry.find(SL_PLUGIN_BACKEND, "stub-abi"), nullptr);
}

// A plugin built against ABI 1 kept its major alone where abi_version is: refused as ABI 1.
TEST(PluginLoader, Abi1PluginIsRefusedNamingBothVersions) {
  PluginRegistry registry;
  const auto records = scan_stubs(registry);
  expect_skipped(records, "sluice-stub-abi1.so",
                 "built for plugin ABI 1; this host runs ABI " + std::to_string(SL_ABI_MAJOR) + "." + std::to_string(SL_ABI_MINOR));
  EXPECT_EQ(registry.find(SL_PLUGIN_BACKEND, "stub-abi1"), nullptr);
}

TEST(PluginLoader, LibraryWithoutEntrySymbolIsSkipped) {
  PluginRegistry registry;
  expect_skipped(scan_stubs(registry), "sluice-stub-no-entry.so", "no entry symbol sluice_plugin_entry");
}

TEST(PluginLoader, FailingProbeIsSkippedWithThePluginsReason) {
  PluginRegistry registry;
  expect_skipped(scan_stubs(registry), "sluice-stub-probe-fails.so", "probe failed: no stub device on this machine");
}

TEST(PluginLoader, EntryReturningNullIsSkipped) {
  PluginRegistry registry;
  expect_skipped(scan_stubs(registry), "sluice-stub-null-entry.so", "entry returned no descriptor");
}

TEST(PluginLoader, CorruptFileNamedLikeAPluginIsSkipped) {
  PluginRegistry registry;
  expect_skipped(scan_stubs(registry), "sluice-garbage.so", "cannot load: ");
}

TEST(PluginLoader, TableOlderThanTheHostMinimumIsSkipped) {
  PluginRegistry registry;
  const auto records = scan_stubs(registry);
  expect_skipped(records, "sluice-stub-old-backend.so",
                 "backend table too small (" + std::to_string(offsetof(sl_backend_api, graph_compute)) + " bytes)");
  expect_skipped(records, "sluice-stub-old-kvcodec.so",
                 "kvcodec table too small (" + std::to_string(offsetof(sl_kvcodec_api, encode)) + " bytes)");
}

TEST(PluginLoader, TableLackingRequiredFunctionIsSkipped) {
  PluginRegistry registry;
  expect_skipped(scan_stubs(registry), "sluice-stub-missing-function.so", "backend table lacks required functions");
}

TEST(PluginLoader, UnknownKindIsSkipped) {
  PluginRegistry registry;
  const auto records = scan_stubs(registry);
  expect_skipped(records, "sluice-stub-unknown-kind.so", "unknown plugin kind 42");
  EXPECT_EQ(records.at("sluice-stub-unknown-kind.so").kind, "unknown");
}

TEST(PluginLoader, TablesFromANewerMinorVersionLoad) {
  PluginRegistry registry;
  const auto records = scan_stubs(registry);
  const auto& backend = records.at("sluice-stub-newer-backend.so");
  EXPECT_TRUE(backend.loaded) << backend.status;
  EXPECT_EQ(backend.status, "loaded");
  EXPECT_EQ(backend.kind, "backend");
  EXPECT_EQ(backend.name, "stub-newer");
  EXPECT_EQ(backend.version, "1.9.0");
  ASSERT_NE(backend.descriptor, nullptr);
  EXPECT_GT(backend.descriptor->struct_size, sizeof(sl_plugin_descriptor));
  const auto* api = static_cast<const sl_backend_api*>(backend.descriptor->api);
  EXPECT_GT(api->struct_size, sizeof(sl_backend_api));
  // The host's own members are usable as usual.
  ASSERT_TRUE(table_has(api, &sl_backend_api::device_count));
  EXPECT_EQ(api->device_count(), 7u);
  EXPECT_FALSE(table_has(api, &sl_backend_api::plan_create));  // NULL in the stub
  sl_backend* be = nullptr;
  sl_error err{};
  EXPECT_EQ(api->create(nullptr, &be, &err), SL_ERR_UNSUPPORTED);
  EXPECT_STREQ(err.message, "stub backend cannot start");
  EXPECT_NE(registry.find(SL_PLUGIN_BACKEND, "stub-newer"), nullptr);

  const auto& codec = records.at("sluice-stub-newer-kvcodec.so");
  EXPECT_TRUE(codec.loaded) << codec.status;
  EXPECT_EQ(codec.kind, "kvcodec");
  EXPECT_EQ(codec.name, "stub-newer-codec");
  EXPECT_NE(registry.find(SL_PLUGIN_KVCODEC, "stub-newer-codec"), nullptr);
}

TEST(PluginLoader, SecondPluginWithTheSameNameIsSkipped) {
  PluginRegistry registry;
  const auto records = scan_stubs(registry);
  const auto& first = records.at("sluice-stub-dup-a.so");
  EXPECT_TRUE(first.loaded) << first.status;
  EXPECT_EQ(first.version, "1.0.0-a");
  expect_skipped(records, "sluice-stub-dup-b.so", "another kvcodec named 'stub-dup' is already loaded");
  const auto* found = registry.find(SL_PLUGIN_KVCODEC, "stub-dup");
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->version, "1.0.0-a");
}

TEST(PluginLoader, OnlyWellFormedStubsAreLoaded) {
  PluginRegistry registry;
  registry.scan(stub_dir());
  std::set<std::string> loaded;
  for (const auto& r : registry.records())
    if (r.loaded) loaded.insert(r.name);
  EXPECT_EQ(loaded, (std::set<std::string>{"stub-newer", "stub-newer-codec", "stub-dup"}));
  EXPECT_EQ(registry.loaded_of_kind(SL_PLUGIN_BACKEND).size(), 1u);
  EXPECT_EQ(registry.loaded_of_kind(SL_PLUGIN_KVCODEC).size(), 2u);
  EXPECT_TRUE(registry.loaded_of_kind(SL_PLUGIN_EXPERTSTORE).empty());
}

TEST(PluginLoader, CpuBackendLoadsAsBackendNamedCpu) {
  ASSERT_TRUE(fs::exists(cpu_plugin())) << cpu_plugin();
  PluginRegistry registry;
  registry.scan(test::binary_path("lib"));
  const auto* cpu = registry.find(SL_PLUGIN_BACKEND, "cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->kind, "backend");
  EXPECT_EQ(cpu->status, "loaded");
  EXPECT_FALSE(cpu->version.empty());
  EXPECT_EQ(fs::path(cpu->path).filename(), "sluice-backend-cpu.so");
  const auto* api = static_cast<const sl_backend_api*>(cpu->descriptor->api);
  EXPECT_EQ(api->struct_size, sizeof(sl_backend_api));
  EXPECT_EQ(api->device_count(), 1u);
}

TEST(PluginLoader, LoadFileLoadsAPluginOutsideAnyScan) {
  PluginRegistry registry;
  const auto& record = registry.load_file(cpu_plugin());
  EXPECT_TRUE(record.loaded) << record.status;
  EXPECT_EQ(record.name, "cpu");
  const auto& missing = registry.load_file(stub_dir() / "sluice-nothing-here.so");
  EXPECT_FALSE(missing.loaded);
  EXPECT_EQ(missing.status.rfind("skipped: cannot load: ", 0), 0u) << missing.status;
}

TEST(PluginLoader, CpuBackendExportsOnlyTheEntrySymbol) {
  int status = 0;
  const auto out = run_command("nm -D --defined-only '" + cpu_plugin().string() + "' 2>/dev/null", &status);
  if (status != 0 || out.empty()) GTEST_SKIP() << "nm is not available";
  std::set<std::string> symbols;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string address, type, name;
    if (fields >> address >> type >> name) symbols.insert(name);
  }
  EXPECT_EQ(symbols, (std::set<std::string>{SL_PLUGIN_ENTRY_SYMBOL})) << out;

  // And the dynamic linker agrees: internal functions cannot be looked up.
  void* handle = dlopen(cpu_plugin().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  EXPECT_NE(dlsym(handle, SL_PLUGIN_ENTRY_SYMBOL), nullptr);
  EXPECT_EQ(dlsym(handle, "_ZN6sluice3cpu9set_errorEP8sl_error9sl_statusRKNSt7__cxx1112basic_stringIcSt11char_"
                          "traitsIcESaIcEEE"),
            nullptr);
  dlclose(handle);
}

TEST(PluginsCommand, JsonListsEveryStubWithItsStatus) {
  const auto program = test::binary_path("bin/sluice");
  ASSERT_TRUE(fs::exists(program)) << program;
  int status = -1;
  const auto out =
      run_command("'" + program.string() + "' plugins --json --plugin-dir '" + stub_dir().string() + "'", &status);
  ASSERT_EQ(status, 0) << out;
  rapidjson::Document doc;
  doc.Parse(out.c_str());
  ASSERT_FALSE(doc.HasParseError()) << "not JSON: " << out;
  ASSERT_TRUE(doc.IsObject() && doc.HasMember("plugins") && doc["plugins"].IsArray()) << out;

  std::map<std::string, std::map<std::string, std::string>> by_file;
  for (const auto& p : doc["plugins"].GetArray()) {
    ASSERT_TRUE(p.IsObject());
    std::map<std::string, std::string> fields;
    for (const char* key : {"name", "kind", "version", "abi", "path", "status"}) {
      ASSERT_TRUE(p.HasMember(key) && p[key].IsString()) << "missing string field " << key << " in " << out;
      fields[key] = p[key].GetString();
    }
    EXPECT_TRUE(fs::path(fields["path"]).is_absolute()) << fields["path"];
    by_file[fs::path(fields["path"]).filename().string()] = fields;
  }
  EXPECT_EQ(by_file.size(), 14u);

  const auto& newer = by_file["sluice-stub-newer-backend.so"];
  EXPECT_EQ(newer.at("name"), "stub-newer");
  EXPECT_EQ(newer.at("kind"), "backend");
  EXPECT_EQ(newer.at("version"), "1.9.0");
  EXPECT_EQ(newer.at("abi"), std::to_string(SL_ABI_MAJOR) + ".9");
  EXPECT_EQ(newer.at("status"), "loaded");
  EXPECT_EQ(fs::path(newer.at("path")).parent_path(), fs::weakly_canonical(stub_dir()));

  const auto& codec = by_file["sluice-stub-newer-kvcodec.so"];
  EXPECT_EQ(codec.at("kind"), "kvcodec");
  EXPECT_EQ(codec.at("status"), "loaded");

  const auto& probe = by_file["sluice-stub-probe-fails.so"];
  EXPECT_EQ(probe.at("name"), "stub-probe");
  EXPECT_EQ(probe.at("status"), "skipped: probe failed: no stub device on this machine");

  const auto& garbage = by_file["sluice-garbage.so"];
  EXPECT_EQ(garbage.at("name"), "sluice-garbage");
  EXPECT_EQ(garbage.at("kind"), "unknown");
  EXPECT_EQ(garbage.at("version"), "");
  EXPECT_EQ(garbage.at("status").rfind("skipped: cannot load: ", 0), 0u);

  EXPECT_EQ(by_file["sluice-stub-dup-b.so"].at("status"), "skipped: another kvcodec named 'stub-dup' is already loaded");
  EXPECT_EQ(by_file["sluice-stub-old-backend.so"].at("status").rfind("skipped: backend table too small", 0), 0u);
  EXPECT_EQ(by_file["sluice-stub-wrong-abi.so"].at("kind"), "backend");
  EXPECT_EQ(by_file["sluice-stub-abi1.so"].at("abi"), "1");
}

TEST(PluginsCommand, JsonFindsTheCpuBackendInTheBuildTree) {
  const auto program = test::binary_path("bin/sluice");
  int status = -1;
  const auto out = run_command("'" + program.string() + "' plugins --json --plugin-dir '" +
                                   test::binary_path("lib").string() + "'",
                               &status);
  ASSERT_EQ(status, 0) << out;
  rapidjson::Document doc;
  doc.Parse(out.c_str());
  ASSERT_FALSE(doc.HasParseError()) << out;
  bool found = false;
  for (const auto& p : doc["plugins"].GetArray()) {
    if (std::string(p["name"].GetString()) != "cpu") continue;
    found = true;
    EXPECT_STREQ(p["kind"].GetString(), "backend");
    EXPECT_STREQ(p["status"].GetString(), "loaded");
    EXPECT_EQ(std::string(p["abi"].GetString()), std::to_string(SL_ABI_MAJOR) + "." + std::to_string(SL_ABI_MINOR));
  }
  EXPECT_TRUE(found) << out;
}

}  // namespace
}  // namespace sluice
