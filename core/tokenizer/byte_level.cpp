#include "tokenizer/byte_level.h"

#include "tokenizer/unicode.h"

namespace sluice::tokenizer {
namespace {

struct Tables {
  std::array<std::string, 256> to_char;
  std::array<int, 512> to_byte{};  // all 256 characters are below U+0200

  Tables() {
    to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the rest take code points from U+0100 upward in order.
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      int cp = printable(b) ? b : next++;
      append_utf8(to_char[b], static_cast<char32_t>(cp));
      to_byte[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables instance;
  return instance;
}

}  // namespace

const std::string& byte_to_char(unsigned char byte) { return tables().to_char[byte]; }

std::optional<unsigned char> char_to_byte(char32_t cp) {
  if (cp >= 512 || tables().to_byte[cp] < 0) return std::nullopt;
  return static_cast<unsigned char>(tables().to_byte[cp]);
}

std::string bytes_to_chars(std::string_view text) {
  std::string out;
  out.reserve(text.size() * 2);
  for (unsigned char byte : text) out.append(byte_to_char(byte));
  return out;
}

}  // namespace sluice::tokenizer
