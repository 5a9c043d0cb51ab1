// Tree-walking evaluation with Jinja2's scoping: a for-loop iteration, a macro call and a call
// block each get a fresh child scope (so `set` inside a loop does not leak out — templates use
// namespace() for that), while `if` bodies share their enclosing scope.
#include "chat/interpreter.h"

#include <cmath>
#include <optional>

#include "chat/builtins.h"

namespace sluice::chat {

Interpreter::Interpreter(std::chrono::system_clock::time_point now, RenderOptions options)
    : now_(now), options_(options), meter_(options_.budget) {}

void Interpreter::append_output(std::string& out, const std::string& text) {
  // Captured text (set blocks, macro bodies) counts too: it is output on its way somewhere.
  if (out.size() + text.size() > options_.budget.max_output_bytes)
    fail("TemplateRuntimeError: the output exceeds the size budget (" + std::to_string(options_.budget.max_output_bytes) +
         " bytes)");
  out += text;
}

std::string Interpreter::render(const Body& body, const rapidjson::Value& variables) {
  auto globals = std::make_shared<Scope>();
  for (auto& [name, value] : make_globals(*this)) globals->vars[name] = std::move(value);
  if (variables.IsObject()) {
    for (auto it = variables.MemberBegin(); it != variables.MemberEnd(); ++it)
      globals->vars[it->name.GetString()] = from_json(it->value);
  }
  auto root = std::make_shared<Scope>();
  root->parent = globals;
  meter_.start_clock();
  std::string out;
  exec_body(body, root, out);
  return out;
}

Value Interpreter::lookup(const std::string& name, const ScopePtr& scope) const {
  for (const Scope* s = scope.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  return Value::undefined("'" + name + "' is undefined");
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec(*s, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  DepthGuard guard(meter_);
  switch (s.kind) {
    case Stmt::Kind::Text:
      append_output(out, s.text);
      return Flow::Normal;
    case Stmt::Kind::Output: {
      Value v = eval(*s.expr, scope);
      if (v.is_undefined() && v.as_undefined().unsafe) fail_undefined(v);
      append_output(out, to_str(v));
      return Flow::Normal;
    }
    case Stmt::Kind::If:
      for (const auto& [cond, body] : s.branches) {
        if (truthy(eval(*cond, scope))) return exec_body(body, scope, out);
      }
      return exec_body(s.else_body, scope, out);
    case Stmt::Kind::For:
      exec_for(s, scope, out);
      return Flow::Normal;
    case Stmt::Kind::Set:
      assign(s.target, eval(*s.expr, scope), scope);
      return Flow::Normal;
    case Stmt::Kind::SetBlock: {
      std::string captured;
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      exec_body(s.body, inner, captured);
      Value v(std::move(captured));
      if (s.filter) v = eval_filter(*s.filter, scope, &v);
      assign(s.target, std::move(v), scope);
      return Flow::Normal;
    }
    case Stmt::Kind::Macro:
      exec_macro_def(s, scope);
      return Flow::Normal;
    case Stmt::Kind::CallBlock:
      exec_call_block(s, scope, out);
      return Flow::Normal;
    case Stmt::Kind::FilterBlock: {
      std::string captured;
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      exec_body(s.body, inner, captured);
      Value v(std::move(captured));
      append_output(out, to_str(eval_filter(*s.filter, scope, &v)));
      return Flow::Normal;
    }
    case Stmt::Kind::Break: return Flow::Break;
    case Stmt::Kind::Continue: return Flow::Continue;
    case Stmt::Kind::Scope: return exec_body(s.body, scope, out);
  }
  return Flow::Normal;
}

void Interpreter::assign(const Target& t, Value v, const ScopePtr& scope) {
  if (t.is_tuple) {
    std::vector<Value> items = iterate(v);
    if (items.size() != t.tuple.size()) {
      fail(std::string("ValueError: ") + (items.size() < t.tuple.size() ? "not enough" : "too many") +
           " values to unpack (expected " + std::to_string(t.tuple.size()) + ", got " + std::to_string(items.size()) + ")");
    }
    for (std::size_t i = 0; i < items.size(); ++i) assign(t.tuple[i], std::move(items[i]), scope);
    return;
  }
  if (!t.attr.empty()) {
    Value obj = lookup(t.name, scope);
    if (!obj.is_dict() || obj.as_dict()->kind != DictObject::Kind::Namespace)
      fail("TemplateRuntimeError: cannot assign attribute on non-namespace object");
    meter_.track_mutable(obj.as_dict());
    obj.as_dict()->set(Value(t.attr), std::move(v));
    return;
  }
  scope->vars[t.name] = std::move(v);
}

void Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  Value iterable = eval(*s.expr, scope);
  if (iterable.is_undefined() && iterable.as_undefined().unsafe) fail_undefined(iterable);
  std::vector<Value> items = iterate(iterable);
  if (s.condition) {
    // The inline filter sees the loop target but not `loop`.
    std::vector<Value> kept;
    for (auto& item : items) {
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      assign(s.target, item, probe);
      if (truthy(eval(*s.condition, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const std::int64_t n = static_cast<std::int64_t>(items.size());
  for (std::int64_t i = 0; i < n; ++i) {
    meter_.step(1);
    auto loop = std::make_shared<DictObject>();
    loop->kind = DictObject::Kind::Loop;
    loop->items = {
        {Value("index"), Value(i + 1)},
        {Value("index0"), Value(i)},
        {Value("revindex"), Value(n - i)},
        {Value("revindex0"), Value(n - i - 1)},
        {Value("first"), Value(i == 0)},
        {Value("last"), Value(i == n - 1)},
        {Value("length"), Value(n)},
        {Value("depth"), Value(1)},
        {Value("depth0"), Value(0)},
        {Value("previtem"), i > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
        {Value("nextitem"), i + 1 < n ? items[i + 1] : Value::undefined("there is no next item")},
        {Value("cycle"), make_callable("cycle", [i](Interpreter&, CallArgs& args) -> Value {
           if (args.positional.empty()) fail("TypeError: no items for cycling given");
           return args.positional[static_cast<std::size_t>(i) % args.positional.size()];
         })},
    };
    auto iteration = std::make_shared<Scope>();
    iteration->parent = scope;
    assign(s.target, items[i], iteration);
    iteration->vars["loop"] = Value(loop);
    Flow f = exec_body(s.body, iteration, out);
    if (f == Flow::Break) break;
  }
  if (n == 0) exec_body(s.else_body, scope, out);
}

Value Interpreter::make_macro(const std::string& name, const std::vector<MacroParam>& params, const Body& body,
                              const ScopePtr& defining_scope) {
  // The macro is stored in the scope it closes over, so it holds that scope weakly (no cycle);
  // the scope outlives every call that can reach the macro.
  std::weak_ptr<Scope> weak_scope = defining_scope;
  auto fn = [name, &params, &body, weak_scope](Interpreter& in, CallArgs& args) -> Value {
    auto scope = std::make_shared<Scope>();
    scope->parent = weak_scope.lock();
    if (!scope->parent) fail("TemplateRuntimeError: macro '" + name + "' called outside its scope");
    std::vector<Value> varargs;
    for (std::size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) scope->vars[params[i].name] = args.positional[i];
      else varargs.push_back(args.positional[i]);
    }
    auto kwargs = std::make_shared<DictObject>();
    for (auto& [k, v] : args.keyword) {
      bool is_param = false;
      for (std::size_t i = 0; i < params.size(); ++i) {
        if (params[i].name != k) continue;
        if (i < args.positional.size())
          fail("TypeError: macro '" + name + "' got multiple values for argument '" + k + "'");
        is_param = true;
        scope->vars[k] = v;
      }
      if (!is_param) {
        if (k == "caller") scope->vars["caller"] = v;
        else kwargs->set(Value(k), v);
      }
    }
    for (const auto& p : params) {
      if (scope->vars.count(p.name)) continue;
      scope->vars[p.name] = p.default_value ? in.eval(*p.default_value, scope)
                                            : Value::undefined("parameter '" + p.name + "' was not provided");
    }
    scope->vars["varargs"] = Value::list(std::move(varargs));
    scope->vars["kwargs"] = Value(kwargs);
    std::string out;
    in.exec_body(body, scope, out);
    return Value(std::move(out));
  };
  auto c = std::make_shared<Callable>();
  c->name = name;
  c->fn = std::move(fn);
  c->is_macro = true;
  return Value(std::move(c));
}

void Interpreter::exec_macro_def(const Stmt& s, const ScopePtr& scope) {
  scope->vars[s.name] = make_macro(s.name, s.params, s.body, scope);
}

void Interpreter::exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out) {
  const Expr& call = *s.expr;
  Value callee = eval(*call.target, scope);
  CallArgs args;
  eval_args(call, scope, args);
  args.keyword.emplace_back("caller", make_macro("caller", s.params, s.body, scope));
  append_output(out, to_str(this->call(callee, args)));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable()) fail("TypeError: '" + type_name(callee) + "' object is not callable");
  DepthGuard guard(meter_);
  return callee.as_callable()->fn(*this, args);
}

void Interpreter::eval_args(const Expr& e, const ScopePtr& scope, CallArgs& args) {
  for (const auto& a : e.items) args.positional.push_back(eval(*a, scope));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v, scope));
}

Value Interpreter::eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_input) {
  DepthGuard guard(meter_);  // a chain x|f|g|... recurses here, not through eval
  // A filter block's chain ends in a filter without a target: that one receives the block's text.
  Value target;
  if (!e.target) target = block_input ? *block_input : Value();
  else if (e.target->kind == Expr::Kind::Filter) target = eval_filter(*e.target, scope, block_input);
  else target = eval(*e.target, scope);
  if (e.deferred_unknown) fail("TemplateRuntimeError: No filter named '" + e.name + "' found.");
  CallArgs args;
  eval_args(e, scope, args);
  return call_filter(*this, e.name, target, args);
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  DepthGuard guard(meter_);
  switch (e.kind) {
    case Expr::Kind::Literal: return e.value;
    case Expr::Kind::Name: return lookup(e.name, scope);
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      std::vector<Value> items;
      for (const auto& i : e.items) items.push_back(eval(*i, scope));
      return e.kind == Expr::Kind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case Expr::Kind::Dict: {
      Value d = Value::dict();
      for (std::size_t i = 0; i + 1 < e.items.size(); i += 2)
        d.as_dict()->set(eval(*e.items[i], scope), eval(*e.items[i + 1], scope));
      return d;
    }
    case Expr::Kind::GetAttr: {
      Value obj = eval(*e.target, scope);
      if (obj.is_undefined()) fail_undefined(obj);
      return get_attribute(*this, obj, e.name);
    }
    case Expr::Kind::GetItem: {
      Value obj = eval(*e.target, scope);
      if (obj.is_undefined()) fail_undefined(obj);
      return get_item(*this, obj, eval(*e.right, scope));
    }
    case Expr::Kind::Slice: {
      Value obj = eval(*e.target, scope);
      if (obj.is_undefined()) fail_undefined(obj);
      auto part = [&](const ExprPtr& p) { return p ? eval(*p, scope) : Value::none(); };
      return slice_value(obj, part(e.slice_start), part(e.slice_stop), part(e.slice_step));
    }
    case Expr::Kind::Call: {
      Value callee = eval(*e.target, scope);
      CallArgs args;
      eval_args(e, scope, args);
      return call(callee, args);
    }
    case Expr::Kind::Filter: return eval_filter(e, scope, nullptr);
    case Expr::Kind::Test: {
      if (e.deferred_unknown) fail("TemplateRuntimeError: No test named '" + e.name + "' found.");
      Value target = eval(*e.target, scope);
      CallArgs args;
      eval_args(e, scope, args);
      return Value(call_test(*this, e.name, target, args));
    }
    case Expr::Kind::Not: return Value(!truthy(eval(*e.target, scope)));
    case Expr::Kind::Neg:
    case Expr::Kind::Pos: {
      Value v = eval(*e.target, scope);
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number()) fail("TypeError: bad operand type for unary " + std::string(e.kind == Expr::Kind::Neg ? "-" : "+") + ": '" + type_name(v) + "'");
      if (e.kind == Expr::Kind::Pos) return v.is_bool() ? Value(v.to_int()) : v;
      if (v.is_float()) return Value(-v.as_float());
      return Value(-v.to_int());
    }
    case Expr::Kind::Binary: return eval_binary(e.name, eval(*e.target, scope), eval(*e.right, scope));
    case Expr::Kind::Compare: {
      Value left = eval(*e.target, scope);
      for (std::size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.items[i], scope);
        if (!eval_compare(e.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case Expr::Kind::And: {
      Value a = eval(*e.target, scope);
      return truthy(a) ? eval(*e.right, scope) : a;
    }
    case Expr::Kind::Or: {
      Value a = eval(*e.target, scope);
      return truthy(a) ? a : eval(*e.right, scope);
    }
    case Expr::Kind::CondExpr:
      if (truthy(eval(*e.target, scope))) return eval(*e.right, scope);
      if (e.third) return eval(*e.third, scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
  }
  return Value();
}

namespace {

Value int_or_float(long double exact, std::int64_t value, bool overflow) {
  if (overflow) return Value(static_cast<double>(exact));  // beyond int64: approximate as float
  return Value(value);
}

// Exponentiation by squaring: log2(exp) multiplications; nullopt when the result overflows int64.
std::optional<std::int64_t> int_pow(std::int64_t base, std::int64_t exp) {
  std::int64_t result = 1;
  while (true) {
    if ((exp & 1) && __builtin_mul_overflow(result, base, &result)) return std::nullopt;
    exp >>= 1;
    if (exp == 0) return result;
    // Squaring overflows only when base^2 (a factor of the result) does not fit, i.e. |base| >= 2^32.
    if (__builtin_mul_overflow(base, base, &base)) return std::nullopt;
  }
}

// What copying a list's items costs in memory: copies share nested lists and dicts but not strings.
std::size_t copy_bytes(const ListObject& list) {
  std::size_t bytes = 0;
  for (const auto& v : list.items) bytes += sizeof(Value) + (v.is_string() ? v.as_string().size() : 0);
  return bytes;
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(to_str(a) + to_str(b));
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool numeric = a.is_number() && b.is_number();
  const bool any_float = a.is_float() || b.is_float();
  auto type_error = [&]() -> Value {
    fail("TypeError: unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  };
  if (op == "+") {
    if (numeric) {
      if (any_float) return Value(a.to_double() + b.to_double());
      std::int64_t r;
      bool o = __builtin_add_overflow(a.to_int(), b.to_int(), &r);
      return int_or_float(static_cast<long double>(a.to_int()) + b.to_int(), r, o);
    }
    if (a.is_string() && b.is_string() && (a.is_markup() || b.is_markup())) {
      CallArgs none;
      Value x = a.is_markup() ? a : call_filter(*this, "escape", a, none);
      Value y = b.is_markup() ? b : call_filter(*this, "escape", b, none);
      return Value(x.as_string() + y.as_string()).mark_safe();
    }
    if (a.is_string() && b.is_string()) {
      check_size(a.as_string().size() + b.as_string().size(), "a concatenated string");
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.as_list()->is_tuple == b.as_list()->is_tuple) {
      check_size(copy_bytes(*a.as_list()) + copy_bytes(*b.as_list()), "a concatenated list");
      meter_.step(a.as_list()->items.size() + b.as_list()->items.size());
      std::vector<Value> items = a.as_list()->items;
      items.insert(items.end(), b.as_list()->items.begin(), b.as_list()->items.end());
      return a.as_list()->is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    if (a.is_string() || b.is_string())
      fail("TypeError: can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
    return type_error();
  }
  if (op == "-") {
    if (!numeric) return type_error();
    if (any_float) return Value(a.to_double() - b.to_double());
    std::int64_t r;
    bool o = __builtin_sub_overflow(a.to_int(), b.to_int(), &r);
    return int_or_float(static_cast<long double>(a.to_int()) - b.to_int(), r, o);
  }
  if (op == "*") {
    if (numeric) {
      if (any_float) return Value(a.to_double() * b.to_double());
      std::int64_t r;
      bool o = __builtin_mul_overflow(a.to_int(), b.to_int(), &r);
      return int_or_float(static_cast<long double>(a.to_int()) * b.to_int(), r, o);
    }
    const Value* seq = (a.is_string() || a.is_list()) ? &a : &b;
    const Value* count = seq == &a ? &b : &a;
    if (!(seq->is_string() || seq->is_list()) || !(count->is_int() || count->is_bool())) return type_error();
    std::int64_t n = std::max<std::int64_t>(0, count->to_int());
    if (seq->is_string()) {
      std::string s;
      s.reserve(checked_size(n, seq->as_string().size(), "a repeated string"));
      for (std::int64_t i = 0; i < n && !seq->as_string().empty(); ++i) s += seq->as_string();
      return Value(std::move(s));
    }
    checked_size(n, copy_bytes(*seq->as_list()), "a repeated list");
    meter_.step(static_cast<std::uint64_t>(n) * seq->as_list()->items.size());
    std::vector<Value> items;
    for (std::int64_t i = 0; i < n && !seq->as_list()->items.empty(); ++i)
      items.insert(items.end(), seq->as_list()->items.begin(), seq->as_list()->items.end());
    return seq->as_list()->is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  if (op == "/") {
    if (!numeric) return type_error();
    if (b.to_double() == 0) fail("ZeroDivisionError: division by zero");
    return Value(a.to_double() / b.to_double());
  }
  if (op == "//") {
    if (!numeric) return type_error();
    if (b.to_double() == 0) fail("ZeroDivisionError: integer division or modulo by zero");
    if (any_float) return Value(std::floor(a.to_double() / b.to_double()));
    std::int64_t x = a.to_int(), y = b.to_int();
    if (x == INT64_MIN && y == -1) return Value(-static_cast<double>(x));
    std::int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    return Value(q);
  }
  if (op == "%") {
    if (a.is_string()) return Value(percent_format(a.as_string(), b));
    if (!numeric) return type_error();
    if (b.to_double() == 0) fail("ZeroDivisionError: integer division or modulo by zero");
    if (any_float) return Value(py_fmod(a.to_double(), b.to_double()));
    std::int64_t x = a.to_int(), y = b.to_int();
    if (y == -1) return Value(std::int64_t{0});
    std::int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }
  if (op == "**") {
    if (!numeric) return type_error();
    if (!any_float && b.to_int() >= 0) {
      // Python's ints are unbounded; ours are 64-bit, so a power that does not fit is an error
      // rather than a silently rounded float.
      if (auto r = int_pow(a.to_int(), b.to_int())) return Value(*r);
      fail("OverflowError: " + std::to_string(a.to_int()) + " ** " + std::to_string(b.to_int()) +
           " does not fit in a 64-bit integer");
    }
    if (a.to_double() == 0 && b.to_double() < 0) fail("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    return Value(std::pow(a.to_double(), b.to_double()));
  }
  fail("TemplateSyntaxError: unknown operator " + op);
}

bool Interpreter::eval_compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) {
      if (a.is_undefined()) fail_undefined(a);
      if (!a.is_string()) fail("TypeError: 'in <string>' requires string as left operand, not " + type_name(a));
      found = b.as_string().find(a.as_string()) != std::string::npos;
    } else if (b.is_dict()) {
      found = b.as_dict()->find(a) != nullptr;
    } else if (b.is_list()) {
      for (const auto& item : b.as_list()->items)
        if (equals(item, a)) found = true;
    } else if (b.is_undefined()) {
      if (b.as_undefined().unsafe) fail_undefined(b);
      found = false;  // Undefined iterates as empty
    } else {
      fail("TypeError: argument of type '" + type_name(b) + "' is not iterable");
    }
    return op == "in" ? found : !found;
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  int c = compare(a, b);
  if (op == "<") return c < 0;
  if (op == ">") return c > 0;
  if (op == "<=") return c <= 0;
  if (op == ">=") return c >= 0;
  fail("TemplateSyntaxError: unknown comparison " + op);
}

}  // namespace sluice::chat
