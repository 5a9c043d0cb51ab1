#include "constrain/json_pattern.h"

#include <bitset>
#include <memory>
#include <string>
#include <vector>

namespace sluice::constrain {
namespace {

// A set of characters: ASCII ones, and whether every non-ASCII character is in.
struct CharSet {
  std::bitset<128> ascii;
  bool non_ascii = false;

  void add_range(unsigned char lo, unsigned char hi) {
    for (unsigned c = lo; c <= hi; ++c) ascii.set(c);
  }
  void add(const CharSet& o) {
    ascii |= o.ascii;
    non_ascii = non_ascii || o.non_ascii;
  }
  // The complement, ASCII only (see the header: dialects disagree on non-ASCII members).
  CharSet negated_ascii() const {
    CharSet out;
    out.ascii = ~ascii;
    return out;
  }
};

CharSet digits() {
  CharSet s;
  s.add_range('0', '9');
  return s;
}
CharSet word() {
  CharSet s = digits();
  s.add_range('a', 'z');
  s.add_range('A', 'Z');
  s.ascii.set('_');
  return s;
}
CharSet space() {
  CharSet s;
  for (char c : std::string_view(" \t\n\r\f\v")) s.ascii.set(static_cast<unsigned char>(c));
  return s;
}

struct Node {
  enum Kind { kSet, kSeq, kAlt, kRepeat } kind;
  CharSet set;
  std::vector<std::unique_ptr<Node>> children;
  int min = 0, max = 0;  // kRepeat; max < 0: unbounded
};
using NodePtr = std::unique_ptr<Node>;

class Parser {
 public:
  Parser(std::string_view p, const PatternLimits& limits) : p_(p), limits_(limits) {}

  Result<NodePtr> parse_all(bool& anchored_start, bool& anchored_end) {
    anchored_start = !p_.empty() && p_[0] == '^';
    if (anchored_start) ++i_;
    std::size_t end = p_.size();
    // A final unescaped $ anchors the end.
    anchored_end = end > i_ && p_[end - 1] == '$' && !escaped_at(end - 1);
    if (anchored_end) p_ = p_.substr(0, end - 1);
    auto node = alternation(0);
    if (!node) return node;
    if (i_ < p_.size()) return fail("unexpected '" + std::string(1, p_[i_]) + "'");
    return node;
  }

 private:
  bool escaped_at(std::size_t pos) const {
    std::size_t backslashes = 0;
    while (pos > backslashes && p_[pos - 1 - backslashes] == '\\') ++backslashes;
    return backslashes % 2 == 1;
  }
  Error fail(const std::string& what) const { return make_error("pattern: " + what + " at offset " + std::to_string(i_)); }

  Result<NodePtr> alternation(int depth) {
    if (depth > limits_.max_depth) return fail("groups nest too deeply");
    auto alt = std::make_unique<Node>(Node{Node::kAlt, {}, {}, 0, 0});
    for (;;) {
      auto seq = sequence(depth);
      if (!seq) return seq;
      alt->children.push_back(std::move(*seq));
      if (i_ < p_.size() && p_[i_] == '|') {
        ++i_;
        continue;
      }
      return alt;
    }
  }

  Result<NodePtr> sequence(int depth) {
    auto seq = std::make_unique<Node>(Node{Node::kSeq, {}, {}, 0, 0});
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      auto atom_r = atom(depth);
      if (!atom_r) return atom_r;
      NodePtr a = std::move(*atom_r);
      // Quantifiers.
      while (i_ < p_.size() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?' || p_[i_] == '{')) {
        int lo = 0, hi = -1;
        if (p_[i_] == '*') ++i_;
        else if (p_[i_] == '+') lo = 1, ++i_;
        else if (p_[i_] == '?') hi = 1, ++i_;
        else {
          auto r = counts(lo, hi);
          if (!r) return r.error();
        }
        if (i_ < p_.size() && p_[i_] == '?') ++i_;  // lazy: the same language
        auto rep = std::make_unique<Node>(Node{Node::kRepeat, {}, {}, lo, hi});
        rep->children.push_back(std::move(a));
        a = std::move(rep);
      }
      seq->children.push_back(std::move(a));
    }
    return seq;
  }

