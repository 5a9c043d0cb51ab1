// sluice conformance --backend NAME|PATH.so [--against NAME|PATH.so|none]: runs every op of a backend
// plugin against reference math on random inputs of several shapes (core/conformance) and, unless
// told otherwise, against the CPU backend plugin on the same inputs; prints, per op, pass/fail, the
// largest error, the largest difference from the backend compared with, and the time. Exit status 0
// when every op passes (or is declared unsupported, or is an optional entry the plugin does not
// implement).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "conformance/conformance.h"
#include "engine/runtime.h"
#include "plugin/plugin_registry.h"
#include "util/json.h"

namespace sluice::cli {
namespace {
const char* kUsage =
    "usage: sluice conformance --backend NAME|NAME:DEVICE|PATH.so [--against NAME|NAME:DEVICE|PATH.so|none]\n"
    "                          [--plugin-dir DIR] [--quick] [--seed N] [--json]\n"
    "  --against: a second backend to compare every value with (default: cpu, when its plugin is found\n"
    "             and the backend under test is not cpu itself; none: reference math only)\n";

Result<std::unique_ptr<BackendHandle>> open_backend(PluginRegistry& registry, const std::string& spec) {
  auto choice = choose_backend(registry, spec);
  if (!choice) return make_error(choice.message());
  const auto* rec = registry.find(SL_PLUGIN_BACKEND, choice->name);
  return BackendHandle::open(static_cast<const sl_backend_api*>(rec->descriptor->api), choice->name, choice->device, 0);
}

// A cell of the columns against the second backend: "-" with none or for a skipped op, "FAIL" where
// that backend failed reference math, "n/a" where it does not offer the op.
std::string against_cell(const conformance::OpResult& r, double value) {
  if (r.against.empty() || r.status.rfind("skipped", 0) == 0) return "-";
  if (r.against != "compared") return r.against == "FAIL" ? "FAIL" : "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", value);
  return buf;
}
}  // namespace

int run_conformance(const Args& args) {
  std::string spec, against_spec, dir;
  bool as_json = false;
  conformance::Options options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--backend" && i + 1 < args.size()) {
      spec = args[++i];
    } else if (a == "--against" && i + 1 < args.size()) {
      against_spec = args[++i];
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
  auto backend = open_backend(registry, spec);
  if (!backend) {
    std::cerr << "sluice conformance: " << backend.message() << "\n";
    return 1;
  }
  // Compare with the CPU backend by default: where its plugin is found and it is not the one under test.
  if (against_spec.empty() && (*backend)->name() != "cpu" && registry.find(SL_PLUGIN_BACKEND, "cpu")) against_spec = "cpu";
  std::unique_ptr<BackendHandle> against;
  if (!against_spec.empty() && against_spec != "none") {
    auto opened = open_backend(registry, against_spec);
    if (!opened) {
      std::cerr << "sluice conformance: --against: " << opened.message() << "\n";
      return 1;
    }
    against = std::move(*opened);
    options.against = against.get();
  }
  const auto results = conformance::run_all(**backend, options);
  bool all = true;
  for (const auto& r : results) all = all && r.passed();
  if (as_json) {
    std::cout << "{\"backend\":" << json::quote((*backend)->description())
              << ",\"against\":" << (against ? json::quote(against->description()) : "null")
              << ",\"passed\":" << (all ? "true" : "false") << ",\"ops\":[";
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      std::printf("%s{\"op\":%s,\"status\":%s,\"cases\":%d,\"max_error\":%.3g,\"error_vs_bound\":%.3g,\"against\":%s,\"compared\":%d,"
                  "\"max_diff\":%.3g,\"diff_vs_bound\":%.3g,\"ms\":%.2f,\"detail\":%s}",
                  i ? "," : "", json::quote(r.op).c_str(), json::quote(r.status).c_str(), r.cases, r.max_error, r.worst_ratio,
                  json::quote(r.against).c_str(), r.compared, r.against_max_diff, r.against_worst_ratio, r.seconds * 1e3,
                  json::quote(r.detail).c_str());
    }
    std::cout << "]}\n";
    return all ? 0 : 1;
  }
  std::printf("backend: %s\n", (*backend)->description().c_str());
  if (against)
    std::printf("against: %s (same inputs; each value within the sum of both bounds of its value)\n", against->description().c_str());
  else
    std::printf("against: none (reference math only)\n");
  std::printf("\n%-44s %-24s %6s %11s %11s %11s %11s %10s\n", "op", "status", "cases", "max error", "err/bound", "max diff",
              "diff/bound", "time ms");
  for (const auto& r : results) {
    std::printf("%-44s %-24s %6d %11.3g %11.3g %11s %11s %10.1f\n", r.op.c_str(), r.status.c_str(), r.cases, r.max_error, r.worst_ratio,
                against_cell(r, r.against_max_diff).c_str(), against_cell(r, r.against_worst_ratio).c_str(), r.seconds * 1e3);
    if (!r.detail.empty() && !r.passed()) std::printf("    first failure: %s\n", r.detail.c_str());
    if (against && r.passed() && !r.against.empty() && r.against != "compared")
      std::printf("    not compared: %s does not offer it (%s); reference math only\n", against->name().c_str(), r.against.c_str());
  }
  std::printf("\n%s\n", all ? "all ops pass" : "SOME OPS FAIL");
  return all ? 0 : 1;
}

}  // namespace sluice::cli
