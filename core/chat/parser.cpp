// Recursive-descent parser following Jinja2's grammar and operator precedence:
//   condexpr < or < and < not < compare (==, in, not in, ...) < + - < ~ < * / // % < ** < unary -
// with postfix `.x`, `[i]`, `(...)` binding tightest and filters/tests applying to the unary operand.
#include "chat/parser.h"

#include <set>

#include "chat/budget.h"
#include "chat/builtins.h"
#include "chat/lexer.h"

namespace sluice::chat {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse_root() {
    Body body = parse_body({});
    if (!pending_unknown_.empty()) {
      const auto& [name, is_filter, line] = pending_unknown_.front();
      fail(std::string("TemplateAssertionError: No ") + (is_filter ? "filter" : "test") + " named '" + name +
           "'. (line " + std::to_string(line) + ")");
    }
    return body;
  }

 private:
  const Token& cur() const { return t_[pos_]; }
  const Token& peek(std::size_t n = 1) const { return t_[std::min(pos_ + n, t_.size() - 1)]; }
  bool is_op(std::string_view op) const { return cur().type == TokenType::Operator && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokenType::Name && cur().text == n; }
  Token next() { return t_[pos_ < t_.size() - 1 ? pos_++ : pos_]; }

  [[noreturn]] void syntax_error(const std::string& what) const {
    fail("TemplateSyntaxError: " + what + " (line " + std::to_string(cur().line) + ")");
  }
  std::string describe(const Token& tok) const {
    switch (tok.type) {
      case TokenType::End: return "end of template";
      case TokenType::BlockEnd: return "end of statement block";
      case TokenType::VarEnd: return "end of print statement";
      case TokenType::Data: return "template data";
      default: return "'" + tok.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) syntax_error("expected '" + std::string(op) + "', got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != TokenType::Name) syntax_error("expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != TokenType::BlockEnd) syntax_error("expected end of statement block, got " + describe(cur()));
    next();
  }

