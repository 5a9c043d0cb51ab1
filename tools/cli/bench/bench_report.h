#pragma once
// The result file and its markdown view: {"machine": {...}, "model": {...}, "rows": [...]} written
// with RapidJSON, one markdown table row per matrix row, and the key that matches rows of two files.
#include <string>

#include <rapidjson/document.h>

#include "util/result.h"

namespace sluice::cli::bench {

Status write_json_file(const std::string& path, const rapidjson::Document& doc);
Result<rapidjson::Document> read_result_file(const std::string& path);

// The markdown table of a file's rows (stdout of a matrix run).
std::string markdown_table(const rapidjson::Value& rows);

// What identifies a row across files: backend, gpu layers, threads, KV codec, expert store, ctx.
std::string row_key(const rapidjson::Value& row);

// Formatting shared by the tables: a number (times `times`) with `decimals`, or "–" for null/absent.
std::string cell(const rapidjson::Value& row, const char* field, int decimals, double times = 1.0);

}  // namespace sluice::cli::bench
