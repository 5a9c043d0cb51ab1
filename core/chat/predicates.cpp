// Jinja's tests (`x is defined`, `x is string`, ...), with the Python type checks they rely on.
#include <set>

#include "chat/builtins.h"
#include "chat/interpreter.h"

namespace sluice::chat {

static const std::set<std::string>& test_names() {
  static const std::set<std::string> names = {
      "defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
      "boolean", "true", "false", "equalto", "==", "eq", "ne", "!=", "lt", "<", "gt", ">", "le", "<=", "ge", ">=",
      "in", "odd", "even", "divisibleby", "callable", "sameas", "lower", "upper", "escaped", "filter", "test"};
  return names;
}

bool is_known_test(const std::string& name) { return test_names().count(name) > 0; }

bool call_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  auto arg = [&](const char* fn) -> const Value& {
    if (args.positional.empty()) {
      if (!args.keyword.empty()) return args.keyword.front().second;
      fail(std::string("TypeError: test '") + fn + "' requires an argument");
    }
    return args.positional.front();
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict() && v.as_dict()->kind == DictObject::Kind::Dict;
  if (name == "iterable") return v.is_list() || v.is_string() || (v.is_dict() && v.as_dict()->kind == DictObject::Kind::Dict) || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_string() || (v.is_dict() && v.as_dict()->kind == DictObject::Kind::Dict);
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "equalto" || name == "==" || name == "eq") return equals(v, arg("eq"));
  if (name == "ne" || name == "!=") return !equals(v, arg("ne"));
  if (name == "lt" || name == "<") return compare(v, arg("lt")) < 0;
  if (name == "gt" || name == ">") return compare(v, arg("gt")) > 0;
  if (name == "le" || name == "<=") return compare(v, arg("le")) <= 0;
  if (name == "ge" || name == ">=") return compare(v, arg("ge")) >= 0;
  if (name == "sameas") {
    const Value& o = arg("sameas");
    if (v.storage().index() != o.storage().index()) return false;
    if (v.is_list()) return v.as_list() == o.as_list();
    if (v.is_dict()) return v.as_dict() == o.as_dict();
    if (v.is_callable()) return v.as_callable() == o.as_callable();
    if (v.is_string()) return false;  // distinct str objects are rarely identical; Python small-int caching aside
    return equals(v, o);
  }
  if (name == "in") {
    const Value& seq = arg("in");
    if (seq.is_string()) return v.is_string() && seq.as_string().find(v.as_string()) != std::string::npos;
    if (seq.is_dict()) return seq.as_dict()->find(v) != nullptr;
    for (const auto& item : iterate(seq))
      if (equals(item, v)) return true;
    return false;
  }
  if (name == "odd" || name == "even") {
    if (v.is_undefined()) fail_undefined(v);
    if (!(v.is_int() || v.is_bool())) fail("TypeError: test '" + name + "' requires an integer");
    bool odd = (v.to_int() % 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "divisibleby") {
    const Value& d = arg("divisibleby");
    if (d.to_int() == 0) fail("ZeroDivisionError: integer division or modulo by zero");
    return v.to_int() % d.to_int() == 0;
  }
  if (name == "lower" || name == "upper") {
    std::string s = to_str(v);
    return name == "lower" ? py_lower(s) == s : py_upper(s) == s;
  }
  if (name == "filter") return v.is_string() && is_known_filter(v.as_string());
  if (name == "test") return v.is_string() && is_known_test(v.as_string());
  (void)in;
  fail("TemplateRuntimeError: No test named '" + name + "' found.");
}

}  // namespace sluice::chat
