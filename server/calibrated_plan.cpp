#include "server/calibrated_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "server/options.h"
#include "util/json.h"

namespace sluice::server {
namespace fs = std::filesystem;
namespace {

constexpr std::size_t kMaxPlanBytes = 64 << 10;
constexpr std::size_t kMaxRows = 16;

// FNV-1a: a stable 64-bit hash (the same in every build and on every machine), enough to tell
// models and machines apart in a file name.
struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(std::string_view bytes) {
    for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
    h = (h ^ 0xff) * 0x100000001b3ull;  // a separator, so "ab"+"c" differs from "a"+"bc"
  }
  std::string hex() const { return fmt::format("{:016x}", h); }
};

std::string read_small(const fs::path& path, std::size_t most) {
  std::ifstream in(path, std::ios::binary);
  std::string text(most, '\0');
  in.read(text.data(), static_cast<std::streamsize>(most));
  text.resize(static_cast<std::size_t>(std::max<std::streamsize>(0, in.gcount())));
  return text;
}

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0)
      if (auto colon = line.find(':'); colon != std::string::npos) return line.substr(colon + 2);
  return "unknown cpu";
}

uint64_t memory_total() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

}  // namespace

std::string model_key(const fs::path& model_dir) {
  Fnv f;
  f.add(read_small(model_dir / "config.json", 1 << 20));
  std::vector<std::pair<std::string, uintmax_t>> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_dir, ec))
    if (entry.path().extension() == ".safetensors") files.emplace_back(entry.path().filename().string(), entry.file_size(ec));
  std::sort(files.begin(), files.end());
  for (const auto& [name, size] : files) f.add(name + ":" + std::to_string(size));
  return f.hex();
}

std::string machine_description() {
  return fmt::format("{}, {} cores, {} MiB", cpu_model_name(), std::thread::hardware_concurrency(), memory_total() >> 20);
}

std::string machine_key(const ServerOptions& o) {
  Fnv f;
  f.add(machine_description());
  f.add(o.backend);
  f.add(o.devices);
  return f.hex();
}

fs::path plans_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "sluice" / "plans";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "sluice" / "plans";
  return fs::temp_directory_path() / "sluice-plans";
}

fs::path plan_path(const fs::path& model_dir, const ServerOptions& o) {
  std::string name = model_dir.filename().empty() ? model_dir.parent_path().filename().string() : model_dir.filename().string();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return plans_dir() / (name.substr(0, 64) + "-" + model_key(model_dir) + "-" + machine_key(o) + ".json");
}

std::string plan_json(const CalibratedPlan& p) {
  std::string out = "{\n";
  out += fmt::format("  \"version\": {},\n  \"model_key\": {},\n  \"machine_key\": {},\n", CalibratedPlan::kVersion,
                     json::quote(p.model_key), json::quote(p.machine_key));
  out += fmt::format("  \"model\": {},\n  \"machine\": {},\n  \"device\": {},\n", json::quote(p.model), json::quote(p.machine),
                     json::quote(p.device));
  out += fmt::format("  \"measured\": {{\n    \"host_read_gbps\": {:.3f},\n    \"weight_read_gbps\": {:.3f},\n", p.host_read_gbps,
                     p.weight_read_gbps);
  out += fmt::format("    \"disk_read_gbps\": {:.3f},\n    \"disk_direct\": {},\n", p.disk_read_gbps, p.disk_direct ? "true" : "false");
  out += "    \"prefill\": [";
  for (std::size_t i = 0; i < p.prefill.size(); ++i)
    out += fmt::format("{}{{\"chunk\": {}, \"tokens_per_second\": {:.1f}}}", i ? ", " : "", p.prefill[i].chunk, p.prefill[i].prefill_tps);
  out += "],\n    \"decode\": [";
  for (std::size_t i = 0; i < p.decode.size(); ++i)
    out += fmt::format("{}{{\"batch\": {}, \"tokens_per_second\": {:.1f}}}", i ? ", " : "", p.decode[i].batch, p.decode[i].decode_tps);
  out += "]\n  },\n";
  out += fmt::format("  \"gpu_layers_measured\": {{\"offloaded_tokens_per_second\": {:.1f}, \"cpu_tokens_per_second\": {:.1f}}},\n",
                     p.gpu_layers_decode_tps, p.cpu_only_decode_tps);
  out += fmt::format("  \"choices\": {{\"parallel\": {}, \"prefill_size\": {}, \"expert_cache_mb\": {}, \"gpu_layers\": {}}}\n}}\n",
                     p.parallel, p.prefill_size, p.expert_cache_mb, p.gpu_layers);
  return out;
}

