#pragma once
// JSON Schema `pattern` → the JSON string whose decoded text the pattern matches (searched, as
// JSON Schema does: unanchored ends match anything). The subset compiled exactly: literals and
// escapes, `.`, classes `[...]` / `[^...]` with ASCII ranges, \d \w \s and their negations, groups
// `(...)` / `(?:...)`, alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms too), ^ and $ at
// the ends. Anything else (backreferences, lookaround, \b, \p{...}, anchors inside) is an error.
//
// What is generated is narrowed where the JSON or the regex dialects could disagree: negated sets
// (`[^a]`, \D, \W, \S) write ASCII only (a Unicode digit is \d to Python but not to ECMAScript),
// control characters only as \t \n \r \b \f escapes, and no \uXXXX escapes.
#include <string_view>

#include "constrain/grammar.h"
#include "constrain/json_lexical.h"

namespace sluice::constrain {

struct PatternLimits {
  std::size_t max_length = 1000;  // characters of pattern
  int max_repeat = 256;           // the largest {n,m} count
  int max_depth = 32;             // nested groups
};

// The fragment for a whole JSON string (quotes included) matching `pattern`.
Result<Frag> json_pattern_string(GrammarBuilder& b, std::string_view pattern, const PatternLimits& limits = {});

}  // namespace sluice::constrain
