// Python str semantics over UTF-8: whitespace, case mapping (utf8proc), strip/split/replace and the
// two formatting mini-languages templates reach for ('%s' % x and '{}'.format(x)).
#include <cmath>
#include <cstdio>

#include <utf8proc.h>

#include "chat/builtins.h"
#include "chat/meter.h"
#include "chat/interpreter.h"

namespace sluice::chat {

ArgBinder::ArgBinder(const std::string& function, CallArgs& args, std::vector<std::string> names, bool extra_positional)
    : function_(function), names_(std::move(names)), slots_(names_.size()) {
  for (std::size_t i = 0; i < args.positional.size(); ++i) {
    if (i < slots_.size()) slots_[i] = args.positional[i];
    else if (extra_positional) extra_.push_back(args.positional[i]);
    else fail("TypeError: " + function_ + "() takes at most " + std::to_string(slots_.size()) + " arguments (" +
              std::to_string(args.positional.size()) + " given)");
  }
  for (auto& [k, v] : args.keyword) {
    std::size_t i = 0;
    while (i < names_.size() && names_[i] != k) ++i;
    if (i == names_.size()) fail("TypeError: " + function_ + "() got an unexpected keyword argument '" + k + "'");
    if (slots_[i]) fail("TypeError: " + function_ + "() got multiple values for argument '" + k + "'");
    slots_[i] = v;
  }
}

const Value& ArgBinder::get(std::size_t i) const {
  if (!slots_[i]) fail("TypeError: " + function_ + "() missing required argument '" + names_[i] + "'");
  return *slots_[i];
}

std::u32string to_u32(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {  // invalid byte: keep it as U+FFFD rather than fail
      cp = 0xFFFD;
      n = 1;
    }
    out += static_cast<char32_t>(cp);
    p += n;
    left -= n;
  }
  return out;
}

std::string from_u32(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    utf8proc_uint8_t buf[4];
    auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
    out.append(reinterpret_cast<char*>(buf), static_cast<std::size_t>(n));
  }
  return out;
}

bool is_py_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::u32string set;
  bool use_set = !(chars.is_none() || chars.is_undefined());
  if (use_set) {
    if (!chars.is_string()) fail("TypeError: strip arg must be None or str");
    set = to_u32(chars.as_string());
  }
  auto strip_it = [&](char32_t c) { return use_set ? set.find(c) != std::u32string::npos : is_py_space(c); };
  if (!use_set) {  // fast path for ASCII edges
    std::size_t b = 0, e = s.size();
    auto ascii_space = [](unsigned char c) { return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F); };
    if (left) while (b < e && ascii_space(s[b])) ++b;
    if (right) while (e > b && ascii_space(s[e - 1])) --e;
    bool edge_non_ascii = (b < e) && ((left && (s[b] & 0x80)) || (right && (s[e - 1] & 0x80)));
    if (!edge_non_ascii) return s.substr(b, e - b);
  }
  std::u32string u = to_u32(s);
  std::size_t b = 0, e = u.size();
  if (left) while (b < e && strip_it(u[b])) ++b;
  if (right) while (e > b && strip_it(u[e - 1])) --e;
  return from_u32(u.substr(b, e - b));
}

std::string py_upper(const std::string& s) {
  std::u32string u = to_u32(s);
  for (auto& c : u) c = static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
  return from_u32(u);
}

std::string py_lower(const std::string& s) {
  std::u32string u = to_u32(s);
  for (auto& c : u) c = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
  return from_u32(u);
}

