#pragma once
// The machine a benchmark ran on, recorded in every result file: CPU model and cores, memory, the
// compute devices every backend plugin offers (name, vendor, driver, memory), the commit the
// program was built from, the date and the load.
#include <string>

#include <rapidjson/document.h>

namespace sluice::cli::bench {

// A JSON object; plugin_dir "" = the default plugin directories.
rapidjson::Value machine_record(const std::string& plugin_dir, rapidjson::Document::AllocatorType& alloc);

// The commit the program was built from: the source tree's HEAD at build time, with "-dirty" when
// tracked files differed from it (the build then holds uncommitted changes); "unknown" outside git.
std::string source_commit();

// The 1, 5 and 15 minute load averages: "2.30 1.90 1.64".
std::string loadavg();

// "2026-11-23T14:05:00Z"
std::string utc_now();

}  // namespace sluice::cli::bench
