#include "tokenizer/unicode.h"

#include <utf8proc.h>

namespace sluice::tokenizer {

std::size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Length of the valid UTF-8 sequence at text[pos], or 0 when it is not valid (Unicode 3.9, table 3-7).
static std::size_t valid_sequence_length(std::string_view text, std::size_t pos) {
  auto byte = [&](std::size_t i) -> int { return pos + i < text.size() ? static_cast<unsigned char>(text[pos + i]) : -1; };
  int b0 = byte(0);
  if (b0 < 0x80) return 1;
  auto in = [](int b, int lo, int hi) { return b >= lo && b <= hi; };
  if (in(b0, 0xC2, 0xDF)) return in(byte(1), 0x80, 0xBF) ? 2 : 0;
  if (in(b0, 0xE0, 0xEF)) {
    int lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    return in(byte(1), lo, hi) && in(byte(2), 0x80, 0xBF) ? 3 : 0;
  }
  if (in(b0, 0xF0, 0xF4)) {
    int lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    return in(byte(1), lo, hi) && in(byte(2), 0x80, 0xBF) && in(byte(3), 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

// Bytes consumed by one U+FFFD at an invalid position: the maximal prefix of a valid sequence, at least 1.
static std::size_t invalid_run_length(std::string_view text, std::size_t pos) {
  auto byte = [&](std::size_t i) -> int { return pos + i < text.size() ? static_cast<unsigned char>(text[pos + i]) : -1; };
  int b0 = byte(0);
  auto in = [](int b, int lo, int hi) { return b >= lo && b <= hi; };
  int need = 0, lo = 0x80, hi = 0xBF;
  if (in(b0, 0xC2, 0xDF)) need = 1;
  else if (in(b0, 0xE0, 0xEF)) { need = 2; if (b0 == 0xE0) lo = 0xA0; if (b0 == 0xED) hi = 0x9F; }
  else if (in(b0, 0xF0, 0xF4)) { need = 3; if (b0 == 0xF0) lo = 0x90; if (b0 == 0xF4) hi = 0x8F; }
  else return 1;
  std::size_t n = 1;
  if (!in(byte(1), lo, hi)) return n;
  ++n;
  for (int i = 2; i <= need; ++i) {
    if (!in(byte(i), 0x80, 0xBF)) return n;
    ++n;
  }
  return n;
}

char32_t next_code_point(std::string_view text, std::size_t& pos) {
  std::size_t len = valid_sequence_length(text, pos);
  if (len == 0) {
    ++pos;
    return 0xFFFD;
  }
  auto b = [&](std::size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(text[pos + i])); };
  char32_t cp;
  switch (len) {
    case 1: cp = b(0); break;
    case 2: cp = ((b(0) & 0x1F) << 6) | (b(1) & 0x3F); break;
    case 3: cp = ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F); break;
    default: cp = ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F); break;
  }
  pos += len;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    std::size_t len = valid_sequence_length(bytes, pos);
    if (len > 0) {
      out.append(bytes.substr(pos, len));
      pos += len;
    } else {
      out.append(kReplacementChar);
      pos += invalid_run_length(bytes, pos);
    }
  }
  return out;
}

bool is_valid_utf8(std::string_view bytes) {
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    std::size_t len = valid_sequence_length(bytes, pos);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

bool is_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

static utf8proc_category_t category(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool is_numeric(char32_t cp) {
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(char32_t cp) {
  auto c = category(cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || is_numeric(cp);
}

bool is_punctuation(char32_t cp) {
  if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) || (cp >= 0x7B && cp <= 0x7E);
  auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

}  // namespace sluice::tokenizer
