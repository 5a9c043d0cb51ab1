#pragma once
// The `pattern` of Split pre-tokenizers and Replace normalizers/decoders: {"String": s} (literal) or
// {"Regex": r}. HF compiles regexes with Oniguruma; we use PCRE2 with UTF + UCP, which accepts the
// patterns tokenizer.json files ship (GPT-2, Llama-3, Qwen2 splitters) with the same leftmost-first meaning.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <rapidjson/document.h>

#include "util/result.h"

namespace sluice::tokenizer {

using Span = std::pair<std::size_t, std::size_t>;  // [begin, end) byte offsets

class Regex {
 public:
  static Result<Regex> compile(const std::string& pattern);
  // All non-overlapping matches, left to right. The subject must be valid UTF-8 (the tokenizer
  // guarantees it), so PCRE2's per-call UTF check, which would make this quadratic, is skipped.
  std::vector<Span> find_all(std::string_view subject) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

class Pattern {
 public:
  static Result<Pattern> from_json(const rapidjson::Value& value);
  static Pattern literal(std::string text);
  static Pattern from_regex(Regex regex);
  std::vector<Span> find_all(std::string_view subject) const;
  // Replaces every match with `content`.
  std::string replace_all(std::string_view subject, std::string_view content) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;  // set for {"Regex": ...}
};

}  // namespace sluice::tokenizer
