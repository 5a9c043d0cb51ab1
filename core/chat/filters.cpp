// Jinja2's built-in filters (the subset chat templates use, with Jinja's argument names and
// defaults) plus transformers' tojson override.
#include <algorithm>
#include <cmath>
#include <map>
#include <utf8proc.h>

#include "chat/builtins.h"
#include "chat/interpreter.h"
#include "chat/meter.h"

namespace sluice::chat {
namespace {

using Filter = Value (*)(Interpreter&, const Value&, CallArgs&);

std::int64_t py_len(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_list() && v.as_list()->is_generator) fail("TypeError: object of type 'generator' has no len()");
  if (v.is_string()) return static_cast<std::int64_t>(utf8_length(v.as_string()));
  if (v.is_list()) return static_cast<std::int64_t>(v.as_list()->items.size());
  if (v.is_dict()) return static_cast<std::int64_t>(v.as_dict()->items.size());
  fail("TypeError: object of type '" + type_name(v) + "' has no len()");
}

// Jinja's make_attrgetter: "a.b.0" looks up each part item-first; digits index sequences.
Value attr_path(Interpreter& in, const Value& item, const std::string& path) {
  Value cur = item;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (cur.is_undefined()) return cur;
    cur = get_item(in, cur, digits ? Value(static_cast<std::int64_t>(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Jinja's map/select/unique/... return generators, not lists.
Value generator(std::vector<Value> items) {
  Value v = Value::list(std::move(items));
  v.as_list()->is_generator = true;
  return v;
}

Value fold_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.as_string()));
  return v;
}

std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> lines;
  std::string cur;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      lines.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  return lines;
}

Value f_length(Interpreter&, const Value& v, CallArgs&) { return Value(py_len(v)); }

Value f_default(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("default", args, {"default_value", "boolean"});
  bool boolean = truthy(a.get_or(1, Value(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return a.get_or(0, Value(""));
  return v;
}

Value f_first(Interpreter&, const Value& v, CallArgs&) {
  auto items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter&, const Value& v, CallArgs&) {
  auto items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_join(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder a("join", args, {"d", "attribute"});
  std::string sep = to_str(a.get_or(0, Value("")));
  std::string out;
  bool first = true;
  for (auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(a.has(1) ? attr_path(in, item, to_str(a.get(1))) : item);
    check_size(out.size(), "a joined string");
  }
  return Value(std::move(out));
}

Value f_upper(Interpreter&, const Value& v, CallArgs&) { return Value(py_upper(to_str(v))); }
Value f_lower(Interpreter&, const Value& v, CallArgs&) { return Value(py_lower(to_str(v))); }
Value f_capitalize(Interpreter&, const Value& v, CallArgs&) { return Value(py_capitalize(to_str(v))); }

Value f_title(Interpreter&, const Value& v, CallArgs&) {
  // Jinja: words start after whitespace or one of - ( { [ <; first letter upper, rest lower.
  std::u32string u = to_u32(to_str(v));
  bool start = true;
  for (auto& c : u) {
    bool sep = is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    auto cp = static_cast<utf8proc_int32_t>(c);
    if (!sep) c = static_cast<char32_t>(start ? utf8proc_totitle(cp) : utf8proc_tolower(cp));
    start = sep;
  }
  return Value(from_u32(u));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("trim", args, {"chars"});
  return Value(py_strip(to_str(v), a.get_or(0, Value::none()), true, true));
}

Value f_replace(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("replace", args, {"old", "new", "count"});
  Value count = a.get_or(2, Value::none());
  return Value(py_replace(to_str(v), to_str(a.get(0)), to_str(a.get(1)), count.is_none() ? -1 : count.to_int()));
}

Value f_list(Interpreter&, const Value& v, CallArgs&) { return Value::list(iterate(v)); }
Value f_string(Interpreter&, const Value& v, CallArgs&) { return Value(to_str(v)); }
Value f_safe(Interpreter&, const Value& v, CallArgs&) {
  Value out(to_str(v));
  if (v.is_string()) out = v;
  return out.mark_safe();
}

Value f_escape(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_markup()) return v;
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out)).mark_safe();
}

// Python's int(str): optional sign, whitespace and underscores between digits.
std::optional<std::int64_t> parse_int(const std::string& text, int base) {
  std::string s = py_strip(text, Value::none(), true, true);
  if (s.empty()) return std::nullopt;
  std::size_t i = 0;
  bool neg = false;
  if (s[0] == '+' || s[0] == '-') {
    neg = s[0] == '-';
    ++i;
  }
  if (base == 16 && s.compare(i, 2, "0x") == 0) i += 2;
  if (i >= s.size()) return std::nullopt;
  std::int64_t v = 0;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_' && i + 1 < s.size() && s[i + 1] != '_') continue;
    int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::isalpha(static_cast<unsigned char>(c)) ? std::tolower(c) - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return std::nullopt;
  }
  return neg ? -v : v;
}

std::optional<double> parse_float(const std::string& text) {
  std::string s = py_strip(text, Value::none(), true, true);
  if (s.empty()) return std::nullopt;
  std::string lower = py_lower(s);
  if (lower == "inf" || lower == "+inf" || lower == "infinity") return INFINITY;
  if (lower == "-inf" || lower == "-infinity") return -INFINITY;
  if (lower == "nan" || lower == "+nan" || lower == "-nan") return NAN;
  std::string cleaned;
  for (char c : s) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' || c == '_'))
      return std::nullopt;
    if (c != '_') cleaned += c;
  }
  try {
    std::size_t used = 0;
    double d = std::stod(cleaned, &used);
    if (used != cleaned.size()) return std::nullopt;
    return d;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

Value f_int(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("int", args, {"default", "base"});
  Value dflt = a.get_or(0, Value(0));
  if (v.is_int() || v.is_bool()) return Value(v.to_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float())) return dflt;
    return Value(static_cast<std::int64_t>(v.as_float()));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), static_cast<int>(a.get_or(1, Value(10)).to_int()))) return Value(*i);
    if (auto d = parse_float(v.as_string()); d && std::isfinite(*d)) return Value(static_cast<std::int64_t>(*d));
  }
  return dflt;
}

