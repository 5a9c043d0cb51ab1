#pragma once
// Reading the tokenizer goldens (HF tokenizers 0.23 output) into plain structs.
#include <cstdint>
#include <string>
#include <vector>

#include "reference.h"
#include "util/json.h"

namespace sluice::test {

struct TokenizerCase {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;  // empty where the golden has none
  std::string decoded;
};

inline std::vector<TokenizerCase> load_tokenizer_cases(const std::string& relative) {
  std::vector<TokenizerCase> cases;
  auto doc = json::parse_file(reference_path(relative));
  EXPECT_TRUE(doc.ok()) << (doc.ok() ? "" : doc.message());
  if (!doc.ok() || !doc->IsArray()) return cases;
  for (const auto& entry : doc->GetArray()) {
    TokenizerCase c;
    // Lengths are taken explicitly: texts may hold NUL bytes.
    c.text = std::string(entry["text"].GetString(), entry["text"].GetStringLength());
    for (const auto& id : entry["ids"].GetArray()) c.ids.push_back(id.GetInt());
    if (entry.HasMember("tokens"))
      for (const auto& token : entry["tokens"].GetArray()) c.tokens.emplace_back(token.GetString(), token.GetStringLength());
    c.decoded = std::string(entry["decoded"].GetString(), entry["decoded"].GetStringLength());
    cases.push_back(std::move(c));
  }
  return cases;
}

// Short printable label for a golden text in failure messages.
inline std::string label(const std::string& text) { return text.size() > 40 ? text.substr(0, 40) + "..." : text; }

}  // namespace sluice::test
