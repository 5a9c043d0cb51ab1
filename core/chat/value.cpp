// Python value semantics: truthiness, equality, ordering, str() and repr().
#include "chat/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "chat/budget.h"
#include "chat/meter.h"

namespace sluice::chat {

namespace {

// Freeing a value nested N deep would take N native frames (each container's destructor frees its
// items, which free theirs, ...). Instead the outermost destructor queues the nested containers and
// frees them one at a time; destructors running inside it only add to the queue.
thread_local std::vector<Value>* release_queue = nullptr;

bool holds_shared(const Value& v) { return v.is_list() || v.is_dict() || v.is_callable(); }

template <class Collect>
void release_nested(Collect collect) {
  if (release_queue) {
    collect(*release_queue);
    return;
  }
  std::vector<Value> queue;
  release_queue = &queue;
  collect(queue);
  while (!queue.empty()) {
    Value last = std::move(queue.back());
    queue.pop_back();
  }  // `last` may be the final owner: its destructor queues its own children
  release_queue = nullptr;
}

}  // namespace

ListObject::~ListObject() {
  release_nested([this](std::vector<Value>& queue) {
    for (auto& v : items)
      if (holds_shared(v)) queue.push_back(std::move(v));
  });
}

DictObject::~DictObject() {
  release_nested([this](std::vector<Value>& queue) {
    for (auto& [k, v] : items) {
      if (holds_shared(k)) queue.push_back(std::move(k));
      if (holds_shared(v)) queue.push_back(std::move(v));
    }
  });
}

Value Value::list(std::vector<Value> items) {
  auto l = std::make_shared<ListObject>();
  l->items = std::move(items);
  return Value(std::move(l));
}

Value Value::tuple(std::vector<Value> items) {
  auto l = std::make_shared<ListObject>();
  l->items = std::move(items);
  l->is_tuple = true;
  return Value(std::move(l));
}

Value Value::dict() { return Value(std::make_shared<DictObject>()); }

std::int64_t Value::to_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  if (is_int()) return as_int();
  if (is_float()) return static_cast<std::int64_t>(as_float());
  fail("expected a number, got " + type_name(*this));
}

double Value::to_double() const {
  if (is_float()) return as_float();
  return static_cast<double>(to_int());
}

const Value* DictObject::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* DictObject::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void DictObject::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

bool DictObject::erase(const Value& key) {
  for (auto it = items.begin(); it != items.end(); ++it) {
    if (equals(it->first, key)) {
      items.erase(it);
      return true;
    }
  }
  return false;
}

Value make_callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value(std::move(c));
}

void fail(const std::string& message) { throw TemplateError(message); }

void fail_undefined(const Value& v) {
  const auto& u = v.as_undefined();
  if (u.unsafe) fail("SecurityError: " + u.hint);
  fail("UndefinedError: " + (u.hint.empty() ? std::string("value is undefined") : u.hint));
}

bool truthy(const Value& v) {
  switch (v.storage().index()) {
    case 0: return false;
    case 1: return false;
    case 2: return v.as_bool();
    case 3: return v.as_int() != 0;
    case 4: return v.as_float() != 0.0;
    case 5: return !v.as_string().empty();
    case 6: return v.as_list()->is_generator || !v.as_list()->items.empty();
    case 7: return v.as_dict()->kind != DictObject::Kind::Dict || !v.as_dict()->items.empty();
    default: return true;
  }
}

namespace {

// Comparing nested values recurses once per level, also through dict lookups (a key may hold a
// dict), so the level is counted per thread rather than passed along: deep (or, with mutation
// allowed, cyclic) values end in Python's RecursionError instead of a native stack overflow, and
// each container compared is a step, so values sharing structure many times over stay bounded.
thread_local int comparison_depth = 0;

class NestedComparison {
 public:
  NestedComparison() {
    if (comparison_depth >= kMaxValueDepth) fail("RecursionError: maximum recursion depth exceeded in comparison");
    ++comparison_depth;
    charge_steps(1);
  }
  ~NestedComparison() { --comparison_depth; }
  NestedComparison(const NestedComparison&) = delete;
  NestedComparison& operator=(const NestedComparison&) = delete;
};

}  // namespace

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
    return a.to_int() == b.to_int();
  }
  if (a.storage().index() != b.storage().index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_list()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    if (x == y) return true;
    if (x->is_tuple != y->is_tuple || x->items.size() != y->items.size()) return false;
    NestedComparison nested;
    for (std::size_t i = 0; i < x->items.size(); ++i)
      if (!equals(x->items[i], y->items[i])) return false;
    return true;
  }
  if (a.is_dict()) {
    const auto& x = a.as_dict();
    const auto& y = b.as_dict();
    if (x == y) return true;
    if (x->kind != DictObject::Kind::Dict || y->kind != DictObject::Kind::Dict) return false;
    if (x->items.size() != y->items.size()) return false;
    NestedComparison nested;
    for (const auto& [k, v] : x->items) {
      const Value* other = y->find(k);
      if (!other || !equals(v, *other)) return false;
    }
    return true;
  }
  if (a.is_callable()) return a.as_callable() == b.as_callable();
  return false;
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.to_double(), y = b.to_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    auto x = a.to_int(), y = b.to_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // Byte order of UTF-8 equals code point order, which is Python's string order.
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list()->is_tuple == b.as_list()->is_tuple) {
    const auto& x = a.as_list()->items;
    const auto& y = b.as_list()->items;
    NestedComparison nested;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  fail("TypeError: '<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::string type_name(const Value& v) {
  switch (v.storage().index()) {
    case 0: return "Undefined";
    case 1: return "NoneType";
    case 2: return "bool";
    case 3: return "int";
    case 4: return "float";
    case 5: return "str";
    case 6: return v.as_list()->is_generator ? "generator" : v.as_list()->is_tuple ? "tuple" : "list";
    case 7:
      switch (v.as_dict()->kind) {
        case DictObject::Kind::Namespace: return "Namespace";
        case DictObject::Kind::Loop: return "LoopContext";
        case DictObject::Kind::Object: return "object";
        default: return "dict";
      }
    default: return "function";
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then laid out the way Python's repr() does: fixed notation for
  // exponents in [-4, 16), scientific otherwise with at least two exponent digits.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  auto epos = sci.find('e');
  std::string mantissa = sci.substr(0, epos);
  int exponent = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    int point = exponent + 1;  // digits before the decimal point
    if (point <= 0) {
      out = "0." + std::string(-point, '0') + digits;
    } else if (point >= static_cast<int>(digits.size())) {
      out = digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, point) + "." + digits.substr(point);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += e;
  }
  return negative ? "-" + out : out;
}

static std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (std::size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) < 0xA0) {
      // C1 control characters (U+0080..U+009F) are not printable: Python escapes them.
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned char>(s[i + 1]));
      out += b;
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

