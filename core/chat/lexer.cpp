// Tokenizer for Jinja2 syntax. Whitespace handling follows Jinja2 3.1's lexer:
//  * newlines (\r\n, \r, \n) are normalized to \n and one trailing newline is dropped;
//  * `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` all after;
//  * trim_blocks removes the first \n after `%}` and `#}` (not after `}}`); `+%}` keeps it;
//  * lstrip_blocks removes spaces/tabs between a line start and `{%` / `{#` (`{%+` keeps them).
#include "chat/lexer.h"

#include <cctype>

#include "chat/value.h"

namespace sluice::chat {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalize_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

std::string rstrip_ws(const std::string& s) {
  std::size_t end = s.size();
  while (end > 0 && is_space(s[end - 1])) --end;
  return s.substr(0, end);
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) {
      std::size_t idx = find_tag_start(pos_);
      if (idx == std::string::npos) {
        emit_data(s_.substr(pos_));
        pos_ = s_.size();
        break;
      }
      char kind = s_[idx + 1];
      char sign = idx + 2 < s_.size() && (s_[idx + 2] == '-' || s_[idx + 2] == '+') ? s_[idx + 2] : 0;
      std::string text = s_.substr(pos_, idx - pos_);
      emit_data(apply_left_strip(text, sign, kind != '{'));
      pos_ = idx + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        lex_comment();
      } else if (kind == '%' && try_raw()) {
        continue;
      } else {
        lex_tag(kind == '%');
      }
    }
    tokens_.push_back({TokenType::End, "", line_});
    return std::move(tokens_);
  }

 private:
  std::size_t find_tag_start(std::size_t from) const {
    for (std::size_t i = from; i + 1 < s_.size(); ++i) {
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // The text before a tag: `-` strips all trailing whitespace; otherwise lstrip_blocks removes the
  // indentation of a block/comment tag that starts its line.
  std::string apply_left_strip(const std::string& text, char sign, bool block_like) {
    if (sign == '-') return rstrip_ws(text);
    if (sign == '+' || !block_like) return text;
    std::size_t nl = text.rfind('\n');
    std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos > 0 || line_starting_) {
      bool all_ws = l_pos < text.size();
      for (std::size_t i = l_pos; i < text.size(); ++i)
        if (!is_space(text[i])) all_ws = false;
      if (all_ws) return text.substr(0, l_pos);
    }
    return text;
  }

  void emit_data(std::string text) {
    for (char c : text)
      if (c == '\n') ++line_;
    if (!text.empty()) tokens_.push_back({TokenType::Data, std::move(text), line_});
  }

  // After a closing `%}` or `#}` at pos_: `-` eats all whitespace, trim_blocks eats one newline.
  void after_close(char sign) {
    std::size_t start = pos_;
    if (sign == '-') {
      while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
    } else if (sign != '+' && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
    }
    for (std::size_t i = start; i < pos_; ++i)
      if (s_[i] == '\n') ++line_;
    line_starting_ = pos_ > 0 && s_[pos_ - 1] == '\n';
  }

  void lex_comment() {
    std::size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) fail("TemplateSyntaxError: missing end of comment tag (line " + std::to_string(line_) + ")");
    char sign = end > pos_ && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : 0;
    for (std::size_t i = pos_; i < end; ++i)
      if (s_[i] == '\n') ++line_;
    pos_ = end + 2;
    after_close(sign);
  }

  std::size_t skip_ws(std::size_t p) const {
    while (p < s_.size() && is_space(s_[p])) ++p;
    return p;
  }

  bool word_at(std::size_t p, std::string_view w) const {
    if (s_.compare(p, w.size(), w) != 0) return false;
    std::size_t e = p + w.size();
    return e >= s_.size() || !(std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_');
  }

  // `{% raw %}` ... `{% endraw %}`: the content is data, untouched except for the whitespace rules
  // of the two tags. (Jinja does not apply trim_blocks to the `raw` opening tag.)
  bool try_raw() {
    std::size_t p = skip_ws(pos_);
    if (!word_at(p, "raw")) return false;
    p = skip_ws(p + 3);
    char open_sign = 0;
    if (s_.compare(p, 3, "-%}") == 0) {
      open_sign = '-';
      p += 3;
    } else if (s_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    pos_ = p;
    after_close(open_sign == '-' ? '-' : '+');
    // Find the matching endraw tag.
    std::size_t search = pos_;
    while (true) {
      std::size_t idx = s_.find("{%", search);
      if (idx == std::string::npos) fail("TemplateSyntaxError: missing end of raw directive");
      std::size_t q = idx + 2;
      char sign = q < s_.size() && (s_[q] == '-' || s_[q] == '+') ? s_[q] : 0;
      if (sign) ++q;
      q = skip_ws(q);
      if (!word_at(q, "endraw")) {
        search = idx + 2;
        continue;
      }
      q = skip_ws(q + 6);
      char close_sign = 0;
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+') && s_.compare(q + 1, 2, "%}") == 0) {
        close_sign = s_[q];
        ++q;
      }
      if (s_.compare(q, 2, "%}") != 0) {
        search = idx + 2;
        continue;
      }
      std::string text = s_.substr(pos_, idx - pos_);
      emit_data(apply_left_strip(text, sign, true));
      pos_ = q + 2;
      after_close(close_sign);
      return true;
    }
  }

  void lex_tag(bool block) {
    tokens_.push_back({block ? TokenType::BlockBegin : TokenType::VarBegin, "", line_});
    std::vector<char> balance;
    while (true) {
      while (pos_ < s_.size() && is_space(s_[pos_])) {
        if (s_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= s_.size()) fail("TemplateSyntaxError: unexpected end of template inside a tag (line " + std::to_string(line_) + ")");
      if (balance.empty()) {
        const char* close = block ? "%}" : "}}";
        if (s_[pos_] == '-' && s_.compare(pos_ + 1, 2, close) == 0) {
          pos_ += 3;
          tokens_.push_back({block ? TokenType::BlockEnd : TokenType::VarEnd, "", line_});
          after_close('-');
          return;
        }
        if (block && s_[pos_] == '+' && s_.compare(pos_ + 1, 2, close) == 0) {
          pos_ += 3;
          tokens_.push_back({TokenType::BlockEnd, "", line_});
          after_close('+');
          return;
        }
        if (s_.compare(pos_, 2, close) == 0) {
          pos_ += 2;
          tokens_.push_back({block ? TokenType::BlockEnd : TokenType::VarEnd, "", line_});
          if (block) {
            after_close(0);
          } else {
            line_starting_ = false;
          }
          return;
        }
      }
      char c = s_[pos_];
      if (c == '\'' || c == '"') {
        lex_string(c);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t start = pos_;
        while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
        tokens_.push_back({TokenType::Name, s_.substr(start, pos_ - start), line_});
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                     ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
        std::string op;
        for (const char* o : kOps) {
          if (s_.compare(pos_, std::char_traits<char>::length(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (op.empty()) fail(std::string("TemplateSyntaxError: unexpected char '") + c + "' (line " + std::to_string(line_) + ")");
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty() || balance.back() != op[0])
            fail("TemplateSyntaxError: unexpected '" + op + "' (line " + std::to_string(line_) + ")");
          balance.pop_back();
        }
        pos_ += op.size();
        tokens_.push_back({TokenType::Operator, op, line_});
      }
    }
  }

  void lex_number() {
    std::size_t start = pos_;
    auto digits = [&] {
      while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
    };
    digits();
    bool is_float = false;
    bool after_dot = !tokens_.empty() && tokens_.back().type == TokenType::Operator && tokens_.back().text == ".";
    if (!after_dot && pos_ + 1 < s_.size() && s_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
      ++pos_;
      digits();
      is_float = true;
    }
    if (!after_dot && pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      std::size_t p = pos_ + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) {
        pos_ = p;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (std::size_t i = start; i < pos_; ++i)
      if (s_[i] != '_') text += s_[i];
    tokens_.push_back({is_float ? TokenType::Float : TokenType::Integer, text, line_});
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // String literals decode like Python's unicode-escape (Jinja's choice): \n \t \\ \' \xNN \uNNNN ...
  void lex_string(char quote) {
    int start_line = line_;
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("TemplateSyntaxError: unterminated string (line " + std::to_string(start_line) + ")");
      char c = s_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c == '\n') ++line_;
      if (c != '\\' || pos_ + 1 >= s_.size()) {
        out += c;
        ++pos_;
        continue;
      }
      char e = s_[pos_ + 1];
      pos_ += 2;
      auto hex = [&](int n) -> unsigned {
        unsigned v = 0;
        for (int i = 0; i < n; ++i) {
          if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_])))
            fail("TemplateSyntaxError: truncated \\x/\\u escape in string");
          char h = s_[pos_++];
          v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        return v;
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': ++line_; break;  // line continuation
        case 'x': append_utf8(out, hex(2)); break;
        case 'u': append_utf8(out, hex(4)); break;
        case 'U': append_utf8(out, hex(8)); break;
        default:
          if (e >= '0' && e <= '7') {
            unsigned v = e - '0';
            for (int i = 0; i < 2 && pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '7'; ++i) v = v * 8 + (s_[pos_++] - '0');
            append_utf8(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    tokens_.push_back({TokenType::String, std::move(out), start_line});
  }

  std::string s_;
  std::size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace sluice::chat