  ExprPtr node(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Limits ---------------------------------------------------------------------------------------
  // The parser recurses for nested constructs and the interpreter for tall expression trees, both
  // on the native stack, so both are bounded here: a template past a limit is a syntax error.

  // One level of parser recursion (brackets, `not`, unary signs, a tag inside a tag, ...).
  class Nesting {
   public:
    explicit Nesting(Parser& p) : p_(p) {
      if (++p_.nesting_ > kMaxParseNesting) {
        --p_.nesting_;
        p_.syntax_error("the template nests too deeply (more than " + std::to_string(kMaxParseNesting) + " levels)");
      }
    }
    ~Nesting() { --p_.nesting_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

   private:
    Parser& p_;
  };

  // Sets e's height from its operands (already sealed) and bounds it. Chains such as a + b + c or
  // x|f|g are built by loops, not recursion, so their height is checked here as each link is added.
  ExprPtr seal(ExprPtr e) {
    int h = 0;
    auto see = [&h](const ExprPtr& child) {
      if (child) h = std::max(h, child->height);
    };
    see(e->target);
    see(e->right);
    see(e->third);
    see(e->slice_start);
    see(e->slice_stop);
    see(e->slice_step);
    for (const auto& item : e->items) see(item);
    for (const auto& kw : e->kwargs) see(kw.second);
    e->height = h + 1;
    if (e->height > kMaxExpressionHeight)
      fail("TemplateSyntaxError: expression nested too deeply (more than " + std::to_string(kMaxExpressionHeight) +
           " operators deep) (line " + std::to_string(e->line) + ")");
    return e;
  }

  // Statements ---------------------------------------------------------------------------------

  // Parses until a block tag whose keyword is in `ends`; leaves pos_ at that keyword.
  Body parse_body(const std::set<std::string>& ends) {
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == TokenType::End) {
        if (!ends.empty()) syntax_error("unexpected end of template, expected one of: " + join(ends));
        return body;
      }
      if (tok.type == TokenType::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Text;
        s->text = tok.text;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == TokenType::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Output;
        s->line = tok.line;
        s->expr = parse_tuple(true);
        if (cur().type != TokenType::VarEnd) syntax_error("expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (tok.type == TokenType::BlockBegin) {
        next();
        if (cur().type == TokenType::Name && ends.count(cur().text)) return body;
        body.push_back(parse_statement());
      } else {
        syntax_error("unexpected " + describe(tok));
      }
    }
  }

  static std::string join(const std::set<std::string>& s) {
    std::string out;
    for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
    return out;
  }

  // Runs `f` with the unknown-filter tolerance of an `if` (soft=true) or a new scope (soft=false).
  template <class F>
  auto with_soft(bool soft, F f) {
    bool saved = soft_;
    soft_ = soft;
    auto r = f();
    soft_ = saved;
    return r;
  }

  StmtPtr make(Stmt::Kind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  void expect_end_tag(const char* name) {
    if (!is_name(name)) syntax_error(std::string("expected '") + name + "'");
    next();
    expect_block_end();
  }

  StmtPtr parse_statement() {
    Nesting nesting(*this);
    int line = cur().line;
    if (cur().type != TokenType::Name) syntax_error("tag name expected");
    std::string kw = next().text;
    if (kw == "if") return with_soft(true, [&] { return parse_if(line); });
    if (kw == "for") return parse_for(line);
    if (kw == "set") return parse_set(line);
    if (kw == "macro") return parse_macro(line);
    if (kw == "call") return parse_call_block(line);
    if (kw == "filter") return parse_filter_block(line);
    if (kw == "break" || kw == "continue") {
      if (loop_depth_ == 0) syntax_error("'" + kw + "' outside of a loop");
      expect_block_end();
      return make(kw == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
    }
    if (kw == "generation") {  // transformers' AssistantTracker tag: renders its body unchanged
      expect_block_end();
      auto s = make(Stmt::Kind::Scope, line);
      s->body = parse_body({"endgeneration"});
      expect_end_tag("endgeneration");
      return s;
    }
    syntax_error("encountered unknown tag '" + kw + "'");
  }

  StmtPtr parse_if(int line) {
    auto s = make(Stmt::Kind::If, line);
    ExprPtr cond = parse_tuple(false);
    expect_block_end();
    while (true) {
      Body body = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      std::string kw = next().text;
      if (kw == "elif") {
        cond = parse_tuple(false);
        expect_block_end();
        continue;
      }
      expect_block_end();
      if (kw == "else") {
        s->else_body = parse_body({"endif"});
        expect_end_tag("endif");
      }
      return s;
    }
  }

  Target parse_target(bool allow_attr) {
    auto one = [&]() -> Target {
      Nesting nesting(*this);
      Target t;
      if (is_op("(")) {
        next();
        t = parse_target_list(allow_attr);
        expect_op(")");
        t.is_tuple = true;
        return t;
      }
      t.name = expect_name();
      if (allow_attr && is_op(".")) {
        next();
        t.attr = expect_name();
      }
      return t;
    };
    Target first = one();
    if (!is_op(",")) return first;
    Target tuple;
    tuple.is_tuple = true;
    tuple.tuple.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (!is_op("(") && cur().type != TokenType::Name) break;
      tuple.tuple.push_back(one());
    }
    return tuple;
  }

  Target parse_target_list(bool allow_attr) {
    Target t = parse_target(allow_attr);
    if (!t.is_tuple) {
      Target tuple;
      tuple.is_tuple = true;
      tuple.tuple.push_back(std::move(t));
      return tuple;
    }
    return t;
  }

  StmtPtr parse_for(int line) {
    auto s = make(Stmt::Kind::For, line);
    s->target = parse_target(false);
    if (!is_name("in")) syntax_error("expected 'in'");
    next();
    s->expr = parse_tuple(false, /*with_condexpr=*/false);
    if (is_name("if")) {
      next();
      s->condition = parse_expression(true);
    }
    if (is_name("recursive")) {
      next();
      s->recursive = true;
    }
    expect_block_end();
    ++loop_depth_;
    s->body = with_soft(false, [&] { return parse_body({"endfor", "else"}); });
    --loop_depth_;
    std::string kw = next().text;
    expect_block_end();
    if (kw == "else") {
      int saved_depth = loop_depth_;
      loop_depth_ = 0;  // `else` runs outside the loop: break/continue are not allowed there
      s->else_body = with_soft(false, [&] { return parse_body({"endfor"}); });
      loop_depth_ = saved_depth;
      expect_end_tag("endfor");
    }
    return s;
  }

  StmtPtr parse_set(int line) {
    Target target = parse_target(true);
    if (is_op("=")) {
      next();
      auto s = make(Stmt::Kind::Set, line);
      s->target = std::move(target);
      s->expr = parse_tuple(false);
      expect_block_end();
      return s;
    }
    auto s = make(Stmt::Kind::SetBlock, line);
    s->target = std::move(target);
    if (is_op("|")) s->filter = parse_filter_chain(nullptr);
    expect_block_end();
    s->body = parse_body({"endset"});
    expect_end_tag("endset");
    return s;
  }

  void parse_params(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (is_op("=")) {
        next();
        p.default_value = parse_expression(true);
      } else if (!params.empty() && params.back().default_value) {
        syntax_error("non-default argument follows default argument");
      }
      params.push_back(std::move(p));
    }
    next();
  }

  StmtPtr parse_macro(int line) {
    auto s = make(Stmt::Kind::Macro, line);
    s->name = expect_name();
    parse_params(s->params);
    expect_block_end();
    int saved_depth = loop_depth_;
    loop_depth_ = 0;
    s->body = with_soft(false, [&] { return parse_body({"endmacro"}); });
    loop_depth_ = saved_depth;
    expect_end_tag("endmacro");
    return s;
  }

  StmtPtr parse_call_block(int line) {
    auto s = make(Stmt::Kind::CallBlock, line);
    if (is_op("(")) parse_params(s->params);
    s->expr = parse_expression(true);
    if (s->expr->kind != Expr::Kind::Call) syntax_error("expected call");
    expect_block_end();
    s->body = with_soft(false, [&] { return parse_body({"endcall"}); });
    expect_end_tag("endcall");
    return s;
  }

  StmtPtr parse_filter_block(int line) {
    auto s = make(Stmt::Kind::FilterBlock, line);
    s->filter = parse_filter_chain(nullptr, /*first_pipe=*/false);
    expect_block_end();
    s->body = with_soft(false, [&] { return parse_body({"endfilter"}); });
    expect_end_tag("endfilter");
    return s;
  }

  // Expressions --------------------------------------------------------------------------------

  // A comma-separated list becomes a tuple (`{% set a, b = 1, 2 %}`, `{{ 1, 2 }}`).
  ExprPtr parse_tuple(bool allow_empty_end, bool with_condexpr = true) {
    int line = cur().line;
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto t = node(Expr::Kind::Tuple, line);
    t->items.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (cur().type == TokenType::BlockEnd || cur().type == TokenType::VarEnd || is_op(")") || is_name("if") ||
          is_name("recursive"))
        break;
      t->items.push_back(parse_expression(with_condexpr));
    }
    return seal(std::move(t));
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    Nesting nesting(*this);  // `a if b else c if d else ...` recurses once per `else`
    std::size_t pending_before = pending_unknown_.size();
    int line = cur().line;
    ExprPtr expr1 = parse_or();
    while (is_name("if")) {
      next();
      auto c = node(Expr::Kind::CondExpr, line);
      c->target = parse_or();
      c->right = std::move(expr1);
      if (is_name("else")) {
        next();
        c->third = parse_condexpr();
      }
      expr1 = seal(std::move(c));
      // Jinja compiles conditional expressions in a "soft" frame: unknown filters there fail only
      // when evaluated.
      pending_unknown_.resize(std::min(pending_unknown_.size(), pending_before));
    }
    return expr1;
  }

