#include "tokenizer/pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/unicode.h"

namespace sluice::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

Result<Regex> Regex::compile(const std::string& pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                                   &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return make_error("regex '" + pattern + "' does not compile at offset " + std::to_string(error_offset) + ": " +
                      reinterpret_cast<const char*>(message));
  }
  auto owned = std::make_shared<Code>();
  owned->code = code;
  owned->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // interpreter fallback is correct, just slower
  Regex regex;
  regex.code_ = std::move(owned);
  return regex;
}

std::vector<Span> Regex::find_all(std::string_view subject) const {
  std::vector<Span> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  auto* bytes = reinterpret_cast<PCRE2_SPTR>(subject.data());
  std::size_t start = 0;
  while (start <= subject.size()) {
    int rc = code_->jit ? pcre2_jit_match(code_->code, bytes, subject.size(), start, PCRE2_NO_UTF_CHECK, data, nullptr)
                        : PCRE2_ERROR_JIT_STACKLIMIT;
    // The interpreter keeps its backtracking state on the heap, so it takes over where the JIT's
    // fixed stack runs out (or where JIT compilation was unavailable).
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(code_->code, bytes, subject.size(), start, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc < 0) break;  // no further match (or a resource limit: the rest stays unmatched)
    PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    std::size_t begin = ovector[0], end = ovector[1];
    matches.emplace_back(begin, end);
    if (end > begin) {
      start = end;
    } else {  // empty match: step over one character, as Oniguruma's iterator does
      if (end >= subject.size()) break;
      start = end + utf8_length(static_cast<unsigned char>(subject[end]));
    }
  }
  pcre2_match_data_free(data);
  return matches;
}

Result<Pattern> Pattern::from_json(const rapidjson::Value& value) {
  if (value.IsString()) return literal(value.GetString());  // some writers store a bare string
  if (!value.IsObject()) return make_error("pattern must be an object {\"String\"|\"Regex\": ...}");
  if (value.HasMember("String") && value["String"].IsString()) return literal(value["String"].GetString());
  if (value.HasMember("Regex") && value["Regex"].IsString()) {
    auto regex = Regex::compile(value["Regex"].GetString());
    if (!regex) return regex.error();
    return from_regex(std::move(regex).value());
  }
  return make_error("pattern must hold \"String\" or \"Regex\"");
}

Pattern Pattern::literal(std::string text) {
  Pattern pattern;
  pattern.literal_ = std::move(text);
  return pattern;
}

Pattern Pattern::from_regex(Regex regex) {
  Pattern pattern;
  pattern.regex_ = std::make_shared<const Regex>(std::move(regex));
  return pattern;
}

std::vector<Span> Pattern::find_all(std::string_view subject) const {
  if (regex_) return regex_->find_all(subject);
  std::vector<Span> matches;
  if (literal_.empty()) return matches;
  for (std::size_t pos = subject.find(literal_); pos != std::string_view::npos; pos = subject.find(literal_, pos + literal_.size()))
    matches.emplace_back(pos, pos + literal_.size());
  return matches;
}

std::string Pattern::replace_all(std::string_view subject, std::string_view content) const {
  std::string out;
  out.reserve(subject.size());
  std::size_t last = 0;
  for (auto [begin, end] : find_all(subject)) {
    out.append(subject.substr(last, begin - last));
    out.append(content);
    last = end;
  }
  out.append(subject.substr(last));
  return out;
}

}  // namespace sluice::tokenizer