Value f_float(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("float", args, {"default"});
  if (v.is_number()) return Value(v.to_double());
  if (v.is_string())
    if (auto d = parse_float(v.as_string())) return Value(*d);
  return a.get_or(0, Value(0.0));
}

Value f_abs(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) return Value(v.to_int() < 0 ? -v.to_int() : v.to_int());
  fail("TypeError: bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_round(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("round", args, {"precision", "method"});
  std::int64_t precision = a.get_or(0, Value(0)).to_int();
  std::string method = to_str(a.get_or(1, Value("common")));
  if (method != "common" && method != "ceil" && method != "floor")
    fail("FilterArgumentError: method must be common, ceil or floor");
  if (!v.is_number()) fail("TypeError: type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (!v.is_float()) return Value(v.to_int());  // round(int, n) stays an int
    // Python's round(): round-half-even on the exact decimal value, done via correctly rounded printing.
    char buf[512];
    // Beyond 340 decimals every double is exact; clamping keeps the printed digits within buf.
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::clamp<std::int64_t>(precision, 0, 340)), v.as_float());
    double r = precision >= 0 ? std::strtod(buf, nullptr) : std::nearbyint(v.as_float() / std::pow(10.0, -precision)) * std::pow(10.0, -precision);
    return Value(r);
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.to_double() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_tojson(Interpreter&, const Value& v, CallArgs& args) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  ArgBinder a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = truthy(a.get_or(0, Value(false)));
  Value indent = a.get_or(1, Value::none());
  if (indent.is_string()) o.indent = indent.as_string();
  else if (indent.is_number()) o.indent = std::string(checked_size(indent.to_int(), 1, "a tojson indent"), ' ');
  else if (!indent.is_none()) fail("TypeError: indent must be an int or str");
  if (o.indent) o.item_separator = ",";
  Value seps = a.get_or(2, Value::none());
  if (!seps.is_none()) {
    auto parts = iterate(seps);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string()) fail("ValueError: separators must be a pair of strings");
    o.item_separator = parts[0].as_string();
    o.key_separator = parts[1].as_string();
  }
  o.sort_keys = truthy(a.get_or(3, Value(false)));
  if (v.is_undefined()) fail("TypeError: Object of type Undefined is not JSON serializable");
  return Value(to_json(v, o));
}

