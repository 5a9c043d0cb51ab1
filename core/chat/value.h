#pragma once
// The value model of the template engine: Python's object model as far as chat templates need it.
// Lists and dicts are shared by reference (as in Python), so a namespace or list reached through two
// names is the same object. Strings are UTF-8; lengths and indexing count code points, like Python.
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace sluice::chat {

// Raised inside the engine for any template failure; Template::render turns it into a Result error.
class TemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Accounting for the render running on this thread (meter.cpp; no-ops outside a render): a new
// string of `bytes` (fails past the size budget for one value), and string bytes that values hold
// (fails past the render's memory budget) or no longer hold.
void check_string_value(std::size_t bytes);
void hold_string_bytes(std::size_t bytes);
void release_string_bytes(std::size_t bytes) noexcept;

class Value;
struct ListObject;
struct DictObject;
struct Callable;
class Interpreter;

// Jinja's default Undefined: falsy, prints as "", iterates as empty; most other uses raise with `hint`.
struct Undefined {
  std::string hint;     // e.g. "'foo' is undefined" or "'dict object' has no attribute 'x'"
  bool unsafe = false;  // produced by the sandbox: using it is a SecurityError
};

using ListPtr = std::shared_ptr<ListObject>;
using DictPtr = std::shared_ptr<DictObject>;
using CallablePtr = std::shared_ptr<Callable>;

class Value {
 public:
  static constexpr std::size_t kSizeCheckThreshold = 4096;
  using Storage = std::variant<Undefined, std::nullptr_t, bool, std::int64_t, double, std::string, ListPtr, DictPtr,
                               CallablePtr>;

  Value() : v_(Undefined{}) {}
  Value(Undefined u) : v_(std::move(u)) {}
  Value(std::nullptr_t) : v_(nullptr) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(std::int64_t{i}) {}
  Value(std::int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  // Every string the engine makes passes here: one above the render's size budget is an error, so
  // no chain of string operations can grow a value without bound.
  Value(std::string s) : v_(std::move(s)) {
    if (std::get<std::string>(v_).size() > kSizeCheckThreshold) check_string_value(std::get<std::string>(v_).size());
    hold();
  }
  // Strings are copied, not shared, so the bytes that values hold are counted while they live: a
  // macro recursing with a large argument, or a loop keeping copies, stays within the memory budget.
  Value(const Value& other) : v_(other.v_), markup_(other.markup_) { hold(); }
  Value(Value&& other) noexcept : v_(std::move(other.v_)), markup_(other.markup_), held_(other.held_) { other.held_ = 0; }
  Value& operator=(const Value& other) {
    if (this != &other) *this = Value(other);
    return *this;
  }
  Value& operator=(Value&& other) noexcept {
    if (this == &other) return *this;
    release();
    v_ = std::move(other.v_);
    markup_ = other.markup_;
    held_ = other.held_;
    other.held_ = 0;
    return *this;
  }
  ~Value() { release(); }
  Value(const char* s) : v_(std::string(s)) {}
  Value(ListPtr l) : v_(std::move(l)) {}
  Value(DictPtr d) : v_(std::move(d)) {}
  Value(CallablePtr c) : v_(std::move(c)) {}

  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value none() { return Value(nullptr); }
  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  static Value dict();

  bool is_undefined() const { return v_.index() == 0; }
  bool is_none() const { return v_.index() == 1; }
  bool is_bool() const { return v_.index() == 2; }
  bool is_int() const { return v_.index() == 3; }  // bool is not counted here (unlike Python's isinstance)
  bool is_float() const { return v_.index() == 4; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return v_.index() == 5; }
  bool is_list() const { return v_.index() == 6; }
  bool is_dict() const { return v_.index() == 7; }
  bool is_callable() const { return v_.index() == 8; }

  bool as_bool() const { return std::get<bool>(v_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ListPtr& as_list() const { return std::get<ListPtr>(v_); }
  const DictPtr& as_dict() const { return std::get<DictPtr>(v_); }
  const CallablePtr& as_callable() const { return std::get<CallablePtr>(v_); }
  const Undefined& as_undefined() const { return std::get<Undefined>(v_); }

  // Numeric views (bool counts as int, as in Python).
  std::int64_t to_int() const;
  double to_double() const;

  const Storage& storage() const { return v_; }

  // Markup (the `safe`/`escape` filters): `markup + str` HTML-escapes the plain side, as
  // MarkupSafe does, even though autoescaping itself is off.
  bool is_markup() const { return markup_ && is_string(); }
  Value& mark_safe() {
    markup_ = true;
    return *this;
  }

 private:
  // Short strings are left out: counting them would cost more than they can hold.
  static constexpr std::size_t kHeldThreshold = 256;
  void hold() {
    if (!is_string() || as_string().size() < kHeldThreshold) return;
    hold_string_bytes(as_string().size());  // may throw: then nothing is held
    held_ = static_cast<std::uint32_t>(as_string().size());
  }
  void release() noexcept {
    if (held_) release_string_bytes(held_);
    held_ = 0;
  }

  Storage v_;
  bool markup_ = false;
  std::uint32_t held_ = 0;  // string bytes counted against the render's memory budget
};

struct ListObject {
  ListObject() = default;
  ListObject(const ListObject&) = delete;
  ListObject& operator=(const ListObject&) = delete;
  ~ListObject();  // frees nested values iteratively (a list nested 10^6 deep must not overflow the stack)

  std::vector<Value> items;
  bool is_tuple = false;      // tuples print as (a, b) and are immutable
  bool is_generator = false;  // lazy results of map/select/...: always truthy, no len(), not JSON
  bool tracked = false;       // registered with the render's meter as mutated (may be in a cycle)
};

// Insertion-ordered mapping (Python dicts keep insertion order; tojson must preserve it).
struct DictObject {
  enum class Kind { Dict, Namespace, Loop, Object };
  DictObject() = default;
  DictObject(const DictObject&) = delete;
  DictObject& operator=(const DictObject&) = delete;
  ~DictObject();  // like ~ListObject

  std::vector<std::pair<Value, Value>> items;
  Kind kind = Kind::Dict;
  bool tracked = false;

  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(Value key, Value value);
  bool erase(const Value& key);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> fn;
  bool is_macro = false;
};

Value make_callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn);

// Python semantics shared by the interpreter, filters and methods.
bool truthy(const Value& v);
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);  // <0, 0, >0; throws TemplateError when Python would (TypeError)
std::string type_name(const Value& v);        // Python's type name: 'str', 'int', 'dict', ...
std::string to_str(const Value& v);           // str(v): what {{ v }} prints
std::string to_repr(const Value& v);          // repr(v): how v prints inside a list or dict
std::string float_repr(double d);             // Python's shortest round-trip float repr ("1.0", "1e-05")

// UTF-8 helpers: Python indexes strings by code point.
std::vector<std::string> utf8_chars(const std::string& s);
std::size_t utf8_length(const std::string& s);

// Iterates a value as Python's iter() would (dict → keys, string → characters); undefined → empty.
std::vector<Value> iterate(const Value& v);

[[noreturn]] void fail(const std::string& message);
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace sluice::chat
