#pragma once
// Executes a parsed template. One Interpreter renders one template once; it owns the variable
// scopes and enforces the limits that keep hostile templates from running away.
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>

#include <rapidjson/document.h>

#include "chat/ast.h"

namespace sluice::chat {

struct RenderOptions {
  // transformers renders with ImmutableSandboxedEnvironment: list.append, dict.update, ... are
  // refused as unsafe. Set true to behave like the plain SandboxedEnvironment instead.
  bool allow_mutation = false;
  std::size_t max_output_bytes = 64u << 20;
  std::size_t max_loop_iterations = 10'000'000;
  int max_call_depth = 200;
};

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
  void count_iterations(std::size_t n);

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
  std::size_t iterations_ = 0;
  int depth_ = 0;
};

}  // namespace sluice::chat
