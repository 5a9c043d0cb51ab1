#include "constrain/json_lexical.h"

#include <string>
#include <vector>

namespace sluice::constrain {
namespace {

const ByteSet kDigit = ByteSet::range('0', '9');
const ByteSet kNonZero = ByteSet::range('1', '9');
const ByteSet kCont = ByteSet::range(0x80, 0xBF);

ByteSet hex_digits() { return ByteSet::range('0', '9').add(ByteSet::range('a', 'f')).add(ByteSet::range('A', 'F')); }

Frag digits(GrammarBuilder& b, int n) { return b.repeat([&] { return b.bytes(kDigit); }, n, n); }

// Numbers of exactly lo.size() digits between lo and hi (same length, lo <= hi), digit by digit.
Frag same_length_range(GrammarBuilder& b, const std::string& lo, const std::string& hi) {
  if (lo.empty()) return b.empty();
  // Every number of this length: a digit run (keeps the recursion linear, not 2^n).
  if (lo.find_first_not_of('0') == std::string::npos && hi.find_first_not_of('9') == std::string::npos)
    return digits(b, static_cast<int>(lo.size()));
  const std::size_t rest = lo.size() - 1;
  if (lo[0] == hi[0]) return b.seq({b.bytes(ByteSet::of(lo[0])), same_length_range(b, lo.substr(1), hi.substr(1))});
  std::vector<Frag> options;
  options.push_back(b.seq({b.bytes(ByteSet::of(lo[0])), same_length_range(b, lo.substr(1), std::string(rest, '9'))}));
  if (hi[0] - lo[0] > 1)
    options.push_back(b.seq({b.bytes(ByteSet::range(static_cast<unsigned char>(lo[0] + 1), static_cast<unsigned char>(hi[0] - 1))),
                             digits(b, static_cast<int>(rest))}));
  options.push_back(b.seq({b.bytes(ByteSet::of(hi[0])), same_length_range(b, std::string(rest, '0'), hi.substr(1))}));
  return b.alt(options);
}

// Non-negative integers in [lo, hi] written without leading zeros.
Frag natural_range(GrammarBuilder& b, uint64_t lo, uint64_t hi) {
  std::vector<Frag> options;
  const std::size_t lo_len = std::to_string(lo).size(), hi_len = std::to_string(hi).size();
  for (std::size_t len = lo_len; len <= hi_len; ++len) {
    uint64_t first = len == 1 ? 0 : 1;
    for (std::size_t i = 1; i < len; ++i) first *= 10;
    uint64_t last = 9;
    for (std::size_t i = 1; i < len; ++i) last = last * 10 + 9;
    const uint64_t a = std::max(lo, first), z = std::min(hi, last);
    if (a > z) continue;
    options.push_back(same_length_range(b, std::to_string(a), std::to_string(z)));
  }
  return b.alt(options);
}

uint64_t max_with_digits(int n) {
  uint64_t v = 0;
  for (int i = 0; i < n && i < 18; ++i) v = v * 10 + 9;
  return v;
}

// Two digits from "00" up to `max` (e.g. 23, 59, 12).
Frag two_digits_upto(GrammarBuilder& b, int lo, int hi) {
  char l[3], h[3];
  std::snprintf(l, sizeof l, "%02d", lo);
  std::snprintf(h, sizeof h, "%02d", hi);
  return same_length_range(b, l, h);
}

Frag date(GrammarBuilder& b) {
  // Year 1000-9999, a real month, a day that month always has (Feb: up to 28, so every year is right).
  Frag year = b.seq({b.bytes(kNonZero), digits(b, 3)});
  Frag days31 = b.seq({b.alt({b.literal("01"), b.literal("03"), b.literal("05"), b.literal("07"), b.literal("08"), b.literal("10"), b.literal("12")}),
                       b.literal("-"), two_digits_upto(b, 1, 31)});
  Frag days30 = b.seq({b.alt({b.literal("04"), b.literal("06"), b.literal("09"), b.literal("11")}), b.literal("-"), two_digits_upto(b, 1, 30)});
  Frag days28 = b.seq({b.literal("02-"), two_digits_upto(b, 1, 28)});
  return b.seq({year, b.literal("-"), b.alt({days31, days30, days28})});
}

Frag time_of_day(GrammarBuilder& b) {
  Frag fraction = b.optional(b.seq({b.literal("."), b.repeat([&] { return b.bytes(kDigit); }, 1, 6)}));
  Frag offset = b.alt({b.literal("Z"), b.seq({b.bytes(ByteSet::chars("+-")), two_digits_upto(b, 0, 23), b.literal(":"), two_digits_upto(b, 0, 59)})});
  return b.seq({two_digits_upto(b, 0, 23), b.literal(":"), two_digits_upto(b, 0, 59), b.literal(":"), two_digits_upto(b, 0, 59), fraction, offset});
}

}  // namespace

Frag json_whitespace(GrammarBuilder& b, int max_bytes) {
  return b.repeat([&] { return b.bytes(ByteSet::chars(" \t\n\r")); }, 0, max_bytes);
}

Frag utf8_non_ascii_char(GrammarBuilder& b) {
  std::vector<Frag> options;
  // Well-formed UTF-8 (RFC 3629): no overlongs, no surrogates, nothing past U+10FFFF.
  options.push_back(b.seq({b.bytes(ByteSet::range(0xC2, 0xDF)), b.bytes(kCont)}));
  options.push_back(b.seq({b.bytes(ByteSet::of(0xE0)), b.bytes(ByteSet::range(0xA0, 0xBF)), b.bytes(kCont)}));
  options.push_back(b.seq({b.bytes(ByteSet::range(0xE1, 0xEC).add(ByteSet::range(0xEE, 0xEF))), b.bytes(kCont), b.bytes(kCont)}));
  options.push_back(b.seq({b.bytes(ByteSet::of(0xED)), b.bytes(ByteSet::range(0x80, 0x9F)), b.bytes(kCont)}));
  options.push_back(b.seq({b.bytes(ByteSet::of(0xF0)), b.bytes(ByteSet::range(0x90, 0xBF)), b.bytes(kCont), b.bytes(kCont)}));
  options.push_back(b.seq({b.bytes(ByteSet::range(0xF1, 0xF3)), b.bytes(kCont), b.bytes(kCont), b.bytes(kCont)}));
  options.push_back(b.seq({b.bytes(ByteSet::of(0xF4)), b.bytes(ByteSet::range(0x80, 0x8F)), b.bytes(kCont), b.bytes(kCont)}));
  return b.alt(options);
}

Frag json_string_char(GrammarBuilder& b) {
  ByteSet ascii = ByteSet::range(0x20, 0x7F);
  ascii.remove("\"\\");
  std::vector<Frag> options;
  options.push_back(b.bytes(ascii));
  options.push_back(utf8_non_ascii_char(b));
  // Escapes; \u outside D800-DFFF so that every escape is a whole character.
  const ByteSet hex = hex_digits();
  Frag unicode = b.seq({b.literal("u"),
                        b.alt({b.seq({b.bytes(ByteSet::range('0', '9').add(ByteSet::range('a', 'c')).add(ByteSet::range('A', 'C')).add(ByteSet::chars("eEfF"))),
                                      b.bytes(hex), b.bytes(hex), b.bytes(hex)}),
                               b.seq({b.bytes(ByteSet::chars("dD")), b.bytes(ByteSet::range('0', '7')), b.bytes(hex), b.bytes(hex)})})});
  options.push_back(b.seq({b.literal("\\"), b.alt({b.bytes(ByteSet::chars("\"\\/bfnrt")), unicode})}));
  return b.alt(options);
}

Frag json_string(GrammarBuilder& b, int min_chars, int max_chars) {
  return b.seq({b.literal("\""), b.repeat([&] { return json_string_char(b); }, min_chars, max_chars), b.literal("\"")});
}

std::optional<Frag> json_string_format(GrammarBuilder& b, std::string_view format) {
  const ByteSet hex = ByteSet::range('0', '9').add(ByteSet::range('a', 'f'));
  auto hex_run = [&](int n) { return b.repeat([&] { return b.bytes(hex); }, n, n); };
  Frag body{0, 0};
  if (format == "date") body = date(b);
  else if (format == "time") body = time_of_day(b);
  else if (format == "date-time") body = b.seq({date(b), b.literal("T"), time_of_day(b)});
  else if (format == "uuid")
    body = b.seq({hex_run(8), b.literal("-"), hex_run(4), b.literal("-"), hex_run(4), b.literal("-"), hex_run(4), b.literal("-"), hex_run(12)});
  else if (format == "email") {
    // A plain local@domain.tld: letters, digits and . _ % + - before the @; labels after it.
    ByteSet local = ByteSet::range('a', 'z').add(ByteSet::range('A', 'Z')).add(kDigit).add(ByteSet::chars("._%+-"));
    ByteSet label = ByteSet::range('a', 'z').add(ByteSet::range('A', 'Z')).add(kDigit);
    auto label_run = [&] { return b.seq({b.bytes(label), b.repeat([&] { return b.bytes(ByteSet(label).add(ByteSet::of('-'))); }, 0, 30)}); };
    body = b.seq({b.repeat([&] { return b.bytes(local); }, 1, 40), b.literal("@"), label_run(),
                  b.repeat([&] { return b.seq({b.literal("."), label_run()}); }, 1, 3)});
  } else if (format == "ipv4") {
    auto octet = [&] { return natural_range(b, 0, 255); };
    body = b.seq({octet(), b.literal("."), octet(), b.literal("."), octet(), b.literal("."), octet()});
  } else {
    return std::nullopt;
  }
  return b.seq({b.literal("\""), body, b.literal("\"")});
}

Frag json_integer(GrammarBuilder& b, std::optional<int64_t> lo, std::optional<int64_t> hi, int max_digits) {
  const uint64_t cap = max_with_digits(max_digits);
  std::vector<Frag> options;
  // Non-negative part: [max(lo,0), hi].
  if (!hi || *hi >= 0) {
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    const uint64_t z = hi ? static_cast<uint64_t>(*hi) : std::max(cap, a);
    if (a <= z) options.push_back(natural_range(b, a, z));
  }
  // Negative part: -[max(1,-hi), -lo].
  if (!lo || *lo < 0) {
    const uint64_t a = hi && *hi < 0 ? static_cast<uint64_t>(-(*hi + 1)) + 1 : 1;
    const uint64_t z = lo ? static_cast<uint64_t>(-(*lo + 1)) + 1 : std::max(cap, a);
    if (a <= z) options.push_back(b.seq({b.literal("-"), natural_range(b, a, z)}));
  }
  return b.alt(options);
}

Frag json_number(GrammarBuilder& b, int max_digits) {
  auto digit_run = [&] { return b.repeat([&] { return b.bytes(kDigit); }, 1, max_digits); };
  Frag integer = b.alt({b.literal("0"), b.seq({b.bytes(kNonZero), b.repeat([&] { return b.bytes(kDigit); }, 0, max_digits - 1)})});
  Frag fraction = b.optional(b.seq({b.literal("."), digit_run()}));
  Frag exponent = b.optional(b.seq({b.bytes(ByteSet::chars("eE")), b.optional(b.bytes(ByteSet::chars("+-"))),
                                    b.repeat([&] { return b.bytes(kDigit); }, 1, 2)}));
  return b.seq({b.optional(b.literal("-")), integer, fraction, exponent});
}

}  // namespace sluice::constrain