Result<CalibratedPlan> parse_plan(const std::string& text) {
  json::JsonLimits limits;
  limits.max_bytes = kMaxPlanBytes;
  limits.max_depth = 8;
  limits.max_array_elements = kMaxRows;
  limits.max_object_members = 32;
  limits.max_string_bytes = 1024;
  limits.max_values = 1024;
  auto doc = json::parse(text, "plan file", limits);
  if (!doc) return doc.error();
  const auto& root = *doc;
  if (!root.IsObject()) return make_error("plan file: not a JSON object");
  if (json::integer(root, "version") != CalibratedPlan::kVersion)
    return make_error("plan file: version is not " + std::to_string(CalibratedPlan::kVersion));
  CalibratedPlan p;
  auto text_field = [&](const char* name, std::string& out) -> Status {
    auto v = json::string(root, name);
    if (!v) return make_error(std::string("plan file: no \"") + name + "\"");
    out = *v;
    return {};
  };
  for (auto [name, out] : {std::pair{"model_key", &p.model_key}, {"machine_key", &p.machine_key}, {"model", &p.model},
                           {"machine", &p.machine}, {"device", &p.device}})
    if (auto st = text_field(name, *out); !st) return st.error();
  const auto* measured = json::member(root, "measured");
  const auto* choices = json::member(root, "choices");
  if (!measured || !measured->IsObject() || !choices || !choices->IsObject()) return make_error("plan file: no \"measured\" or \"choices\"");
  auto rate = [](const rapidjson::Value& o, const char* name, double& out) -> Status {
    auto v = json::number(o, name);
    if (!v || !(*v >= 0 && *v < 1e9)) return make_error(std::string("plan file: \"") + name + "\" missing or out of range");
    out = *v;
    return {};
  };
  if (auto st = rate(*measured, "host_read_gbps", p.host_read_gbps); !st) return st.error();
  if (auto st = rate(*measured, "weight_read_gbps", p.weight_read_gbps); !st) return st.error();
  if (auto st = rate(*measured, "disk_read_gbps", p.disk_read_gbps); !st) return st.error();
  p.disk_direct = json::boolean(*measured, "disk_direct").value_or(false);
  auto rows = [&](const char* name, const char* key, auto add) -> Status {
    const auto* list = json::member(*measured, name);
    if (!list || !list->IsArray()) return make_error(std::string("plan file: no \"") + name + "\" list");
    for (const auto& row : list->GetArray()) {
      if (!row.IsObject()) return make_error(std::string("plan file: a \"") + name + "\" row is not an object");
      auto n = json::integer(row, key);
      auto tps = json::number(row, "tokens_per_second");
      if (!n || *n < 1 || *n > 65536 || !tps || !(*tps >= 0 && *tps < 1e9)) return make_error(std::string("plan file: a \"") + name + "\" row is out of range");
      add(static_cast<int>(*n), *tps);
    }
    return {};
  };
  if (auto st = rows("prefill", "chunk", [&](int n, double t) { p.prefill.push_back({n, t}); }); !st) return st.error();
  if (auto st = rows("decode", "batch", [&](int n, double t) { p.decode.push_back({n, t}); }); !st) return st.error();
  auto choice = [&](const char* name, int most, int& out) -> Status {
    auto v = json::integer(*choices, name);
    if (!v || *v < 0 || *v > most) return make_error(std::string("plan file: choice \"") + name + "\" missing or out of range");
    out = static_cast<int>(*v);
    return {};
  };
  if (auto st = choice("parallel", 1024, p.parallel); !st) return st.error();
  if (auto st = choice("prefill_size", 65536, p.prefill_size); !st) return st.error();
  if (auto st = choice("expert_cache_mb", 1 << 24, p.expert_cache_mb); !st) return st.error();
  if (auto v = json::integer(*choices, "gpu_layers"); !v || *v < -1 || *v > 4096)
    return make_error("plan file: choice \"gpu_layers\" missing or out of range");
  else
    p.gpu_layers = static_cast<int>(*v);
  if (const auto* g = json::member(root, "gpu_layers_measured"); g && g->IsObject()) {
    p.gpu_layers_decode_tps = std::clamp(json::number(*g, "offloaded_tokens_per_second").value_or(0), 0.0, 1e9);
    p.cpu_only_decode_tps = std::clamp(json::number(*g, "cpu_tokens_per_second").value_or(0), 0.0, 1e9);
  }
  return p;
}

