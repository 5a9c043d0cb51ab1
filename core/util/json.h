#pragma once
// Small helpers over RapidJSON: parse with a clear error, typed member access with defaults.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <rapidjson/document.h>

#include "util/result.h"

namespace sluice::json {

Result<rapidjson::Document> parse(std::string_view text, const std::string& what);
Result<rapidjson::Document> parse_file(const std::filesystem::path& path);

const rapidjson::Value* member(const rapidjson::Value& object, const char* name);
std::optional<double> number(const rapidjson::Value& object, const char* name);
std::optional<long long> integer(const rapidjson::Value& object, const char* name);
std::optional<bool> boolean(const rapidjson::Value& object, const char* name);
std::optional<std::string> string(const rapidjson::Value& object, const char* name);

// JSON text of a string value, quotes included (for writing JSON by hand).
std::string quote(std::string_view text);

}  // namespace sluice::json
