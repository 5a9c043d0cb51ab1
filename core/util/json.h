#pragma once
// Small helpers over RapidJSON: parse with a clear error, typed member access with defaults.
// Every parse runs under explicit limits (JsonLimits), checked in one pass with no recursion, so
// untrusted JSON (request bodies, model files, stdin) cannot exhaust the stack or stall a thread.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <rapidjson/document.h>

#include "util/result.h"

namespace sluice::json {

// Bounds on one JSON text. The defaults admit every real model file (tokenizer.json of tens of MB
// with vocab objects and merges arrays of ~10^6 entries) while stopping stack and memory abuse.
struct JsonLimits {
  std::size_t max_bytes = 256u << 20;        // the whole text
  std::size_t max_depth = 128;               // arrays/objects open at once
  std::size_t max_object_members = 1u << 22; // members of one object
  std::size_t max_array_elements = 1u << 22; // elements of one array
  std::size_t max_string_bytes = 64u << 20;  // one string or key
  std::size_t max_values = 1u << 24;         // values in the whole document (bounds the tree's memory)
};

// Failures name the text (`what`), the byte offset, and for a limit the field of JsonLimits exceeded.
Result<rapidjson::Document> parse(std::string_view text, const std::string& what);
Result<rapidjson::Document> parse(std::string_view text, const std::string& what, const JsonLimits& limits);
// Reads at most limits.max_bytes (a larger file is an error before it is read whole).
Result<rapidjson::Document> parse_file(const std::filesystem::path& path);
Result<rapidjson::Document> parse_file(const std::filesystem::path& path, const JsonLimits& limits);

const rapidjson::Value* member(const rapidjson::Value& object, const char* name);
std::optional<double> number(const rapidjson::Value& object, const char* name);
std::optional<long long> integer(const rapidjson::Value& object, const char* name);
std::optional<bool> boolean(const rapidjson::Value& object, const char* name);
std::optional<std::string> string(const rapidjson::Value& object, const char* name);

// JSON text of a string value, quotes included (for writing JSON by hand).
std::string quote(std::string_view text);
// A string value copied into a document's allocator.
rapidjson::Value text_value(std::string_view text, rapidjson::Document::AllocatorType& allocator);
// A value's JSON text, compact.
std::string serialize(const rapidjson::Value& value);

}  // namespace sluice::json
