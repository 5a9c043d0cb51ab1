#pragma once
// UTF-8 and Unicode-property helpers shared by the tokenizer pipeline. The properties follow Rust's
// `char` methods, because HF tokenizers (our reference) is written in Rust.
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::tokenizer {

// Decodes the code point starting at text[pos]; advances pos. Invalid bytes decode as U+FFFD, one byte each.
char32_t next_code_point(std::string_view text, std::size_t& pos);
void append_utf8(std::string& out, char32_t cp);
std::size_t utf8_length(unsigned char lead);  // 1..4 from the lead byte; 1 for stray continuation bytes

// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

bool is_whitespace(char32_t cp);   // Unicode White_Space (Rust char::is_whitespace)
bool is_numeric(char32_t cp);      // Nd, Nl, No (Rust char::is_numeric)
bool is_alphanumeric(char32_t cp); // L* or N* (Rust char::is_alphanumeric)
bool is_punctuation(char32_t cp);  // ASCII punctuation or Unicode P*

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace sluice::tokenizer
