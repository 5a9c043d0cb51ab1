#pragma once
// Shared helpers for the chat-template tests: the fixed clock of the goldens and a render shortcut.
#include <chrono>
#include <ctime>
#include <string>

#include <rapidjson/document.h>

#include "chat/template.h"

namespace sluice::test {

// The goldens were rendered with strftime_now fixed at 2026-11-22T09:30:00 (local time).
inline std::chrono::system_clock::time_point golden_clock() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 22;
  tm.tm_hour = 9;
  tm.tm_min = 30;
  tm.tm_isdst = -1;
  return std::chrono::system_clock::from_time_t(std::mktime(&tm));
}

// Renders `source` with `variables_json`; returns the text or "ERROR: <message>".
inline std::string render_or_error(const std::string& source, const std::string& variables_json = "{}") {
  auto t = chat::Template::parse(source);
  if (!t) return "ERROR: " + t.message();
  rapidjson::Document vars;
  vars.Parse(variables_json.c_str());
  auto r = t->render(vars, golden_clock());
  if (!r) return "ERROR: " + r.message();
  return *r;
}

}  // namespace sluice::test