std::string py_capitalize(const std::string& s) {
  std::u32string u = to_u32(s);
  for (std::size_t i = 0; i < u.size(); ++i) {
    auto c = static_cast<utf8proc_int32_t>(u[i]);
    u[i] = static_cast<char32_t>(i == 0 ? utf8proc_totitle(c) : utf8proc_tolower(c));
  }
  return from_u32(u);
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, long long count) {
  std::string out;
  if (old.empty()) {  // Python inserts `repl` between every character and at both ends
    auto chars = utf8_chars(s);
    long long done = 0;
    for (const auto& c : chars) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      out += c;
      check_size(out.size(), "a replaced string");
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  std::size_t pos = 0;
  long long done = 0;
  while (count < 0 || done < count) {
    std::size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += repl;
    check_size(out.size(), "a replaced string");
    pos = hit + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

Value py_split(const std::string& s, const Value& sep, long long maxsplit, bool from_right) {
  std::vector<Value> parts;
  if (sep.is_none() || sep.is_undefined()) {
    // Whitespace split: runs of whitespace separate, leading/trailing whitespace ignored.
    std::u32string u = to_u32(s);
    std::vector<std::u32string> words;
    if (!from_right) {
      std::size_t i = 0;
      while (i < u.size()) {
        while (i < u.size() && is_py_space(u[i])) ++i;
        if (i >= u.size()) break;
        if (maxsplit >= 0 && static_cast<long long>(words.size()) == maxsplit) {
          std::size_t e = u.size();
          while (e > i && is_py_space(u[e - 1])) --e;
          words.push_back(u.substr(i, e - i));
          break;
        }
        std::size_t j = i;
        while (j < u.size() && !is_py_space(u[j])) ++j;
        words.push_back(u.substr(i, j - i));
        i = j;
      }
    } else {
      std::size_t i = u.size();
      while (i > 0) {
        while (i > 0 && is_py_space(u[i - 1])) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && static_cast<long long>(words.size()) == maxsplit) {
          std::size_t b = 0;
          while (b < i && is_py_space(u[b])) ++b;
          words.push_back(u.substr(b, i - b));
          break;
        }
        std::size_t j = i;
        while (j > 0 && !is_py_space(u[j - 1])) --j;
        words.push_back(u.substr(j, i - j));
        i = j;
      }
      std::reverse(words.begin(), words.end());
    }
    for (auto& w : words) parts.emplace_back(from_u32(w));
    return Value::list(std::move(parts));
  }
  if (!sep.is_string()) fail("TypeError: must be str or None, not " + type_name(sep));
  const std::string& d = sep.as_string();
  if (d.empty()) fail("ValueError: empty separator");
  if (!from_right) {
    std::size_t pos = 0;
    while (maxsplit < 0 || static_cast<long long>(parts.size()) < maxsplit) {
      std::size_t hit = s.find(d, pos);
      if (hit == std::string::npos) break;
      parts.emplace_back(s.substr(pos, hit - pos));
      pos = hit + d.size();
    }
    parts.emplace_back(s.substr(pos));
  } else {
    std::size_t end = s.size();
    std::vector<Value> rev;
    while (maxsplit < 0 || static_cast<long long>(rev.size()) < maxsplit) {
      if (end < d.size()) break;
      std::size_t hit = s.rfind(d, end - d.size());
      if (hit == std::string::npos) break;
      rev.emplace_back(s.substr(hit + d.size(), end - hit - d.size()));
      end = hit;
    }
    rev.emplace_back(s.substr(0, end));
    parts.assign(rev.rbegin(), rev.rend());
  }
  return Value::list(std::move(parts));
}

namespace {

// printf can print at most this many digits into our buffers; Python prints more but no template
// needs a thousand decimals.
constexpr std::size_t kMaxPrecision = 400;

// snprintf into a string of the size it needs (widths are bounded by the size budget beforehand).
template <class... Args>
std::string printf_string(const char* format, Args... args) {
  int n = std::snprintf(nullptr, 0, format, args...);
  if (n < 0) fail("ValueError: invalid format");
  std::string out(static_cast<std::size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), format, args...);
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// Reads the decimal digits at spec[i...]: a width or precision, bounded by the size budget (a width
// of 10^18 would otherwise be an allocation of that size, and the digits could overflow).
std::size_t parse_width(const std::string& spec, std::size_t& i, const char* what) {
  std::size_t value = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) {
    if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, spec[i] - '0', &value))
      fail(std::string("ValueError: Too many decimal digits in ") + what);
    check_size(value, what);
    ++i;
  }
  return value;
}

