#pragma once
// Splits template source into tokens, applying Jinja2's whitespace rules as the environment
// transformers uses sets them: trim_blocks, lstrip_blocks, `-`/`+` markers, no trailing newline.
#include <string>
#include <string_view>
#include <vector>

namespace sluice::chat {

enum class TokenType { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Operator, End };

struct Token {
  TokenType type;
  std::string text;  // data text, name, operator, decoded string literal, or number spelling
  int line = 1;
};

// Throws TemplateError on a lexical error (unterminated tag, string or comment).
std::vector<Token> tokenize(std::string_view source);

}  // namespace sluice::chat
