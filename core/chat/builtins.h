#pragma once
// The built-in library of the template language: filters, tests, attribute/method access on
// values, global functions, and JSON conversion. Each lives in its own .cpp file.
#include <optional>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "chat/value.h"

namespace sluice::chat {

class Interpreter;

// filters.cpp
bool is_known_filter(const std::string& name);
Value call_filter(Interpreter& in, const std::string& name, const Value& target, CallArgs& args);

// predicates.cpp (Jinja "tests": `x is defined`, `x is string`, ...)
bool is_known_test(const std::string& name);
bool call_test(Interpreter& in, const std::string& name, const Value& target, CallArgs& args);

// methods.cpp: `obj.name` and `obj[key]` with Jinja's lookup order (attribute first for `.`, item first
// for `[]`), including Python's str/dict/list methods as bound callables.
Value get_attribute(Interpreter& in, const Value& obj, const std::string& name);
Value get_item(Interpreter& in, const Value& obj, const Value& key);
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);

// globals.cpp: range, dict, namespace, raise_exception, strftime_now, cycler, joiner.
std::vector<std::pair<std::string, Value>> make_globals(Interpreter& in);

// json_io.cpp
Value from_json(const rapidjson::Value& json);
struct JsonOptions {
  std::optional<std::string> indent;  // none: single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string to_json(const Value& v, const JsonOptions& options);

// Binds call arguments to parameter names like a Python signature; unknown keywords are errors.
class ArgBinder {
 public:
  ArgBinder(const std::string& function, CallArgs& args, std::vector<std::string> names, bool extra_positional = false);
  bool has(std::size_t i) const { return slots_[i].has_value(); }
  const Value& get(std::size_t i) const;  // fails if missing
  Value get_or(std::size_t i, Value fallback) const { return has(i) ? *slots_[i] : std::move(fallback); }
  const std::vector<Value>& extra() const { return extra_; }

 private:
  std::string function_;
  std::vector<std::string> names_;
  std::vector<std::optional<Value>> slots_;
  std::vector<Value> extra_;
};

// Python string helpers shared by filters and methods.
std::u32string to_u32(const std::string& s);
std::string from_u32(const std::u32string& s);
bool is_py_space(char32_t c);
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, long long count);
Value py_split(const std::string& s, const Value& sep, long long maxsplit, bool from_right);
std::string percent_format(const std::string& fmt, const Value& args);
std::string str_format(Interpreter& in, const std::string& fmt, CallArgs& args);

}  // namespace sluice::chat
