#include "machine_info.h"

#include <sys/utsname.h>

#include <ctime>
#include <fstream>
#include <string>
#include <thread>

#include "plugin/plugin_registry.h"
#include "sluice/backend.h"

#include "build_commit.h"  // generated at build time (tools/cli/bench/build_commit.cmake)

namespace sluice::cli::bench {
namespace {

using Alloc = rapidjson::Document::AllocatorType;

rapidjson::Value str(const std::string& s, Alloc& a) { return rapidjson::Value(s.c_str(), static_cast<rapidjson::SizeType>(s.size()), a); }

// The first value of a "key : value" line in a /proc file.
std::string proc_field(const char* file, const std::string& key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, key.size(), key) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

rapidjson::Value devices(const std::string& plugin_dir, Alloc& a) {
  PluginRegistry registry;
  if (plugin_dir.empty()) {
    for (const auto& d : PluginRegistry::default_dirs()) registry.scan(d);
  } else {
    registry.scan(plugin_dir);
  }
  rapidjson::Value list(rapidjson::kArrayType);
  for (const auto& rec : registry.records()) {
    if (rec.kind != "backend" || !rec.loaded) continue;
    const auto* api = static_cast<const sl_backend_api*>(rec.descriptor->api);
    const uint32_t n = api->device_count ? api->device_count() : 0;
    for (uint32_t i = 0; i < n; ++i) {
      sl_device_info info{};
      info.struct_size = sizeof(info);
      sl_error err{};
      if (!api->device_info || api->device_info(i, &info, &err) != SL_OK) continue;
      rapidjson::Value d(rapidjson::kObjectType);
      d.AddMember("backend", str(rec.name, a), a);
      d.AddMember("index", i, a);
      d.AddMember("name", str(info.name, a), a);
      d.AddMember("vendor", str(info.vendor, a), a);
      d.AddMember("driver", str(info.driver, a), a);
      d.AddMember("kind", str(info.kind, a), a);
      d.AddMember("memory_mb", static_cast<double>(info.total_memory) / (1 << 20), a);
      d.AddMember("compute_units", info.compute_units, a);
      list.PushBack(d, a);
    }
  }
  return list;
}

}  // namespace

std::string source_commit() { return SLUICE_BUILD_COMMIT; }

std::string loadavg() {
  std::ifstream load("/proc/loadavg");
  std::string l1, l5, l15;
  load >> l1 >> l5 >> l15;
  return l1 + " " + l5 + " " + l15;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

rapidjson::Value machine_record(const std::string& plugin_dir, Alloc& a) {
  rapidjson::Value m(rapidjson::kObjectType);
  utsname u{};
  ::uname(&u);
  m.AddMember("hostname", str(u.nodename, a), a);
  m.AddMember("kernel", str(std::string(u.sysname) + " " + u.release, a), a);
  m.AddMember("cpu", str(proc_field("/proc/cpuinfo", "model name"), a), a);
  m.AddMember("cores", std::thread::hardware_concurrency(), a);
  const std::string mem_kb = proc_field("/proc/meminfo", "MemTotal");
  m.AddMember("memory_mb", mem_kb.empty() ? 0.0 : std::stod(mem_kb) / 1024.0, a);
  m.AddMember("loadavg", str(loadavg(), a), a);
  m.AddMember("devices", devices(plugin_dir, a), a);
  m.AddMember("commit", str(source_commit(), a), a);
  m.AddMember("date", str(utc_now(), a), a);
  return m;
}

}  // namespace sluice::cli::bench
