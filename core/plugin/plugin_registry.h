#pragma once
// Finding and loading plugins: every `sluice-*.so` in the plugin directory (or a path given
// directly) is opened, its entry symbol called and its descriptor checked (ABI major, struct sizes,
// kind, required functions, probe). A plugin that fails any check is recorded as skipped with the
// reason; the host carries on without it.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "sluice/backend.h"
#include "sluice/expertstore.h"
#include "sluice/kvcodec.h"
#include "util/result.h"

namespace sluice {

struct PluginRecord {
  std::string name;
  std::string kind;     // "backend" | "kvcodec" | "expertstore" | "unknown"
  std::string version;
  std::string abi;      // the plugin ABI it was built for, "2.0"
  std::string path;
  std::string status;   // "loaded" or "skipped: <reason>"
  bool loaded = false;
  const sl_plugin_descriptor* descriptor = nullptr;  // when loaded
};

class PluginRegistry {
 public:
  PluginRegistry();
  ~PluginRegistry();
  PluginRegistry(const PluginRegistry&) = delete;
  PluginRegistry& operator=(const PluginRegistry&) = delete;

  // Scans a directory for sluice-*.so (sorted by name). Missing directory → nothing found.
  void scan(const std::filesystem::path& dir);
  // Loads one plugin file; the record says whether it loaded.
  const PluginRecord& load_file(const std::filesystem::path& path);

  const std::vector<PluginRecord>& records() const { return records_; }
  // The loaded plugin of a kind with that name, or nullptr.
  const PluginRecord* find(sl_plugin_kind kind, const std::string& name) const;
  std::vector<const PluginRecord*> loaded_of_kind(sl_plugin_kind kind) const;

  // The directory plugins are looked for by default: next to the running executable (its bin/),
  // and ../lib beside it (where the build puts them).
  static std::vector<std::filesystem::path> default_dirs();

 private:
  std::vector<PluginRecord> records_;
  std::vector<void*> handles_;
};

// "2.0" for SL_ABI_VERSION_OF(2, 0).
std::string abi_text(uint32_t version);
const char* kind_name(uint32_t kind);

// Does a table written with `struct_size` bytes contain `member`? (Tables only grow at the end.)
template <class Table, class Member>
bool table_has(const Table* table, Member Table::*member) {
  const auto offset = reinterpret_cast<std::size_t>(&(static_cast<const Table*>(nullptr)->*member));
  return table != nullptr && table->struct_size >= offset + sizeof(Member) && table->*member != nullptr;
}

}  // namespace sluice
