#pragma once
// The parsed form of a template: expression and statement trees. Plain structs tagged by kind;
// the interpreter walks them directly.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace sluice::chat {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Expr {
  enum class Kind {
    Literal,   // value
    Name,      // name
    List,      // items
    Tuple,     // items
    Dict,      // items as key, value pairs (even/odd)
    GetAttr,   // target.name
    GetItem,   // target[index]
    Slice,     // target[start:stop:step], any of the three may be null
    Call,      // target(args, kwargs)
    Filter,    // target | name(args, kwargs); target null inside a filter block
    Test,      // target is name(args, kwargs)
    Not,       // not target
    Neg,       // -target
    Pos,       // +target
    Binary,    // target op right (arithmetic, ~)
    Compare,   // target op0 items[0] op1 items[1] ...
    And,       // target and right
    Or,        // target or right
    CondExpr,  // right if target else third (third may be null → undefined)
  };
  Kind kind;
  int line = 0;
  int height = 1;  // 1 + the tallest operand: the parser bounds it (evaluation recurses this deep)
  Value value;
  std::string name;               // Name, GetAttr, Filter, Test, Binary op
  std::vector<std::string> ops;   // Compare
  ExprPtr target, right, third;   // operands
  ExprPtr slice_start, slice_stop, slice_step;
  std::vector<ExprPtr> items;     // List/Tuple/Dict items, call/filter/test positional args, Compare operands
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool deferred_unknown = false;  // unknown filter/test inside `if`: an error only when evaluated
};

// An assignment target: a name, a (nested) tuple of targets, or namespace attribute `ns.attr`.
struct Target {
  std::string name;
  std::string attr;  // non-empty: `name.attr`
  std::vector<Target> tuple;
  bool is_tuple = false;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct Stmt {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, Break, Continue, Scope };
  Kind kind;
  int line = 0;
  std::string text;                                  // Text
  ExprPtr expr;                                      // Output, Set value, For iterable, CallBlock call, FilterBlock filter
  std::vector<std::pair<ExprPtr, Body>> branches;    // If: (condition, body) for if and each elif
  Body body;                                         // For/SetBlock/Macro/CallBlock/FilterBlock/Scope body
  Body else_body;                                    // If else, For else
  Target target;                                     // For/Set/SetBlock target
  ExprPtr condition;                                 // For `if` filter
  ExprPtr filter;                                    // SetBlock `| filter` chain
  bool recursive = false;                            // For
  std::string name;                                  // Macro name
  std::vector<MacroParam> params;                    // Macro/CallBlock parameters
};

}  // namespace sluice::chat