// Applies a format spec [[fill]align][sign][width][.precision][type] to a value, the subset of
// Python's format mini-language that templates plausibly use.
std::string format_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return to_str(v);
  std::size_t i = 0;
  char fill = ' ', align = 0, sign = 0;
  if (spec.size() >= 2 && (spec[1] == '<' || spec[1] == '>' || spec[1] == '^')) {
    fill = spec[0];
    align = spec[1];
    i = 2;
  } else if (!spec.empty() && (spec[0] == '<' || spec[0] == '>' || spec[0] == '^')) {
    align = spec[0];
    i = 1;
  }
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  if (i < spec.size() && spec[i] == '0' && !align) {
    fill = '0';
    align = '=';
    ++i;
  }
  std::size_t width = parse_width(spec, i, "a format width");
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = static_cast<int>(std::min<std::size_t>(parse_width(spec, i, "a format precision"), kMaxPrecision));
  }
  char type = i < spec.size() ? spec[i] : 0;
  std::string body;
  if (type == 'f' || type == 'F' || type == 'e' || type == 'g' || type == '%') {
    double d = v.to_double();
    if (type == '%') d *= 100;
    std::string f = "%." + std::to_string(precision < 0 ? 6 : precision) + (type == '%' ? 'f' : type);
    body = printf_string(f.c_str(), d);
    if (type == '%') body += '%';
  } else if (type == 'd') {
    body = std::to_string(v.to_int());
  } else if (type == 'x' || type == 'X' || type == 'o' || type == 'b') {
    std::int64_t n = v.to_int();
    char buf[80];
    if (type == 'b') {
      std::string bits;
      std::uint64_t m = n < 0 ? -static_cast<std::uint64_t>(n) : n;
      do bits.insert(bits.begin(), static_cast<char>('0' + (m & 1))); while (m >>= 1);
      body = (n < 0 ? "-" : "") + bits;
    } else {
      std::snprintf(buf, sizeof buf, type == 'x' ? "%llx" : type == 'X' ? "%llX" : "%llo", static_cast<unsigned long long>(std::llabs(n)));
      body = (n < 0 ? "-" : "") + std::string(buf);
    }
  } else {
    body = to_str(v);
    if (precision >= 0 && v.is_string()) {
      auto chars = utf8_chars(body);
      if (chars.size() > static_cast<std::size_t>(precision)) {
        body.clear();
        for (int k = 0; k < precision; ++k) body += chars[k];
      }
    } else if (precision >= 0 && v.is_float()) {
      body = printf_string("%.*g", precision, v.as_float());
    }
  }
  if (sign == '+' && v.is_number() && !body.empty() && body[0] != '-') body = "+" + body;
  if (!align) align = v.is_number() ? '>' : '<';
  std::size_t len = utf8_length(body);
  if (len < width) {
    std::size_t pad = width - len;
    if (align == '<') body += std::string(pad, fill);
    else if (align == '>') body = std::string(pad, fill) + body;
    else if (align == '^') body = std::string(pad / 2, fill) + body + std::string(pad - pad / 2, fill);
    else {  // '=': pad after the sign
      bool neg = !body.empty() && (body[0] == '-' || body[0] == '+');
      body = (neg ? body.substr(0, 1) : "") + std::string(pad, fill) + body.substr(neg ? 1 : 0);
    }
  }
  return body;
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> positional;
  const DictObject* mapping = nullptr;
  if (args.is_list() && args.as_list()->is_tuple) positional = args.as_list()->items;
  else if (args.is_dict()) mapping = args.as_dict().get();
  else positional.push_back(args);
  std::size_t next = 0;
  std::string out;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) fail("ValueError: incomplete format");
    if (fmt[i] == '%') {
      out += '%';
      continue;
    }
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      std::size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) fail("TypeError: format requires a mapping");
      arg = mapping->find(fmt.substr(i + 1, close - i - 1));
      if (!arg) fail("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string("-+ 0#").find(fmt[i]) != std::string::npos) flags += fmt[i++];
    std::string width, precision;
    std::size_t width_start = i;
    if (parse_width(fmt, i, "a format width") > 0) width = fmt.substr(width_start, i - width_start);
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      precision = std::to_string(std::min<std::size_t>(parse_width(fmt, i, "a format precision"), kMaxPrecision));
    }
    if (i >= fmt.size()) fail("ValueError: incomplete format");
    char conv = fmt[i];
    if (!arg) {
      if (mapping) arg = &args;
      else if (next < positional.size()) arg = &positional[next++];
      else fail("TypeError: not enough arguments for format string");
    }
    std::string body;
    if (conv == 's') body = to_str(*arg);
    else if (conv == 'r') body = to_repr(*arg);
    else if (conv == 'd' || conv == 'i') body = std::to_string(arg->to_int());
    else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'g' || conv == 'x' || conv == 'X' || conv == 'o') {
      std::string f = "%" + flags + width + (precision.empty() ? "" : "." + precision) +
                      (conv == 'x' || conv == 'X' || conv == 'o' ? std::string("ll") + conv : std::string(1, conv));
      if (conv == 'x' || conv == 'X' || conv == 'o') out += printf_string(f.c_str(), static_cast<long long>(arg->to_int()));
      else out += printf_string(f.c_str(), arg->to_double());
      check_size(out.size(), "a formatted string");
      continue;
    } else {
      fail(std::string("ValueError: unsupported format character '") + conv + "'");
    }
    if (!precision.empty() && conv != 'd' && conv != 'i') {
      auto chars = utf8_chars(body);
      std::size_t p = std::stoul(precision);
      if (chars.size() > p) {
        body.clear();
        for (std::size_t k = 0; k < p; ++k) body += chars[k];
      }
    }
    std::size_t w = width.empty() ? 0 : std::stoul(width);
    std::size_t len = utf8_length(body);
    if (len < w) {
      if (flags.find('-') != std::string::npos) body += std::string(w - len, ' ');
      else body = std::string(w - len, flags.find('0') != std::string::npos && conv != 's' ? '0' : ' ') + body;
    }
    out += body;
    check_size(out.size(), "a formatted string");
  }
  if (!mapping && next < positional.size()) fail("TypeError: not all arguments converted during string formatting");
  return out;
}

