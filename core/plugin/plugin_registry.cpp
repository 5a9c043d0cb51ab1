#include "plugin/plugin_registry.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace sluice {
namespace {

// The smallest tables this host accepts: every member of ABI 2.0 present.
constexpr uint32_t kMinDescriptorSize = offsetof(sl_plugin_descriptor, api) + sizeof(void*);
constexpr uint32_t kMinBackendApiSize = offsetof(sl_backend_api, plan_destroy) + sizeof(void*);
constexpr uint32_t kMinKvcodecApiSize = offsetof(sl_kvcodec_api, decode) + sizeof(void*);
constexpr uint32_t kMinExpertstoreApiSize = offsetof(sl_expertstore_api, get_stats) + sizeof(void*);

// Returns "" when the table is usable, else why not.
std::string check_api(const sl_plugin_descriptor* d) {
  const auto size = *static_cast<const uint32_t*>(d->api);
  switch (d->kind) {
    case SL_PLUGIN_BACKEND: {
      if (size < kMinBackendApiSize) return "backend table too small (" + std::to_string(size) + " bytes)";
      const auto* t = static_cast<const sl_backend_api*>(d->api);
      if (!t->device_count || !t->device_info || !t->create || !t->destroy || !t->get_device_info || !t->alloc ||
          !t->wrap_host || !t->free || !t->upload || !t->download || !t->download_begin || !t->download_wait ||
          !t->synchronize || !t->kv_create || !t->kv_destroy || !t->kv_copy_page || !t->supports_node || !t->graph_compute)
        return "backend table lacks required functions";
      if ((t->plan_create != nullptr) != (t->plan_compute != nullptr) || (t->plan_create != nullptr) != (t->plan_destroy != nullptr))
        return "backend table has some of plan_create, plan_compute and plan_destroy but not all";
      return "";
      return "";
    }
    case SL_PLUGIN_KVCODEC: {
      if (size < kMinKvcodecApiSize) return "kvcodec table too small (" + std::to_string(size) + " bytes)";
      const auto* t = static_cast<const sl_kvcodec_api*>(d->api);
      if (!t->create || !t->destroy || !t->get_format || !t->encode || !t->decode)
        return "kvcodec table lacks required functions";
      return "";
    }
    case SL_PLUGIN_EXPERTSTORE: {
      if (size < kMinExpertstoreApiSize)
        return "expertstore table too small (" + std::to_string(size) + " bytes)";
      const auto* t = static_cast<const sl_expertstore_api*>(d->api);
      if (!t->create || !t->destroy || !t->acquire || !t->release || !t->get_stats)
        return "expertstore table lacks required functions";
      return "";
    }
    default:
      return "unknown plugin kind " + std::to_string(d->kind);
  }
}

}  // namespace

std::string abi_text(uint32_t version) {
  return std::to_string(SL_ABI_VERSION_MAJOR(version)) + "." + std::to_string(SL_ABI_VERSION_MINOR(version));
}

const char* kind_name(uint32_t kind) {
  switch (kind) {
    case SL_PLUGIN_BACKEND: return "backend";
    case SL_PLUGIN_KVCODEC: return "kvcodec";
    case SL_PLUGIN_EXPERTSTORE: return "expertstore";
    default: return "unknown";
  }
}

PluginRegistry::PluginRegistry() = default;

PluginRegistry::~PluginRegistry() {
  // Plugins stay mapped until the registry goes: objects they created must be destroyed first.
  // Under LeakSanitizer, unloading hides the plugin's frames in reports, so keep them then.
  if (std::getenv("SLUICE_NO_DLCLOSE")) return;
  for (void* h : handles_) dlclose(h);
}

