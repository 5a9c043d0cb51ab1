#include "server/utf8_output.h"

#include <cstdint>
#include <cstring>

#include "tokenizer/unicode.h"

namespace sluice::server {
namespace {

// Where the first byte ≥ 0x80 is (responses are mostly ASCII: skip it eight bytes at a time).
std::size_t ascii_prefix(const std::string& text) {
  std::size_t i = 0;
  for (; i + 8 <= text.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, text.data() + i, 8);
    if (word & 0x8080808080808080ull) break;
  }
  while (i < text.size() && static_cast<unsigned char>(text[i]) < 0x80) ++i;
  return i;
}

}  // namespace

void make_valid_utf8(std::string& text) {
  const std::size_t start = ascii_prefix(text);
  if (start == text.size()) return;
  const std::string_view rest = std::string_view(text).substr(start);
  if (tokenizer::is_valid_utf8(rest)) return;
  std::string repaired = text.substr(0, start);
  repaired += tokenizer::utf8_lossy(rest);
  text = std::move(repaired);
}

}  // namespace sluice::server
