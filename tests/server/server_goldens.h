#pragma once
// The Jinja2 renders the server tests compare with: JSON files of tests/server/data, made by the
// scripts beside them.
#include <string>

#include "reference.h"
#include "util/file_io.h"
#include "util/json.h"

namespace sluice::server::test_fakes {

// tests/server/data/NAME parsed; an empty document where it cannot be read (the tests that use it then
// fail on its missing members).
inline rapidjson::Document load_golden(const std::string& name) {
  rapidjson::Document d;
  auto text = read_text_file(test::source_path("tests/server/data/" + name));
  if (text) d.Parse(text->c_str());
  return d;
}

}  // namespace sluice::server::test_fakes
