#pragma once
// The lexical pieces of JSON text as grammar fragments: whitespace, strings (free, length-bounded,
// formats), numbers and integers within bounds, and literals. Used by the schema compiler.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "constrain/grammar.h"

namespace sluice::constrain {

using Frag = GrammarBuilder::Frag;

// Whitespace between JSON tokens: at most max_bytes of space, tab, newline, carriage return, so a
// model cannot spend its whole budget on blank space.
Frag json_whitespace(GrammarBuilder& b, int max_bytes);

// One character of a JSON string's content: an unescaped UTF-8 character (well-formed, no control
// characters, no quote or backslash) or an escape (\uXXXX outside the surrogates).
Frag json_string_char(GrammarBuilder& b);

// One well-formed UTF-8 character of two to four bytes (no surrogates, nothing past U+10FFFF).
Frag utf8_non_ascii_char(GrammarBuilder& b);

// A whole JSON string (quotes included) of min..max characters (max < 0: unbounded).
Frag json_string(GrammarBuilder& b, int min_chars, int max_chars);

// The string formats that have a simple exact grammar; nullopt for any other name.
std::optional<Frag> json_string_format(GrammarBuilder& b, std::string_view format);

// A JSON integer in [lo, hi] (nullopt: unbounded on that side); unbounded magnitudes are capped at
// max_digits digits. Empty range → nullopt from the caller's check (lo > hi).
Frag json_integer(GrammarBuilder& b, std::optional<int64_t> lo, std::optional<int64_t> hi, int max_digits);

// A JSON number (fraction and exponent optional), digits capped at max_digits per part.
Frag json_number(GrammarBuilder& b, int max_digits);

}  // namespace sluice::constrain
