// sluice devices: every device of every backend plugin, with memory and capabilities, and the
// --backend value that selects it.
#include <cstdio>
#include <iostream>
#include <string>

#include "commands.h"
#include "plugin/plugin_registry.h"
#include "util/json.h"

namespace sluice::cli {
namespace {

std::string caps_text(uint32_t caps) {
  std::string s;
  auto add = [&](uint32_t bit, const char* name) {
    if (caps & bit) s += (s.empty() ? "" : ",") + std::string(name);
  };
  add(SL_CAP_F16, "f16");
  add(SL_CAP_INT8_DOT, "int8-dot");
  add(SL_CAP_MATRIX, "matrix");
  add(SL_CAP_UNIFIED, "unified-memory");
  return s.empty() ? "-" : s;
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return buf;
}

const char* kUsage = "usage: sluice devices [--plugin-dir DIR] [--json]\n";

}  // namespace

int run_devices(const Args& args) {
  bool as_json = false;
  std::string dir;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--json") {
      as_json = true;
    } else if (args[i] == "--plugin-dir" && i + 1 < args.size()) {
      dir = args[++i];
    } else if (args[i] == "--help") {
      std::cout << kUsage;
      return 0;
    } else {
      std::cerr << "sluice devices: unknown argument '" << args[i] << "'\n" << kUsage;
      return 2;
    }
  }
  PluginRegistry registry;
  if (dir.empty()) {
    for (const auto& d : PluginRegistry::default_dirs()) registry.scan(d);
  } else {
    registry.scan(dir);
  }
  std::string json_items;
  for (const auto& rec : registry.records()) {
    if (rec.kind != "backend") continue;
    if (!rec.loaded) {
      if (as_json) {
        json_items += std::string(json_items.empty() ? "" : ",") + "{\"backend\":" + json::quote(rec.name) +
                      ",\"status\":" + json::quote(rec.status) + "}";
      } else {
        std::cout << rec.name << ": unavailable (" << rec.status << ")\n";
      }
      continue;
    }
    const auto* api = static_cast<const sl_backend_api*>(rec.descriptor->api);
    const uint32_t n = api->device_count ? api->device_count() : 0;
    if (!as_json) std::cout << rec.name << ": " << n << " device" << (n == 1 ? "" : "s") << "\n";
    for (uint32_t i = 0; i < n; ++i) {
      sl_device_info info{};
      info.struct_size = sizeof(info);
      sl_error err{};
      if (api->device_info(i, &info, &err) != SL_OK) {
        if (!as_json) std::cout << "  " << rec.name << ":" << i << "  error: " << err.message << "\n";
        continue;
      }
      const std::string select = rec.name + ":" + std::to_string(i);
      if (as_json) {
        json_items += std::string(json_items.empty() ? "" : ",") + "{\"backend\":" + json::quote(rec.name) +
                      ",\"select\":" + json::quote(select) + ",\"name\":" + json::quote(info.name) +
                      ",\"vendor\":" + json::quote(info.vendor) + ",\"driver\":" + json::quote(info.driver) +
                      ",\"kind\":" + json::quote(info.kind) + ",\"total_memory\":" + std::to_string(info.total_memory) +
                      ",\"max_alloc\":" + std::to_string(info.max_alloc) +
                      ",\"compute_units\":" + std::to_string(info.compute_units) +
                      ",\"caps\":" + json::quote(caps_text(info.caps)) + "}";
      } else {
        std::cout << "  --backend " << select << "\t" << info.kind << "\t" << info.name << " (" << info.vendor << ", driver "
                  << info.driver << ")\n"
                  << "      memory " << gib(info.total_memory) << ", largest buffer " << gib(info.max_alloc) << ", "
                  << info.compute_units << " compute units, caps " << caps_text(info.caps) << "\n";
      }
    }
  }
  if (as_json) std::cout << "{\"devices\":[" << json_items << "]}\n";
  return 0;
}

}  // namespace sluice::cli