  Status counts(int& lo, int& hi) {
    ++i_;  // {
    auto number = [&]() -> long {
      long v = -1;
      while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (p_[i_] - '0');
        if (v > 1000000) v = 1000000;
        ++i_;
      }
      return v;
    };
    const long a = number();
    if (a < 0) return fail("a count {n,m} needs numbers");
    long b = a;
    if (i_ < p_.size() && p_[i_] == ',') {
      ++i_;
      b = number();  // -1: unbounded
    }
    if (i_ >= p_.size() || p_[i_] != '}') return fail("unclosed {n,m}");
    ++i_;
    if (a > limits_.max_repeat || b > limits_.max_repeat) return fail("counts above " + std::to_string(limits_.max_repeat) + " are not supported");
    if (b >= 0 && b < a) return fail("{n,m} with m below n");
    lo = static_cast<int>(a);
    hi = static_cast<int>(b);
    return {};
  }

  Result<NodePtr> atom(int depth) {
    const char c = p_[i_];
    auto set_node = [](CharSet s) { return std::make_unique<Node>(Node{Node::kSet, s, {}, 0, 0}); };
    if (c == '(') {
      ++i_;
      if (i_ < p_.size() && p_[i_] == '?') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') i_ += 2;
        else return fail("lookaround and named groups are not supported");
      }
      auto inner = alternation(depth + 1);
      if (!inner) return inner;
      if (i_ >= p_.size() || p_[i_] != ')') return fail("unclosed group");
      ++i_;
      return inner;
    }
    if (c == '[') return set_node_or(class_set());
    if (c == '.') {
      ++i_;
      CharSet s;
      s.add_range(0x20, 0x7F);
      s.ascii.set('\t');
      s.non_ascii = true;
      return set_node(s);
    }
    if (c == '^' || c == '$') return fail("anchors are supported only at the pattern's ends");
    if (c == '*' || c == '+' || c == '?' || c == '{') return fail("a quantifier with nothing before it");
    if (c == '\\') {
      auto e = escape(false);
      if (!e) return e.error();
      return set_node(*e);
    }
    if (static_cast<unsigned char>(c) >= 0x80) {
      // A literal non-ASCII character: its UTF-8 bytes in sequence.
      auto seq = std::make_unique<Node>(Node{Node::kSeq, {}, {}, 0, 0});
      std::size_t len = (static_cast<unsigned char>(c) >= 0xF0) ? 4 : (static_cast<unsigned char>(c) >= 0xE0) ? 3 : 2;
      if (i_ + len > p_.size()) return fail("cut UTF-8");
      literal_bytes_.push_back(std::string(p_.substr(i_, len)));
      auto lit = std::make_unique<Node>(Node{Node::kSet, {}, {}, -1 - static_cast<int>(literal_bytes_.size() - 1), 0});
      i_ += len;
      return lit;
    }
    ++i_;
    CharSet s;
    s.ascii.set(static_cast<unsigned char>(c));
    return set_node(s);
  }

  Result<NodePtr> set_node_or(Result<CharSet> s) {
    if (!s) return s.error();
    return std::make_unique<Node>(Node{Node::kSet, *s, {}, 0, 0});
  }

