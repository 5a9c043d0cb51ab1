#include <cstdint>

#include "toolcall/syntax.h"

namespace sluice::toolcall {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void append_utf8(std::string& out, uint32_t cp) {
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

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void Cursor::skip_space() {
  while (pos < text.size() && is_space(text[pos])) ++pos;
}

Cursor::Result Cursor::literal(std::string_view expected) {
  std::string_view r = rest();
  if (r.starts_with(expected)) {
    pos += expected.size();
    return kOk;
  }
  if (!at_end && r.size() < expected.size() && expected.starts_with(r)) return kMore;
  return kFail;
}

Cursor::Result Cursor::one_of(const std::vector<std::string_view>& options, std::size_t* which) {
  bool could = false;
  for (std::size_t i = 0; i < options.size(); ++i) {
    std::string_view r = rest();
    if (r.starts_with(options[i])) {
      // A longer option that this text is still a prefix of could match instead: wait for it.
      for (std::size_t j = 0; j < options.size(); ++j) {
        if (!at_end && options[j].size() > options[i].size() && options[j].starts_with(options[i]) &&
            r.size() < options[j].size() && options[j].starts_with(r))
          return kMore;
      }
      pos += options[i].size();
      if (which) *which = i;
      return kOk;
    }
    if (!at_end && r.size() < options[i].size() && options[i].starts_with(r)) could = true;
  }
  return could ? kMore : kFail;
}

Cursor::Result Cursor::json_string(std::string& out) {
  std::size_t p = pos;
  if (p >= text.size()) return at_end ? kFail : kMore;
  if (text[p] != '"') return kFail;
  ++p;
  std::string value;
  while (p < text.size()) {
    char c = text[p];
    if (c == '"') {
      pos = p + 1;
      out = std::move(value);
      return kOk;
    }
    if (static_cast<unsigned char>(c) < 0x20) return kFail;
    if (c != '\\') {
      value += c;
      ++p;
      continue;
    }
    if (p + 1 >= text.size()) break;
    char e = text[p + 1];
    switch (e) {
      case '"': value += '"'; break;
      case '\\': value += '\\'; break;
      case '/': value += '/'; break;
      case 'b': value += '\b'; break;
      case 'f': value += '\f'; break;
      case 'n': value += '\n'; break;
      case 'r': value += '\r'; break;
      case 't': value += '\t'; break;
      case 'u': {
        if (p + 6 > text.size()) return at_end ? kFail : kMore;
        uint32_t cp = 0;
        for (int i = 2; i < 6; ++i) {
          int h = hex_value(text[p + i]);
          if (h < 0) return kFail;
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // names do not need surrogate pairs
        append_utf8(value, cp);
        p += 6;
        continue;
      }
      default: return kFail;
    }
    p += 2;
  }
  return at_end ? kFail : kMore;
}

Cursor::Result Cursor::word(std::string_view allowed, std::string& out) {
  std::size_t p = pos;
  while (p < text.size() && allowed.find(text[p]) != std::string_view::npos) ++p;
  if (p == text.size() && !at_end) return kMore;  // the word may go on
  if (p == pos) return kFail;
  out.assign(text.substr(pos, p - pos));
  pos = p;
  return kOk;
}

Cursor::Result Cursor::until(std::string_view delimiter, std::string& out, std::size_t max_bytes) {
  std::string_view r = rest();
  std::size_t found = r.find(delimiter);
  if (found == std::string_view::npos || found > max_bytes) {
    if (r.size() > max_bytes + delimiter.size() || at_end) return kFail;
    return kMore;
  }
  out.assign(r.substr(0, found));
  pos += found + delimiter.size();
  return kOk;
}

Cursor::Result Cursor::skip_json_value() {
  skip_space();
  if (done()) return at_end ? kFail : kMore;
  char c = text[pos];
  if (c == '"') {
    std::string ignored;
    return json_string(ignored);
  }
  if (c == '{' || c == '[') {
    int depth = 0;
    bool in_string = false, escape = false;
    for (std::size_t p = pos; p < text.size(); ++p) {
      char x = text[p];
      if (in_string) {
        if (escape) escape = false;
        else if (x == '\\') escape = true;
        else if (x == '"') in_string = false;
      } else if (x == '"') {
        in_string = true;
      } else if (x == '{' || x == '[') {
        ++depth;
      } else if (x == '}' || x == ']') {
        if (--depth == 0) {
          pos = p + 1;
          return kOk;
        }
      }
    }
    return at_end ? kFail : kMore;
  }
  // A number or a literal: characters up to a delimiter.
  std::string ignored;
  Result r = word("0123456789+-.eEtruefalsn", ignored);
  return r;
}

Cursor::Result expect_object_start(Cursor& c) {
  c.skip_space();
  if (c.done()) return c.at_end ? Cursor::kFail : Cursor::kMore;
  return c.text[c.pos] == '{' ? Cursor::kOk : Cursor::kFail;
}

}  // namespace sluice::toolcall