Status write_plan(const CalibratedPlan& plan, const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return make_error("cannot create " + path.parent_path().string() + ": " + ec.message());
  // Written aside and renamed: a start reading at the same moment sees the old file or the new one.
  const fs::path partial = path.string() + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out << plan_json(plan);
    if (!out) return make_error("cannot write " + partial.string());
  }
  fs::rename(partial, path, ec);
  if (ec) return make_error("cannot write " + path.string() + ": " + ec.message());
  return {};
}

std::optional<CalibratedPlan> find_plan(const fs::path& model_dir, const ServerOptions& options, std::vector<std::string>& warnings,
                                        fs::path* found_at) {
  const fs::path path = plan_path(model_dir, options);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  const auto size = fs::file_size(path, ec);
  if (ec || size > kMaxPlanBytes) {
    warnings.push_back("calibrated plan " + path.string() + " ignored: unreadable or larger than 64 KiB (run --calibrate again)");
    return std::nullopt;
  }
  auto plan = parse_plan(read_small(path, kMaxPlanBytes));
  if (!plan) {
    warnings.push_back("calibrated plan " + path.string() + " ignored: " + plan.message() + " (run --calibrate again)");
    return std::nullopt;
  }
  if (plan->model_key != model_key(model_dir) || plan->machine_key != machine_key(options)) {
    warnings.push_back("calibrated plan " + path.string() + " ignored: it was made for another " +
                       (plan->model_key != model_key(model_dir) ? "model" : "machine or backend") + " (run --calibrate again)");
    return std::nullopt;
  }
  if (found_at) *found_at = path;
  return std::move(*plan);
}

std::string apply_plan(const CalibratedPlan& plan, const std::set<std::string>& given, ServerOptions& o) {
  std::string applied;
  auto note = [&](const std::string& what) { applied += (applied.empty() ? "" : ", ") + what; };
  if (plan.parallel > 0 && !given.count("parallel")) {
    o.parallel = plan.parallel;
    note("parallel " + std::to_string(plan.parallel));
  }
  if (plan.prefill_size > 0 && !given.count("prefill-size")) {
    o.prefill_size = plan.prefill_size;
    note("prefill-size " + std::to_string(plan.prefill_size));
  }
  if (plan.expert_cache_mb > 0 && !given.count("expert-cache-mb")) {
    o.expert_cache_mb = plan.expert_cache_mb;
    note("expert-cache-mb " + std::to_string(plan.expert_cache_mb));
  }
  if (plan.gpu_layers >= 0 && o.gpu_layers == "auto") {  // the user asked for auto: the measured choice
    o.gpu_layers = std::to_string(plan.gpu_layers);
    note("gpu-layers " + o.gpu_layers);
  }
  return applied.empty() ? "nothing (every choice was given)" : applied;
}

}  // namespace sluice::server