  ExprPtr binary(Expr::Kind kind, std::string op, ExprPtr a, ExprPtr b, int line) {
    auto e = node(kind, line);
    e->name = std::move(op);
    e->target = std::move(a);
    e->right = std::move(b);
    return seal(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      int line = next().line;
      left = binary(Expr::Kind::Or, "or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      int line = next().line;
      left = binary(Expr::Kind::And, "and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Nesting nesting(*this);
      int line = next().line;
      auto e = node(Expr::Kind::Not, line);
      e->target = parse_not();
      return seal(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr left = parse_math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::Operator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" || cur().text == "<=" ||
           cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == TokenType::Name && peek().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(Expr::Kind::Compare, line);
        cmp->target = std::move(left);
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
      cmp = seal(std::move(cmp));
    }
    return cmp ? std::move(cmp) : std::move(left);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      auto tok = next();
      left = binary(Expr::Kind::Binary, tok.text, std::move(left), parse_concat(), tok.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      auto tok = next();
      left = binary(Expr::Kind::Binary, "~", std::move(left), parse_math2(), tok.line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      auto tok = next();
      left = binary(Expr::Kind::Binary, tok.text, std::move(left), parse_pow(), tok.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {  // left-associative in Jinja (unlike Python)
      auto tok = next();
      left = binary(Expr::Kind::Binary, "**", std::move(left), parse_unary(true), tok.line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    Nesting nesting(*this);  // every bracket nests through here
    int line = cur().line;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      bool neg = next().text == "-";
      e = node(neg ? Expr::Kind::Neg : Expr::Kind::Pos, line);
      e->target = parse_unary(false);
      e = seal(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    int line = tok.line;
    if (tok.type == TokenType::Name) {
      std::string n = next().text;
      auto lit = node(Expr::Kind::Literal, line);
      if (n == "true" || n == "True") lit->value = Value(true);
      else if (n == "false" || n == "False") lit->value = Value(false);
      else if (n == "none" || n == "None") lit->value = Value::none();
      else {
        auto e = node(Expr::Kind::Name, line);
        e->name = n;
        return e;
      }
      return lit;
    }
    if (tok.type == TokenType::String) {
      std::string s;
      while (cur().type == TokenType::String) s += next().text;  // adjacent literals concatenate
      auto lit = node(Expr::Kind::Literal, line);
      lit->value = Value(std::move(s));
      return lit;
    }
    if (tok.type == TokenType::Integer) {
      auto lit = node(Expr::Kind::Literal, line);
      try {
        lit->value = Value(static_cast<std::int64_t>(std::stoll(next().text)));
      } catch (const std::exception&) {
        syntax_error("integer literal out of range");
      }
      return lit;
    }
    if (tok.type == TokenType::Float) {
      auto lit = node(Expr::Kind::Literal, line);
      lit->value = Value(std::stod(next().text));
      return lit;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        auto t = node(Expr::Kind::Tuple, line);
        return t;
      }
      ExprPtr first = parse_expression(true);
      if (is_op(")")) {
        next();
        return first;
      }
      auto t = node(Expr::Kind::Tuple, line);
      t->items.push_back(std::move(first));
      while (is_op(",")) {
        next();
        if (is_op(")")) break;
        t->items.push_back(parse_expression(true));
      }
      expect_op(")");
      return seal(std::move(t));
    }
    if (is_op("[")) {
      next();
      auto l = node(Expr::Kind::List, line);
      while (!is_op("]")) {
        if (!l->items.empty()) expect_op(",");
        if (is_op("]")) break;
        l->items.push_back(parse_expression(true));
      }
      next();
      return seal(std::move(l));
    }
    if (is_op("{")) {
      next();
      auto d = node(Expr::Kind::Dict, line);
      while (!is_op("}")) {
        if (!d->items.empty()) expect_op(",");
        if (is_op("}")) break;
        d->items.push_back(parse_expression(true));
        expect_op(":");
        d->items.push_back(parse_expression(true));
      }
      next();
      return seal(std::move(d));
    }
    syntax_error("unexpected " + describe(tok));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      int line = cur().line;
      if (is_op(".")) {
        next();
        if (cur().type == TokenType::Integer) {
          auto g = node(Expr::Kind::GetItem, line);
          g->target = std::move(e);
          g->right = node(Expr::Kind::Literal, line);
          g->right->value = Value(static_cast<std::int64_t>(std::stoll(next().text)));
          e = seal(std::move(g));
          continue;
        }
        auto g = node(Expr::Kind::GetAttr, line);
        g->name = expect_name();
        g->target = std::move(e);
        e = seal(std::move(g));
      } else if (is_op("[")) {
        next();
        e = parse_subscript(std::move(e), line);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, int line) {
    // Either an index expression or a slice a:b:c with optional parts.
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (true) {
      if (is_op(":")) {
        next();
        is_slice = true;
        if (++part > 2) syntax_error("invalid slice");
        continue;
      }
      if (is_op("]")) break;
      if (parts[part]) syntax_error("expected ']'");
      parts[part] = parse_expression(true);
      if (!is_slice && is_op(",")) {  // x[a, b] → tuple index
        auto t = node(Expr::Kind::Tuple, line);
        t->items.push_back(std::move(parts[0]));
        while (is_op(",")) {
          next();
          if (is_op("]")) break;
          t->items.push_back(parse_expression(true));
        }
        parts[0] = seal(std::move(t));
      }
    }
    next();
    if (!is_slice) {
      if (!parts[0]) syntax_error("expected subscript expression");
      auto g = node(Expr::Kind::GetItem, line);
      g->target = std::move(target);
      g->right = std::move(parts[0]);
      return seal(std::move(g));
    }
    auto s = node(Expr::Kind::Slice, line);
    s->target = std::move(target);
    s->slice_start = std::move(parts[0]);
    s->slice_stop = std::move(parts[1]);
    s->slice_step = std::move(parts[2]);
    return seal(std::move(s));
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (cur().type == TokenType::Name && peek().type == TokenType::Operator && peek().text == "=") {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e.kwargs.empty()) syntax_error("positional argument after keyword argument");
        e.items.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr target) {
    auto c = node(Expr::Kind::Call, cur().line);
    c->target = std::move(target);
    parse_call_args(*c);
    return seal(std::move(c));
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e), true, /*single=*/true);
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  void note_unknown(Expr& e, bool is_filter) {
    e.deferred_unknown = true;
    if (!soft_) pending_unknown_.emplace_back(e.name, is_filter, e.line);
  }

  // `| name(args)` — one filter, or a chain of them (filter blocks and `set x | f` blocks).
  ExprPtr parse_filter_chain(ExprPtr target, bool first_pipe = true, bool single = false) {
    bool need_pipe = first_pipe;
    do {
      if (need_pipe) expect_op("|");
      need_pipe = true;
      auto f = node(Expr::Kind::Filter, cur().line);
      f->name = expect_name();
      while (is_op(".")) {
        next();
        f->name += "." + expect_name();
      }
      if (is_op("(")) parse_call_args(*f);
      if (!is_known_filter(f->name)) note_unknown(*f, true);
      f->target = std::move(target);
      target = seal(std::move(f));
    } while (!single && is_op("|"));
    return target;
  }

  ExprPtr parse_test(ExprPtr target) {
    int line = next().line;  // `is`
    bool negated = false;
    if (is_name("not")) {
      next();
      negated = true;
    }
    auto t = node(Expr::Kind::Test, line);
    t->name = expect_name();
    while (is_op(".")) {
      next();
      t->name += "." + expect_name();
    }
    t->target = std::move(target);
    if (is_op("(")) {
      parse_call_args(*t);
    } else if ((cur().type == TokenType::Name || cur().type == TokenType::String || cur().type == TokenType::Integer ||
                cur().type == TokenType::Float || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) syntax_error("You cannot chain multiple tests with is");
      t->items.push_back(parse_postfix(parse_primary()));
    }
    if (!is_known_test(t->name)) note_unknown(*t, false);
    t = seal(std::move(t));
    if (!negated) return t;
    auto n = node(Expr::Kind::Not, line);
    n->target = std::move(t);
    return seal(std::move(n));
  }

  std::vector<Token> t_;
  std::size_t pos_ = 0;
  int loop_depth_ = 0;
  bool soft_ = false;
  int nesting_ = 0;
  std::vector<std::tuple<std::string, bool, int>> pending_unknown_;
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(tokenize(source)).parse_root(); }

}  // namespace sluice::chat