std::string str_format(Interpreter& in, const std::string& fmt, CallArgs& args) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else fail("ValueError: Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    std::size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("ValueError: Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string spec;
    auto colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    auto bang = field.find('!');
    char conversion = 0;
    if (bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 0;
      field = field.substr(0, bang);
    }
    // field: name or index, followed by .attr / [key] parts
    std::size_t end = field.find_first_of(".[");
    std::string head = field.substr(0, end);
    Value v;
    if (head.empty()) {
      if (auto_index >= args.positional.size()) fail("IndexError: Replacement index " + std::to_string(auto_index) + " out of range");
      v = args.positional[auto_index++];
    } else if (std::isdigit(static_cast<unsigned char>(head[0]))) {
      std::size_t k = std::stoul(head);
      if (k >= args.positional.size()) fail("IndexError: Replacement index " + head + " out of range");
      v = args.positional[k];
    } else {
      bool found = false;
      for (auto& [name, value] : args.keyword)
        if (name == head) {
          v = value;
          found = true;
        }
      if (!found) fail("KeyError: '" + head + "'");
    }
    while (end != std::string::npos && end < field.size()) {
      if (field[end] == '.') {
        std::size_t e2 = field.find_first_of(".[", end + 1);
        std::string attr = field.substr(end + 1, e2 == std::string::npos ? std::string::npos : e2 - end - 1);
        if (!attr.empty() && attr[0] == '_') fail("SecurityError: access to attribute '" + attr + "' is unsafe.");
        v = get_attribute(in, v, attr);
        end = e2;
      } else {
        std::size_t e2 = field.find(']', end);
        if (e2 == std::string::npos) fail("ValueError: Missing ']' in format string");
        std::string key = field.substr(end + 1, e2 - end - 1);
        Value k = !key.empty() && std::isdigit(static_cast<unsigned char>(key[0])) ? Value(static_cast<std::int64_t>(std::stoll(key))) : Value(key);
        v = get_item(in, v, k);
        end = e2 + 1;
      }
    }
    if (conversion == 'r') v = Value(to_repr(v));
    else if (conversion == 's') v = Value(to_str(v));
    out += format_spec(v, spec);
    check_size(out.size(), "a formatted string");
  }
  return out;
}

}  // namespace sluice::chat