namespace {

// Python's repr() of nested values: a container already being printed prints as [...] / {...}
// (Py_ReprEnter), too deep a nesting is a RecursionError, and the text may not outgrow the size
// budget (a value sharing one list many times over prints exponentially long).
class ReprWriter {
 public:
  void write(const Value& v, std::string& out) {
    if (v.is_string()) {
      out += repr_string(v.as_string());
    } else if (v.is_undefined()) {
      out += "Undefined";
    } else if (v.is_list()) {
      write_list(*v.as_list(), out);
    } else if (v.is_dict()) {
      write_dict(*v.as_dict(), out);
    } else {
      out += to_str(v);
    }
    check_size(out.size(), "a printed value");
  }

 private:
  // Marks `object` as being printed for the lifetime of the guard.
  struct Active {
    std::unordered_set<const void*>& set;
    const void* object;
    ~Active() { set.erase(object); }
  };

  void enter(std::size_t items) {
    if (depth_ >= kMaxValueDepth) fail("RecursionError: maximum recursion depth exceeded while getting the repr of an object");
    charge_steps(1 + items);
  }

  void write_list(const ListObject& l, std::string& out) {
    if (l.is_generator) {
      out += "<generator object>";
      return;
    }
    if (!active_.insert(&l).second) {
      out += l.is_tuple ? "(...)" : "[...]";
      return;
    }
    Active guard{active_, &l};
    enter(l.items.size());
    ++depth_;
    out += l.is_tuple ? "(" : "[";
    for (std::size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += ", ";
      write(l.items[i], out);
    }
    if (l.is_tuple && l.items.size() == 1) out += ",";
    out += l.is_tuple ? ")" : "]";
    --depth_;
  }

  void write_dict(const DictObject& d, std::string& out) {
    if (d.kind == DictObject::Kind::Loop) {
      out += "<LoopContext>";
      return;
    }
    const bool ns = d.kind == DictObject::Kind::Namespace;
    if (!active_.insert(&d).second) {
      out += ns ? "<Namespace {...}>" : "{...}";
      return;
    }
    Active guard{active_, &d};
    enter(d.items.size());
    ++depth_;
    out += ns ? "<Namespace {" : "{";
    for (std::size_t i = 0; i < d.items.size(); ++i) {
      if (i) out += ", ";
      write(d.items[i].first, out);
      out += ": ";
      write(d.items[i].second, out);
    }
    out += ns ? "}>" : "}";
    --depth_;
  }

  std::unordered_set<const void*> active_;
  int depth_ = 0;
};

}  // namespace

std::string to_repr(const Value& v) {
  std::string out;
  ReprWriter().write(v, out);
  return out;
}

std::string to_str(const Value& v) {
  switch (v.storage().index()) {
    case 0: return "";
    case 1: return "None";
    case 2: return v.as_bool() ? "True" : "False";
    case 3: return std::to_string(v.as_int());
    case 4: return float_repr(v.as_float());
    case 5: return v.as_string();
    case 8: return "<function " + v.as_callable()->name + ">";
    default: return to_repr(v);
  }
}

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = s.size() - i;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::size_t utf8_length(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_undefined()) {
    if (v.as_undefined().unsafe) fail_undefined(v);
    return {};
  }
  if (v.is_list()) {
    charge_steps(v.as_list()->items.size());
    return v.as_list()->items;
  }
  if (v.is_dict()) {
    charge_steps(v.as_dict()->items.size());
    std::vector<Value> keys;
    for (const auto& kv : v.as_dict()->items) keys.push_back(kv.first);
    return keys;
  }
  if (v.is_string()) {
    charge_steps(v.as_string().size());
    std::vector<Value> out;
    for (auto& c : utf8_chars(v.as_string())) out.emplace_back(std::move(c));
    return out;
  }
  fail("TypeError: '" + type_name(v) + "' object is not iterable");
}

}  // namespace sluice::chat
