#pragma once
// Executes a parsed template. One Interpreter renders one template once; it owns the variable
// scopes and the meter that holds the render to its budget (chat/budget.h).
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>

#include <rapidjson/document.h>

#include "chat/ast.h"
#include "chat/budget.h"
#include "chat/meter.h"

namespace sluice::chat {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  Interpreter(std::chrono::system_clock::time_point now, RenderOptions options);

  std::string render(const Body& body, const rapidjson::Value& variables);

  // Used by the built-ins.
  Value call(const Value& callee, CallArgs& args);
  std::chrono::system_clock::time_point now() const { return now_; }
  const RenderOptions& options() const { return options_; }
  RenderMeter& meter() { return meter_; }

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  void exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
  void exec_macro_def(const Stmt& s, const ScopePtr& scope);
  void exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out);
  void assign(const Target& t, Value v, const ScopePtr& scope);
  Value make_macro(const std::string& name, const std::vector<MacroParam>& params, const Body& body,
                   const ScopePtr& defining_scope);

  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_input);
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  bool eval_compare(const std::string& op, const Value& a, const Value& b);
  void eval_args(const Expr& e, const ScopePtr& scope, CallArgs& args);
  Value lookup(const std::string& name, const ScopePtr& scope) const;

  void append_output(std::string& out, const std::string& text);

  std::chrono::system_clock::time_point now_;
  RenderOptions options_;
  RenderMeter meter_;
};

}  // namespace sluice::chat
