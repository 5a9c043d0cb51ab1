// Attribute and item access, and Python's str/dict/list methods as bound callables.
// Lookup order is Jinja's: `obj.name` tries a Python attribute (method) first and then the item;
// `obj[key]` tries the item first and then the attribute. The sandbox refuses `_`-prefixed Python
// attributes and (immutable sandbox, as in transformers) the methods that mutate lists and dicts.
#include <algorithm>
#include <utf8proc.h>

#include "chat/builtins.h"
#include "chat/interpreter.h"
#include "chat/meter.h"

namespace sluice::chat {
namespace {

std::string object_type(const Value& obj) {
  if (obj.is_none()) return "None";
  return "'" + type_name(obj) + " object'";
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(object_type(obj) + " has no attribute '" + name + "'");
}

Value unsafe(const Value& obj, const std::string& name) {
  Undefined u;
  u.hint = "access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.";
  u.unsafe = true;
  return Value(std::move(u));
}

using Method = std::function<Value(Interpreter&, CallArgs&)>;

Value bound(const std::string& name, Method m) { return make_callable(name, std::move(m)); }

std::int64_t cp_index(const std::string& s, std::size_t byte_pos) {
  return static_cast<std::int64_t>(utf8_length(s.substr(0, byte_pos)));
}

// Python's optional start/end arguments of find/count/startswith, in code points → a substring.
std::string clip(const std::string& s, const ArgBinder& a, std::size_t start_slot, std::int64_t* offset) {
  if (!a.has(start_slot) && !a.has(start_slot + 1)) {
    *offset = 0;
    return s;
  }
  Value sliced = slice_value(Value(s), a.get_or(start_slot, Value::none()), a.get_or(start_slot + 1, Value::none()), Value::none());
  std::int64_t start = a.has(start_slot) && !a.get(start_slot).is_none() ? a.get(start_slot).to_int() : 0;
  std::int64_t len = static_cast<std::int64_t>(utf8_length(s));
  if (start < 0) start = std::max<std::int64_t>(0, start + len);
  *offset = std::min(start, len);
  return sliced.as_string();
}

bool is_alpha(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}
bool is_digit(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND; }
bool is_numeric(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}
bool is_cased_lower(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_LL; }
bool is_cased_upper(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT;
}

template <class Pred>
Value all_chars(const std::string& s, Pred p) {
  std::u32string u = to_u32(s);
  if (u.empty()) return Value(false);
  for (char32_t c : u)
    if (!p(c)) return Value(false);
  return Value(true);
}

Value str_case_check(const std::string& s, bool upper) {
  bool cased = false;
  for (char32_t c : to_u32(s)) {
    if (upper ? is_cased_lower(c) : is_cased_upper(c)) return Value(false);
    if (upper ? is_cased_upper(c) : is_cased_lower(c)) cased = true;
  }
  return Value(cased);
}

std::string py_title(const std::string& s) {
  std::u32string u = to_u32(s);
  bool prev_cased = false;
  for (auto& c : u) {
    auto cp = static_cast<utf8proc_int32_t>(c);
    bool cased = is_alpha(c);
    c = static_cast<char32_t>(prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp));
    prev_cased = cased;
  }
  return from_u32(u);
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) fail("TypeError: " + std::string(prefix ? "startswith" : "endswith") + " first arg must be str or a tuple of str, not " + type_name(a));
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list() && affix.as_list()->is_tuple) {
    for (const auto& a : affix.as_list()->items)
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

Value string_method(const std::string& s, const std::string& name) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return bound(name, [s, name](Interpreter&, CallArgs& args) {
      ArgBinder a(name, args, {"chars"});
      return Value(py_strip(s, a.get_or(0, Value::none()), name != "rstrip", name != "lstrip"));
    });
  }
  if (name == "split" || name == "rsplit") {
    return bound(name, [s, name](Interpreter&, CallArgs& args) {
      ArgBinder a(name, args, {"sep", "maxsplit"});
      return py_split(s, a.get_or(0, Value::none()), a.get_or(1, Value(-1)).to_int(), name == "rsplit");
    });
  }
  if (name == "splitlines") {
    return bound(name, [s](Interpreter&, CallArgs& args) {
      ArgBinder a("splitlines", args, {"keepends"});
      bool keep = truthy(a.get_or(0, Value(false)));
      std::vector<Value> lines;
      std::string cur;
      for (std::size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
          std::string end(1, c);
          if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') end += s[++i];
          lines.emplace_back(keep ? cur + end : cur);
          cur.clear();
        } else {
          cur += c;
        }
      }
      if (!cur.empty()) lines.emplace_back(cur);
      return Value::list(std::move(lines));
    });
  }
  if (name == "startswith" || name == "endswith") {
    return bound(name, [s, name](Interpreter&, CallArgs& args) {
      ArgBinder a(name, args, {"prefix", "start", "end"});
      std::int64_t off;
      return Value(affix_match(clip(s, a, 1, &off), a.get(0), name == "startswith"));
    });
  }
  if (name == "replace") {
    return bound(name, [s](Interpreter&, CallArgs& args) {
      ArgBinder a("replace", args, {"old", "new", "count"});
      const Value& o = a.get(0);
      const Value& n = a.get(1);
      if (!o.is_string() || !n.is_string()) fail("TypeError: replace() arguments must be str");
      return Value(py_replace(s, o.as_string(), n.as_string(), a.get_or(2, Value(-1)).to_int()));
    });
  }
  if (name == "upper") return bound(name, [s](Interpreter&, CallArgs&) { return Value(py_upper(s)); });
  if (name == "lower" || name == "casefold") return bound(name, [s](Interpreter&, CallArgs&) { return Value(py_lower(s)); });
  if (name == "title") return bound(name, [s](Interpreter&, CallArgs&) { return Value(py_title(s)); });
  if (name == "capitalize") return bound(name, [s](Interpreter&, CallArgs&) { return Value(py_capitalize(s)); });
  if (name == "swapcase") {
    return bound(name, [s](Interpreter&, CallArgs&) {
      std::u32string u = to_u32(s);
      for (auto& c : u) {
        auto cp = static_cast<utf8proc_int32_t>(c);
        c = static_cast<char32_t>(is_cased_upper(c) ? utf8proc_tolower(cp) : utf8proc_toupper(cp));
      }
      return Value(from_u32(u));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return bound(name, [s, name](Interpreter&, CallArgs& args) -> Value {
      ArgBinder a(name, args, {"sub", "start", "end"});
      const Value& sub = a.get(0);
      if (!sub.is_string()) fail("TypeError: must be str, not " + type_name(sub));
      std::int64_t off;
      std::string hay = clip(s, a, 1, &off);
      const std::string& needle = sub.as_string();
      if (name == "count") {
        if (needle.empty()) return Value(static_cast<std::int64_t>(utf8_length(hay) + 1));
        std::int64_t n = 0;
        for (std::size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
        return Value(n);
      }
      std::size_t p = (name == "find" || name == "index") ? hay.find(needle) : hay.rfind(needle);
      if (p == std::string::npos) {
        if (name == "index" || name == "rindex") fail("ValueError: substring not found");
        return Value(-1);
      }
      return Value(off + cp_index(hay, p));
    });
  }
  if (name == "format") {
    return bound(name, [s](Interpreter& in, CallArgs& args) { return Value(str_format(in, s, args)); });
  }
  if (name == "join") {
    return bound(name, [s](Interpreter&, CallArgs& args) {
      ArgBinder a("join", args, {"iterable"});
      std::string out;
      bool first = true;
      for (const auto& item : iterate(a.get(0))) {
        if (!item.is_string()) fail("TypeError: sequence item: expected str instance, " + type_name(item) + " found");
        if (!first) out += s;
        out += item.as_string();
        first = false;
        check_size(out.size(), "a joined string");
      }
      return Value(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isdecimal") return bound(name, [s](Interpreter&, CallArgs&) { return all_chars(s, is_digit); });
  if (name == "isnumeric") return bound(name, [s](Interpreter&, CallArgs&) { return all_chars(s, is_numeric); });
  if (name == "isalpha") return bound(name, [s](Interpreter&, CallArgs&) { return all_chars(s, is_alpha); });
  if (name == "isalnum")
    return bound(name, [s](Interpreter&, CallArgs&) { return all_chars(s, [](char32_t c) { return is_alpha(c) || is_numeric(c); }); });
  if (name == "isspace") return bound(name, [s](Interpreter&, CallArgs&) { return all_chars(s, is_py_space); });
  if (name == "isupper") return bound(name, [s](Interpreter&, CallArgs&) { return str_case_check(s, true); });
  if (name == "islower") return bound(name, [s](Interpreter&, CallArgs&) { return str_case_check(s, false); });
  if (name == "removeprefix" || name == "removesuffix") {
    return bound(name, [s, name](Interpreter&, CallArgs& args) {
      ArgBinder a(name, args, {"affix"});
      const Value& x = a.get(0);
      if (!x.is_string()) fail("TypeError: " + name + "() argument must be str");
      bool prefix = name == "removeprefix";
      if (!affix_match(s, x, prefix)) return Value(s);
      std::size_t n = x.as_string().size();
      return Value(prefix ? s.substr(n) : s.substr(0, s.size() - n));
    });
  }
  if (name == "partition" || name == "rpartition") {
    return bound(name, [s, name](Interpreter&, CallArgs& args) {
      ArgBinder a(name, args, {"sep"});
      const Value& sep = a.get(0);
      if (!sep.is_string() || sep.as_string().empty()) fail("ValueError: empty separator");
      std::size_t p = name == "partition" ? s.find(sep.as_string()) : s.rfind(sep.as_string());
      if (p == std::string::npos)
        return name == "partition" ? Value::tuple({Value(s), Value(""), Value("")}) : Value::tuple({Value(""), Value(""), Value(s)});
      return Value::tuple({Value(s.substr(0, p)), sep, Value(s.substr(p + sep.as_string().size()))});
    });
  }
  if (name == "zfill" || name == "ljust" || name == "rjust" || name == "center") {
    return bound(name, [s, name](Interpreter&, CallArgs& args) {
      ArgBinder a(name, args, {"width", "fillchar"});
      std::int64_t width = a.get(0).to_int();
      std::string fill = name == "zfill" ? "0" : to_str(a.get_or(1, Value(" ")));
      std::int64_t len = static_cast<std::int64_t>(utf8_length(s));
      if (width <= len) return Value(s);
      std::int64_t pad = width - len;
      if (utf8_length(fill) != 1) fail("TypeError: The fill character must be exactly one character long");
      check_size(s.size() + checked_size(pad, fill.size(), "a padded string"), "a padded string");
      auto rep = [&](std::int64_t n) {
        std::string r;
        r.reserve(static_cast<std::size_t>(n) * fill.size());
        for (std::int64_t i = 0; i < n; ++i) r += fill;
        return r;
      };
      if (name == "ljust") return Value(s + rep(pad));
      if (name == "rjust") return Value(rep(pad) + s);
      if (name == "zfill") {
        bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
        return Value(sign ? s.substr(0, 1) + rep(pad) + s.substr(1) : rep(pad) + s);
      }
      std::int64_t left = pad / 2 + (pad & width & 1);  // CPython's centering rule
      return Value(rep(left) + s + rep(pad - left));
    });
  }
  return Value();
}

Value dict_method(Interpreter& in, const DictPtr& d, const Value& self, const std::string& name) {
  if (name == "items") {
    return bound(name, [d](Interpreter&, CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : d->items) out.push_back(Value::tuple({k, v}));
      return Value::list(std::move(out));
    });
  }
  if (name == "keys" || name == "values") {
    bool keys = name == "keys";
    return bound(name, [d, keys](Interpreter&, CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : d->items) out.push_back(keys ? k : v);
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return bound(name, [d](Interpreter&, CallArgs& args) {
      ArgBinder a("get", args, {"key", "default"});
      const Value* v = d->find(a.get(0));
      return v ? *v : a.get_or(1, Value::none());
    });
  }
  if (name == "copy") {
    return bound(name, [d](Interpreter&, CallArgs&) {
      auto c = std::make_shared<DictObject>();
      c->items = d->items;
      return Value(c);
    });
  }
  static const char* kMutating[] = {"pop", "popitem", "update", "setdefault", "clear"};
  for (const char* m : kMutating) {
    if (name != m) continue;
    if (!in.options().allow_mutation) return unsafe(self, name);
    return bound(name, [d, name](Interpreter& in, CallArgs& args) -> Value {
      in.meter().track_mutable(d);
      if (name == "clear") {
        d->items.clear();
        return Value::none();
      }
      if (name == "update") {
        for (const auto& p : args.positional) {
          if (!p.is_dict()) fail("TypeError: update() expects a mapping");
          for (const auto& [k, v] : p.as_dict()->items) {
            charge_steps(1 + d->items.size());  // each set scans the keys
            d->set(k, v);
          }
        }
        for (const auto& [k, v] : args.keyword) d->set(Value(k), v);
        return Value::none();
      }
      if (name == "popitem") {
        if (d->items.empty()) fail("KeyError: 'popitem(): dictionary is empty'");
        auto kv = d->items.back();
        d->items.pop_back();
        return Value::tuple({kv.first, kv.second});
      }
      ArgBinder a(name, args, {"key", "default"});
      const Value* v = d->find(a.get(0));
      if (name == "setdefault") {
        if (v) return *v;
        d->set(a.get(0), a.get_or(1, Value::none()));
        return a.get_or(1, Value::none());
      }
      if (!v) {
        if (a.has(1)) return a.get(1);
        fail("KeyError: " + to_repr(a.get(0)));
      }
      Value out = *v;
      d->erase(a.get(0));
      return out;
    });
  }
  return Value();
}

Value list_method(Interpreter& in, const ListPtr& l, const Value& self, const std::string& name) {
  if (name == "index" || name == "count") {
    return bound(name, [l, name](Interpreter&, CallArgs& args) -> Value {
      ArgBinder a(name, args, {"value", "start", "stop"});
      std::int64_t n = 0;
      for (std::size_t i = 0; i < l->items.size(); ++i) {
        if (!equals(l->items[i], a.get(0))) continue;
        if (name == "index") return Value(static_cast<std::int64_t>(i));
        ++n;
      }
      if (name == "index") fail("ValueError: " + to_repr(a.get(0)) + " is not in list");
      return Value(n);
    });
  }
  if (name == "copy" && !l->is_tuple) return bound(name, [l](Interpreter&, CallArgs&) { return Value::list(l->items); });
  static const char* kMutating[] = {"append", "extend", "pop", "insert", "remove", "reverse", "sort", "clear"};
  for (const char* m : kMutating) {
    if (name != m || l->is_tuple) continue;
    if (!in.options().allow_mutation) return unsafe(self, name);
    return bound(name, [l, name](Interpreter& in, CallArgs& args) -> Value {
      in.meter().track_mutable(l);
      auto& items = l->items;
      if (name == "append") {
        ArgBinder a(name, args, {"object"});
        charge_steps(1);
        items.push_back(a.get(0));
      } else if (name == "extend") {
        ArgBinder a(name, args, {"iterable"});
        auto more = iterate(a.get(0));
        check_size(sizeof(Value) * (items.size() + more.size()), "an extended list");
        items.insert(items.end(), more.begin(), more.end());
      } else if (name == "pop") {
        ArgBinder a(name, args, {"index"});
        if (items.empty()) fail("IndexError: pop from empty list");
        std::int64_t i = a.get_or(0, Value(-1)).to_int();
        std::int64_t n = static_cast<std::int64_t>(items.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) fail("IndexError: pop index out of range");
        Value out = items[static_cast<std::size_t>(i)];
        items.erase(items.begin() + i);
        return out;
      } else if (name == "insert") {
        ArgBinder a(name, args, {"index", "object"});
        std::int64_t n = static_cast<std::int64_t>(items.size());
        std::int64_t i = a.get(0).to_int();
        if (i < 0) i = std::max<std::int64_t>(0, i + n);
        i = std::min(i, n);
        items.insert(items.begin() + i, a.get(1));
      } else if (name == "remove") {
        ArgBinder a(name, args, {"value"});
        auto it = std::find_if(items.begin(), items.end(), [&](const Value& v) { return equals(v, a.get(0)); });
        if (it == items.end()) fail("ValueError: list.remove(x): x not in list");
        items.erase(it);
      } else if (name == "reverse") {
        std::reverse(items.begin(), items.end());
      } else if (name == "sort") {
        ArgBinder a(name, args, {"key", "reverse"});
        bool rev = truthy(a.get_or(1, Value(false)));
        std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
          return rev ? compare(y, x) < 0 : compare(x, y) < 0;
        });
      } else {
        items.clear();
      }
      return Value::none();
    });
  }
  return Value();
}

}  // namespace

Value get_attribute(Interpreter& in, const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    const auto& d = obj.as_dict();
    if (d->kind == DictObject::Kind::Dict) {
      Value m = dict_method(in, d, obj, name);
      if (!m.is_undefined() || (m.as_undefined().unsafe)) return m;
    }
    if (const Value* v = d->find(name)) return *v;
    return missing_attribute(obj, name);
  }
  if (name.size() >= 1 && name[0] == '_' && !obj.is_dict()) {
    // Python attributes such as __class__ exist on every object; the sandbox refuses them.
    if (name.rfind("__", 0) == 0) return unsafe(obj, name);
  }
  if (obj.is_string()) {
    Value m = string_method(obj.as_string(), name);
    if (!m.is_undefined()) return m;
  } else if (obj.is_list()) {
    Value m = list_method(in, obj.as_list(), obj, name);
    if (!m.is_undefined() || m.as_undefined().unsafe) return m;
  }
  return missing_attribute(obj, name);
}

Value get_item(Interpreter& in, const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (key.is_undefined() && key.as_undefined().unsafe) fail_undefined(key);
  if (obj.is_dict()) {
    const auto& d = obj.as_dict();
    if (d->kind == DictObject::Kind::Dict) {
      if (const Value* v = d->find(key)) return *v;
    }
    if (key.is_string()) return get_attribute(in, obj, key.as_string());
    return Value::undefined(object_type(obj) + " has no element " + to_repr(key));
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    std::int64_t i = key.to_int();
    if (obj.is_list()) {
      const auto& items = obj.as_list()->items;
      std::int64_t n = static_cast<std::int64_t>(items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(object_type(obj) + " has no element " + to_repr(key));
      return items[static_cast<std::size_t>(i)];
    }
    auto chars = utf8_chars(obj.as_string());
    std::int64_t n = static_cast<std::int64_t>(chars.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined(object_type(obj) + " has no element " + to_repr(key));
    return Value(chars[static_cast<std::size_t>(i)]);
  }
  if (key.is_string()) return get_attribute(in, obj, key.as_string());
  return Value::undefined(object_type(obj) + " has no element " + to_repr(key));
}

Value slice_value(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto bound = [](const Value& v, const char* what) -> std::optional<std::int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!(v.is_int() || v.is_bool())) fail(std::string("TypeError: slice ") + what + " must be an integer or None");
    return v.to_int();
  };
  std::int64_t step = bound(step_v, "step").value_or(1);
  if (step == 0) fail("ValueError: slice step cannot be zero");
  std::vector<std::string> chars;
  const std::vector<Value>* items = nullptr;
  std::int64_t n;
  if (obj.is_string()) {
    chars = utf8_chars(obj.as_string());
    n = static_cast<std::int64_t>(chars.size());
  } else if (obj.is_list()) {
    items = &obj.as_list()->items;
    n = static_cast<std::int64_t>(items->size());
  } else {
    fail("TypeError: '" + type_name(obj) + "' object is not subscriptable");
  }
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<std::int64_t> v, std::int64_t dflt) {
    if (!v) return dflt;
    std::int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  std::int64_t start = adjust(bound(start_v, "start"), step < 0 ? n - 1 : 0);
  std::int64_t stop = adjust(bound(stop_v, "stop"), step < 0 ? -1 : n);
  std::string s;
  std::vector<Value> out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (items) out.push_back((*items)[static_cast<std::size_t>(i)]);
    else s += chars[static_cast<std::size_t>(i)];
    if (__builtin_add_overflow(i, step, &i)) break;  // a step near 2^63 leaves the sequence at once
  }
  if (!items) return Value(std::move(s));
  return obj.as_list()->is_tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

}  // namespace sluice::chat