  // After a backslash: a class escape or a literal.
  Result<CharSet> escape(bool in_class) {
    ++i_;
    if (i_ >= p_.size()) return fail("a trailing backslash");
    const char e = p_[i_++];
    CharSet s;
    switch (e) {
      case 'd': return digits();
      case 'D': return digits().negated_ascii();
      case 'w': return word();
      case 'W': return word().negated_ascii();
      case 's': return space();
      case 'S': return space().negated_ascii();
      case 't': s.ascii.set('\t'); return s;
      case 'n': s.ascii.set('\n'); return s;
      case 'r': s.ascii.set('\r'); return s;
      case 'f': s.ascii.set('\f'); return s;
      case 'v': s.ascii.set('\v'); return s;
      default: break;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
      return fail(std::string("the escape \\") + e + (in_class ? " in a class" : "") + " is not supported");
    if (static_cast<unsigned char>(e) >= 0x80) return fail("an escaped non-ASCII character");
    s.ascii.set(static_cast<unsigned char>(e));  // an escaped punctuation character is itself
    return s;
  }

  Result<CharSet> class_set() {
    ++i_;  // [
    bool negate = false;
    if (i_ < p_.size() && p_[i_] == '^') negate = true, ++i_;
    CharSet s;
    bool first = true;
    while (i_ < p_.size() && (p_[i_] != ']' || first)) {
      first = false;
      CharSet item;
      int single = -1;
      if (p_[i_] == '\\') {
        auto e = escape(true);
        if (!e) return e.error();
        item = *e;
        if (item.ascii.count() == 1 && !item.non_ascii)
          for (int c = 0; c < 128; ++c)
            if (item.ascii.test(c)) single = c;
      } else if (static_cast<unsigned char>(p_[i_]) >= 0x80) {
        return fail("non-ASCII characters in a class are not supported");
      } else {
        single = static_cast<unsigned char>(p_[i_++]);
        item.ascii.set(single);
      }
      if (single >= 0 && i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        int hi;
        if (p_[i_] == '\\') {
          auto e = escape(true);
          if (!e) return e.error();
          if (e->ascii.count() != 1) return fail("a range must end in one character");
          hi = -1;
          for (int c = 0; c < 128; ++c)
            if (e->ascii.test(c)) hi = c;
        } else if (static_cast<unsigned char>(p_[i_]) >= 0x80) {
          return fail("non-ASCII characters in a class are not supported");
        } else {
          hi = static_cast<unsigned char>(p_[i_++]);
        }
        if (hi < single) return fail("a range out of order");
        item.add_range(static_cast<unsigned char>(single), static_cast<unsigned char>(hi));
      }
      s.add(item);
    }
    if (i_ >= p_.size()) return fail("unclosed class");
    ++i_;  // ]
    return negate ? s.negated_ascii() : s;
  }

 public:
  std::vector<std::string> literal_bytes_;  // non-ASCII literals, referenced by kSet nodes with min < 0

 private:
  std::string_view p_;
  std::size_t i_ = 0;
  const PatternLimits& limits_;
};

// The JSON string content for one character of the set.
Frag char_of(GrammarBuilder& b, const CharSet& s) {
  std::vector<Frag> options;
  ByteSet raw;
  for (unsigned c = 0x20; c < 0x80; ++c)
    if (s.ascii.test(c) && c != '"' && c != '\\') raw.bits.set(c);
  if (!raw.empty()) options.push_back(b.bytes(raw));
  if (s.ascii.test('"')) options.push_back(b.literal("\\\""));
  if (s.ascii.test('\\')) options.push_back(b.literal("\\\\"));
  const std::pair<char, const char*> controls[] = {{'\t', "\\t"}, {'\n', "\\n"}, {'\r', "\\r"}, {'\b', "\\b"}, {'\f', "\\f"}};
  for (const auto& [c, escaped] : controls)
    if (s.ascii.test(static_cast<unsigned char>(c))) options.push_back(b.literal(escaped));
  if (s.non_ascii) options.push_back(utf8_non_ascii_char(b));
  return b.alt(options);  // an empty set: a state with no way out (nothing matches)
}

Frag build(GrammarBuilder& b, const Node& n, const std::vector<std::string>& literals) {
  switch (n.kind) {
    case Node::kSet:
      if (n.min < 0) return b.literal(literals[static_cast<std::size_t>(-1 - n.min)]);
      return char_of(b, n.set);
    case Node::kSeq: {
      std::vector<Frag> parts;
      for (const auto& c : n.children) parts.push_back(build(b, *c, literals));
      return b.seq(parts);
    }
    case Node::kAlt: {
      std::vector<Frag> parts;
      for (const auto& c : n.children) parts.push_back(build(b, *c, literals));
      return parts.size() == 1 ? parts[0] : b.alt(parts);
    }
    case Node::kRepeat:
      return b.repeat([&] { return build(b, *n.children[0], literals); }, n.min, n.max);
  }
  return b.empty();
}

}  // namespace

Result<Frag> json_pattern_string(GrammarBuilder& b, std::string_view pattern, const PatternLimits& limits) {
  if (pattern.size() > limits.max_length) return make_error("pattern: longer than " + std::to_string(limits.max_length) + " characters");
  Parser parser(pattern, limits);
  bool start = false, end = false;
  auto tree = parser.parse_all(start, end);
  if (!tree) return tree.error();
  CharSet any;
  any.add_range(0x20, 0x7F);
  any.ascii.set('\t');
  any.ascii.set('\n');
  any.non_ascii = true;
  auto anything = [&] { return b.star(char_of(b, any)); };
  std::vector<Frag> parts{b.literal("\"")};
  if (!start) parts.push_back(anything());
  parts.push_back(build(b, **tree, parser.literal_bytes_));
  if (!end) parts.push_back(anything());
  parts.push_back(b.literal("\""));
  return b.seq(parts);
}

}  // namespace sluice::constrain
