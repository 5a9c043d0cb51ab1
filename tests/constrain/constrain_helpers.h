#pragma once
// Shared by the constrain tests: compile a schema from text, and run whole strings through a
// matcher byte by byte.
#include <memory>
#include <string>

#include "constrain/json_schema.h"
#include "constrain/matcher.h"
#include "util/json.h"

namespace sluice::constrain::testing {

inline Result<Grammar> grammar_from(const std::string& schema_text) {
  auto doc = json::parse(schema_text, "schema");
  if (!doc) return doc.error();
  return compile_json_schema(*doc);
}

// A one-token-per-byte vocabulary (ids 0..255) plus a stop token 256: whole strings are checked
// exactly, byte by byte.
inline std::shared_ptr<const VocabIndex> byte_vocab() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  bytes.emplace_back("<eos>");
  return std::make_shared<VocabIndex>(std::move(bytes), std::vector<int32_t>{256});
}

// Whether `text` is a whole output of the grammar.
inline bool accepts(const Grammar& g, const std::string& text) {
  auto compiled = std::make_shared<CompiledGrammar>(g, byte_vocab());
  Matcher m(compiled);
  if (!text.empty() && !m.accept_bytes(text)) return false;
  return m.complete();
}

}  // namespace sluice::constrain::testing