void PluginRegistry::scan(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return;
  std::vector<std::filesystem::path> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("sluice-", 0) == 0 && entry.path().extension() == ".so") found.push_back(entry.path());
  }
  std::sort(found.begin(), found.end());
  for (const auto& p : found) {
    const auto canonical = std::filesystem::weakly_canonical(p, ec).string();
    bool seen = std::any_of(records_.begin(), records_.end(), [&](const PluginRecord& r) { return r.path == canonical; });
    if (!seen) load_file(canonical);
  }
}

const PluginRecord& PluginRegistry::load_file(const std::filesystem::path& path) {
  PluginRecord record;
  record.path = path.string();
  record.name = path.stem().string();
  record.kind = "unknown";
  auto skip = [&](const std::string& why) -> const PluginRecord& {
    record.status = "skipped: " + why;
    records_.push_back(record);
    return records_.back();
  };
  // The reason is built (from the descriptor) before the library is unmapped: the argument is
  // evaluated first, and `d` points into the library.
  auto refuse = [&](void* h, const std::string& why) -> const PluginRecord& {
    dlclose(h);
    return skip(why);
  };

  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    return skip(std::string("cannot load: ") + (e ? e : "unknown error"));
  }
  auto entry = reinterpret_cast<sl_plugin_entry_fn>(dlsym(handle, SL_PLUGIN_ENTRY_SYMBOL));
  if (!entry) {
    return refuse(handle, std::string("no entry symbol ") + SL_PLUGIN_ENTRY_SYMBOL);
  }
  const sl_plugin_descriptor* d = entry();
  if (!d) {
    return refuse(handle, "entry returned no descriptor");
  }
  if (d->struct_size < kMinDescriptorSize) {
    return refuse(handle, "descriptor too small (" + std::to_string(d->struct_size) + " bytes)");
  }
  record.kind = kind_name(d->kind);
  if (d->name) record.name = d->name;
  if (d->version) record.version = d->version;
  // ABI 1 descriptors held their major alone where abi_version now is.
  const uint32_t major = d->abi_version < 0x10000u ? d->abi_version : SL_ABI_VERSION_MAJOR(d->abi_version);
  record.abi = d->abi_version < 0x10000u ? std::to_string(major) : abi_text(d->abi_version);
  if (major != SL_ABI_MAJOR) {
    return refuse(handle, "built for plugin ABI " + record.abi + "; this host runs ABI " + abi_text(SL_ABI_VERSION) +
                              " and loads plugins of major version " + std::to_string(SL_ABI_MAJOR) + " only (rebuild it against this host's headers)");
  }
  if (!d->name || !d->api) {
    return refuse(handle, "descriptor lacks name or function table");
  }
  if (auto why = check_api(d); !why.empty()) {
    return refuse(handle, why);
  }
  if (find(static_cast<sl_plugin_kind>(d->kind), d->name)) {
    return refuse(handle, std::string("another ") + record.kind + " named '" + d->name + "' is already loaded");
  }
  if (d->probe) {
    sl_error err{};
    if (d->probe(&err) != SL_OK) {
      return refuse(handle, std::string("probe failed: ") + (err.message[0] ? err.message : "cannot run here"));
    }
  }
  handles_.push_back(handle);
  record.loaded = true;
  record.status = "loaded";
  record.descriptor = d;
  records_.push_back(record);
  return records_.back();
}

const PluginRecord* PluginRegistry::find(sl_plugin_kind kind, const std::string& name) const {
  for (const auto& r : records_)
    if (r.loaded && r.descriptor->kind == static_cast<uint32_t>(kind) && r.name == name) return &r;
  return nullptr;
}

std::vector<const PluginRecord*> PluginRegistry::loaded_of_kind(sl_plugin_kind kind) const {
  std::vector<const PluginRecord*> out;
  for (const auto& r : records_)
    if (r.loaded && r.descriptor->kind == static_cast<uint32_t>(kind)) out.push_back(&r);
  return out;
}

std::vector<std::filesystem::path> PluginRegistry::default_dirs() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  auto bin = exe.parent_path();
  return {bin, bin.parent_path() / "lib"};
}

}  // namespace sluice
