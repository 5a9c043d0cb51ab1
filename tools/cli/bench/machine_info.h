#pragma once
// The machine a benchmark ran on, recorded in every result file: CPU model and cores, memory, the
// compute devices every backend plugin offers (name, vendor, driver, memory), the commit the
// program was built from (or the source tree's HEAD when run inside it), the date and the load.
#include <string>

#include <rapidjson/document.h>

namespace sluice::cli::bench {

// A JSON object; plugin_dir "" = the default plugin directories.
rapidjson::Value machine_record(const std::string& plugin_dir, rapidjson::Document::AllocatorType& alloc);

// The program's source commit: `git rev-parse HEAD` of the source tree when present (with
// "-dirty" when tracked files differ), else the commit recorded at configure time, else "unknown".
std::string source_commit();

// "2026-11-23T14:05:00Z"
std::string utc_now();

}  // namespace sluice::cli::bench
