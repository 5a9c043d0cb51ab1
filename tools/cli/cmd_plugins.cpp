// sluice plugins: every plugin found, with its kind, version, path and whether it loaded.
#include <iostream>

#include "commands.h"
#include "plugin/plugin_registry.h"
#include "util/json.h"

namespace sluice::cli {

int run_plugins(const Args& args) {
  bool as_json = false;
  std::string dir;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--json") {
      as_json = true;
    } else if (args[i] == "--plugin-dir" && i + 1 < args.size()) {
      dir = args[++i];
    } else if (args[i] == "--help") {
      std::cout << "usage: sluice plugins [--plugin-dir DIR] [--json]\n";
      return 0;
    } else {
      std::cerr << "sluice plugins: unknown argument '" << args[i] << "'\nusage: sluice plugins [--plugin-dir DIR] [--json]\n";
      return 2;
    }
  }
  PluginRegistry registry;
  if (dir.empty()) {
    for (const auto& d : PluginRegistry::default_dirs()) registry.scan(d);
  } else {
    registry.scan(dir);
  }
  if (as_json) {
    std::cout << "{\"plugins\":[";
    bool first = true;
    for (const auto& r : registry.records()) {
      std::cout << (first ? "" : ",") << "{\"name\":" << json::quote(r.name) << ",\"kind\":" << json::quote(r.kind)
                << ",\"version\":" << json::quote(r.version) << ",\"abi\":" << json::quote(r.abi) << ",\"path\":" << json::quote(r.path)
                << ",\"status\":" << json::quote(r.status) << "}";
      first = false;
    }
    std::cout << "]}\n";
    return 0;
  }
  if (registry.records().empty()) std::cout << "no plugins found\n";
  for (const auto& r : registry.records())
    std::cout << r.kind << "\t" << r.name << "\t" << (r.version.empty() ? "-" : r.version) << "\tABI " << (r.abi.empty() ? "-" : r.abi)
              << "\t" << r.status << "\t" << r.path << "\n";
  return 0;
}

}  // namespace sluice::cli
