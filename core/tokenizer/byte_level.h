#pragma once
// GPT-2's byte <-> printable-character table: every byte maps to one visible code point so byte-level
// BPE vocabularies are plain strings (e.g. ' ' -> 'Ġ', '\n' -> 'Ċ').
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::tokenizer {

// The UTF-8 text of the character standing for `byte`.
const std::string& byte_to_char(unsigned char byte);
// The byte a character stands for, if it is one of the 256.
std::optional<unsigned char> char_to_byte(char32_t cp);
// Maps every byte of `text` to its character.
std::string bytes_to_chars(std::string_view text);

}  // namespace sluice::tokenizer
