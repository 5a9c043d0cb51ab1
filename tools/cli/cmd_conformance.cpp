// sluice conformance --backend NAME|PATH.so: runs every op of a backend plugin against reference
// math on random inputs of several shapes (core/conformance) and prints, per op, pass/fail, the
// largest error and the time. Exit status 0 when every op passes (or is declared unsupported, or is an
// optional entry the plugin does not implement).
#include <cstdio>
#include <iostream>
#include <string>

#include "commands.h"
#include "conformance/conformance.h"
#include "engine/runtime.h"
#include "plugin/plugin_registry.h"
#include "util/json.h"

namespace sluice::cli {
namespace {
const char* kUsage =
    "usage: sluice conformance --backend NAME|NAME:DEVICE|PATH.so [--plugin-dir DIR] [--quick] [--seed N] [--json]\n";
}

int run_conformance(const Args& args) {
  std::string spec, dir;
  bool as_json = false;
  conformance::Options options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--backend" && i + 1 < args.size()) {
      spec = args[++i];
    } else if (a == "--plugin-dir" && i + 1 < args.size()) {
      dir = args[++i];
    } else if (a == "--seed" && i + 1 < args.size()) {
      options.seed = static_cast<uint32_t>(std::stoul(args[++i]));
    } else if (a == "--quick") {
      options.quick = true;
    } else if (a == "--json") {
      as_json = true;
    } else if (a == "--help") {
      std::cout << kUsage;
      return 0;
    } else {
      std::cerr << "sluice conformance: unknown argument '" << a << "'\n" << kUsage;
      return 2;
    }
  }
  if (spec.empty()) {
    std::cerr << "sluice conformance: --backend is required\n" << kUsage;
    return 2;
  }
  PluginRegistry registry;
  if (dir.empty()) {
    for (const auto& d : PluginRegistry::default_dirs()) registry.scan(d);
  } else {
    registry.scan(dir);
  }
  auto choice = choose_backend(registry, spec);
  if (!choice) {
    std::cerr << "sluice conformance: " << choice.message() << "\n";
    return 1;
  }
  const auto* rec = registry.find(SL_PLUGIN_BACKEND, choice->name);
  auto backend = BackendHandle::open(static_cast<const sl_backend_api*>(rec->descriptor->api), choice->name, choice->device, 0);
  if (!backend) {
    std::cerr << "sluice conformance: " << backend.message() << "\n";
    return 1;
  }
  const auto results = conformance::run_all(**backend, options);
  bool all = true;
  for (const auto& r : results) all = all && r.passed();
  if (as_json) {
    std::cout << "{\"backend\":" << json::quote((*backend)->description()) << ",\"passed\":" << (all ? "true" : "false")
              << ",\"ops\":[";
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      std::printf("%s{\"op\":%s,\"status\":%s,\"cases\":%d,\"max_error\":%.3g,\"error_vs_bound\":%.3g,\"ms\":%.2f,\"detail\":%s}",
                  i ? "," : "", json::quote(r.op).c_str(), json::quote(r.status).c_str(), r.cases, r.max_error, r.worst_ratio,
                  r.seconds * 1e3, json::quote(r.detail).c_str());
    }
    std::cout << "]}\n";
    return all ? 0 : 1;
  }
  std::printf("backend: %s\n\n", (*backend)->description().c_str());
  std::printf("%-34s %-24s %6s %11s %11s %10s\n", "op", "status", "cases", "max error", "err/bound", "time ms");
  for (const auto& r : results) {
    std::printf("%-34s %-24s %6d %11.3g %11.3g %10.1f\n", r.op.c_str(), r.status.c_str(), r.cases, r.max_error, r.worst_ratio,
                r.seconds * 1e3);
    if (!r.detail.empty() && !r.passed()) std::printf("    first failure: %s\n", r.detail.c_str());
  }
  std::printf("\n%s\n", all ? "all ops pass" : "SOME OPS FAIL");
  return all ? 0 : 1;
}

}  // namespace sluice::cli