Value f_items(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return generator({});
  if (!v.is_dict()) fail("TypeError: Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict()->items) out.push_back(Value::tuple({k, val}));
  return generator(std::move(out));
}

Value f_dictsort(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("dictsort", args, {"case_sensitive", "by", "reverse"});
  bool cs = truthy(a.get_or(0, Value(false)));
  std::string by = to_str(a.get_or(1, Value("key")));
  bool rev = truthy(a.get_or(2, Value(false)));
  if (by != "key" && by != "value") fail("FilterArgumentError: You can only sort by either 'key' or 'value'");
  if (!v.is_dict()) fail("TypeError: dictsort requires a mapping");
  auto items = v.as_dict()->items;
  std::size_t pos = by == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
    const Value& kx = pos == 0 ? x.first : x.second;
    const Value& ky = pos == 0 ? y.first : y.second;
    int c = compare(fold_case(kx, cs), fold_case(ky, cs));
    return rev ? c > 0 : c < 0;
  });
  std::vector<Value> out;
  for (auto& [k, val] : items) out.push_back(Value::tuple({k, val}));
  return Value::list(std::move(out));
}

// select/reject/selectattr/rejectattr share one implementation.
Value select_common(Interpreter& in, const Value& v, CallArgs& args, bool by_attr, bool keep_when) {
  std::size_t i = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty()) fail("TypeError: missing attribute name");
    attr = to_str(args.positional[i++]);
  }
  std::string test;
  CallArgs test_args;
  if (i < args.positional.size()) {
    test = to_str(args.positional[i++]);
    test_args.positional.assign(args.positional.begin() + i, args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  if (!truthy(v)) return generator({});  // Jinja guards with `if value:` (so none | select(...) is empty)
  for (auto& item : iterate(v)) {
    Value probe = by_attr ? attr_path(in, item, attr) : item;
    bool ok;
    if (test.empty()) {
      ok = truthy(probe);
    } else {
      CallArgs copy = test_args;
      if (!is_known_test(test)) fail("TemplateRuntimeError: No test named '" + test + "'.");
      ok = call_test(in, test, probe, copy);
    }
    if (ok == keep_when) out.push_back(item);
  }
  return generator(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_common(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_common(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_common(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_common(in, v, a, true, false); }

Value f_map(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<Value> out;
  if (!truthy(v)) return generator({});  // Jinja guards with `if value:`
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, val] : args.keyword) {
    if (k == "attribute") attribute = &val;
    else if (k == "default") dflt = &val;
  }
  if (attribute) {
    for (auto& item : iterate(v)) {
      Value r = attr_path(in, item, to_str(*attribute));
      out.push_back(r.is_undefined() && dflt ? *dflt : r);
    }
    return generator(std::move(out));
  }
  if (args.positional.empty()) fail("FilterArgumentError: map requires a filter argument");
  std::string name = to_str(args.positional[0]);
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  if (!is_known_filter(name)) fail("TemplateRuntimeError: No filter named '" + name + "'.");
  for (auto& item : iterate(v)) {
    CallArgs copy = rest;
    out.push_back(call_filter(in, name, item, copy));
  }
  return generator(std::move(out));
}

std::vector<std::string> split_attrs(const Value& attribute) {
  std::vector<std::string> out;
  if (attribute.is_none() || attribute.is_undefined()) return out;
  if (!attribute.is_string()) return {to_str(attribute)};
  std::string s = attribute.as_string();
  std::size_t start = 0;
  while (true) {
    std::size_t comma = s.find(',', start);
    out.push_back(py_strip(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start), Value::none(), true, true));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Value sort_key(Interpreter& in, const Value& item, const std::vector<std::string>& attrs, bool cs) {
  if (attrs.empty()) return fold_case(item, cs);
  if (attrs.size() == 1) return fold_case(attr_path(in, item, attrs[0]), cs);
  std::vector<Value> parts;
  for (const auto& a : attrs) parts.push_back(fold_case(attr_path(in, item, a), cs));
  return Value::list(std::move(parts));
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder a("sort", args, {"reverse", "case_sensitive", "attribute"});
  bool rev = truthy(a.get_or(0, Value(false)));
  bool cs = truthy(a.get_or(1, Value(false)));
  auto attrs = split_attrs(a.get_or(2, Value::none()));
  auto items = iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& it : items) keyed.emplace_back(sort_key(in, it, attrs, cs), it);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return rev ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder a("unique", args, {"case_sensitive", "attribute"});
  bool cs = truthy(a.get_or(0, Value(false)));
  auto attrs = split_attrs(a.get_or(1, Value::none()));
  std::vector<Value> seen, out;
  for (auto& item : iterate(v)) {
    Value key = sort_key(in, item, attrs, cs);
    charge_steps(seen.size());  // compared with every key kept so far
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return generator(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, CallArgs& args, bool want_max) {
  ArgBinder a(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  bool cs = truthy(a.get_or(0, Value(false)));
  auto attrs = split_attrs(a.get_or(1, Value::none()));
  auto items = iterate(v);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  std::size_t best = 0;
  Value best_key = sort_key(in, items[0], attrs, cs);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(in, items[i], attrs, cs);
    int c = compare(k, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}
Value f_min(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }

Value f_sum(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder a("sum", args, {"attribute", "start"});
  Value total = a.get_or(1, Value(0));
  auto attrs = split_attrs(a.get_or(0, Value::none()));
  for (auto& item : iterate(v)) {
    Value x = attrs.empty() ? item : attr_path(in, item, attrs[0]);
    if (!x.is_number() || !total.is_number()) fail("TypeError: unsupported operand type(s) for +: '" + type_name(total) + "' and '" + type_name(x) + "'");
    if (x.is_float() || total.is_float()) total = Value(total.to_double() + x.to_double());
    else total = Value(total.to_int() + x.to_int());
  }
  return total;
}

Value f_reverse(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_string()) {
    auto chars = utf8_chars(v.as_string());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value(std::move(out));
  }
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  return generator(std::move(items));  // reversed(): an iterator
}

Value f_batch(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("batch", args, {"linecount", "fill_with"});
  std::int64_t n = a.get(0).to_int();
  if (n <= 0) fail("ValueError: batch size must be positive");
  if (a.has(1) && !a.get(1).is_none()) checked_size(n, sizeof(Value), "a batch");  // the last batch is filled up to n
  std::vector<Value> out, cur;
  for (auto& item : iterate(v)) {
    cur.push_back(item);
    if (static_cast<std::int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (a.has(1) && !a.get(1).is_none())
      while (static_cast<std::int64_t>(cur.size()) < n) cur.push_back(a.get(1));
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_slice(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("slice", args, {"slices", "fill_with"});
  std::int64_t slices = a.get(0).to_int();
  if (slices <= 0) fail("ValueError: slices must be positive");
  checked_size(slices, sizeof(Value), "a slice");  // one list per slice, even empty ones
  charge_steps(static_cast<std::uint64_t>(slices));
  auto seq = iterate(v);
  std::int64_t length = static_cast<std::int64_t>(seq.size());
  std::int64_t per = length / slices, extra = length % slices, offset = 0;
  std::vector<Value> out;
  for (std::int64_t i = 0; i < slices; ++i) {
    std::int64_t start = offset + i * per;
    if (i < extra) ++offset;
    std::int64_t end = offset + (i + 1) * per;
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (a.has(1) && !a.get(1).is_none() && i >= extra) part.push_back(a.get(1));
    out.push_back(Value::list(std::move(part)));
  }
  return Value::list(std::move(out));
}

Value f_indent(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("indent", args, {"width", "first", "blank"});
  Value width = a.get_or(0, Value(4));
  std::string ind = width.is_string() ? width.as_string() : std::string(checked_size(width.to_int(), 1, "an indent"), ' ');
  bool first = truthy(a.get_or(1, Value(false)));
  bool blank = truthy(a.get_or(2, Value(false)));
  std::string s = to_str(v) + "\n";  // Jinja appends a newline so splitlines keeps a trailing empty line
  auto lines = py_splitlines(s);
  std::string rv;
  // Every line gains the indent: the result is checked as it grows, not after.
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      check_size(rv.size() + ind.size() + lines[i].size() + 1, "an indented string");
      rv += (i ? "\n" + ind : "") + lines[i];
    }
  } else if (!lines.empty()) {
    rv = lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i) {
      check_size(rv.size() + ind.size() + lines[i].size() + 1, "an indented string");
      rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
    }
  }
  if (first) rv = ind + rv;
  return Value(std::move(rv));
}

Value f_center(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder a("center", args, {"width"});
  CallArgs m;
  m.positional.push_back(a.get_or(0, Value(80)));
  return in.call(get_attribute(in, Value(to_str(v)), "center"), m);
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs&) {
  std::int64_t n = 0;
  bool in_word = false;
  for (char32_t c : to_u32(to_str(v))) {
    auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    bool w = c == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_NO);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_format(Interpreter&, const Value& v, CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty())
    fail("FilterArgumentError: can't handle positional and keyword arguments at the same time");
  if (!args.keyword.empty()) {
    Value d = Value::dict();
    for (auto& [k, val] : args.keyword) d.as_dict()->set(Value(k), val);
    return Value(percent_format(to_str(v), d));
  }
  return Value(percent_format(to_str(v), Value::tuple(args.positional)));
}

Value f_truncate(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("truncate", args, {"length", "killwords", "end", "leeway"});
  std::int64_t length = a.get_or(0, Value(255)).to_int();
  bool killwords = truthy(a.get_or(1, Value(false)));
  std::string end = to_str(a.get_or(2, Value("...")));
  Value lw = a.get_or(3, Value::none());
  std::int64_t leeway = lw.is_none() ? 5 : lw.to_int();
  std::string s = to_str(v);
  auto chars = utf8_chars(s);
  std::int64_t end_len = static_cast<std::int64_t>(utf8_length(end));
  if (length < end_len) fail("AssertionError: expected length >= len(end)");
  if (leeway < 0) fail("AssertionError: expected leeway >= 0");
  if (static_cast<std::int64_t>(chars.size()) <= length + leeway) return Value(s);
  std::string head;
  for (std::int64_t i = 0; i < length - end_len && i < static_cast<std::int64_t>(chars.size()); ++i) head += chars[i];
  if (killwords) return Value(head + end);
  std::size_t sp = head.rfind(' ');
  if (sp != std::string::npos) head = head.substr(0, sp);
  return Value(head + end);
}

Value f_striptags(Interpreter&, const Value& v, CallArgs&) {
  std::string s = to_str(v), out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 4, "<!--") == 0) {
      std::size_t e = s.find("-->", i);
      if (e != std::string::npos) {
        i = e + 2;
        continue;
      }
    }
    if (s[i] == '<') {
      std::size_t e = s.find('>', i);
      if (e != std::string::npos) {
        i = e;
        continue;
      }
    }
    out += s[i];
  }
  Value words = py_split(out, Value::none(), -1, false);
  std::string joined;
  for (const auto& w : words.as_list()->items) joined += (joined.empty() ? "" : " ") + w.as_string();
  return Value(joined);
}

Value f_attr(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder a("attr", args, {"name"});
  std::string name = to_str(a.get(0));
  if (v.is_dict() && v.as_dict()->kind == DictObject::Kind::Dict) {
    Value m = get_attribute(in, v, name);  // python attributes of a dict are its methods only
    if (m.is_callable() || m.is_undefined()) return m.is_callable() ? m : Value::undefined("'dict object' has no attribute '" + name + "'");
    return Value::undefined("'dict object' has no attribute '" + name + "'");
  }
  return get_attribute(in, v, name);
}

Value f_pprint(Interpreter&, const Value& v, CallArgs&) { return Value(to_repr(v)); }

const std::map<std::string, Filter>& table() {
  static const std::map<std::string, Filter> t = {
      {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
      {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
      {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"forceescape", f_escape}, {"format", f_format},
      {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last},
      {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
      {"pprint", f_pprint}, {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace},
      {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select},
      {"selectattr", f_selectattr}, {"slice", f_slice}, {"sort", f_sort}, {"string", f_string},
      {"striptags", f_striptags}, {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim},
      {"truncate", f_truncate}, {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
  };
  return t;
}

}  // namespace

bool is_known_filter(const std::string& name) { return table().count(name) > 0; }

Value call_filter(Interpreter& in, const std::string& name, const Value& target, CallArgs& args) {
  auto it = table().find(name);
  if (it == table().end()) fail("TemplateRuntimeError: No filter named '" + name + "' found.");
  // Filters other than default/length-like ones see an unsafe sandbox value as an error.
  if (target.is_undefined() && target.as_undefined().unsafe) fail_undefined(target);
  return it->second(in, target, args);
}

}  // namespace sluice::chat
