#include "constrain/tool_call_grammar.h"

#include "util/json.h"

namespace sluice::constrain {
namespace {

struct Wrapping {
  std::string open, between, close;  // around the calls, and between two calls
  std::string arguments_key = "arguments";
};

Wrapping wrapping_of(toolcall::Format format) {
  using toolcall::Format;
  switch (format) {
    case Format::kLlama3: return {"", "", "", "parameters"};
    case Format::kMistral: return {"[TOOL_CALLS][", ", ", "]"};
    case Format::kGranite: return {"<|tool_call|>[", ", ", "]"};
    case Format::kApriel: return {"<tool_calls>[", ", ", "]</tool_calls>"};
    case Format::kNemotron: return {"<TOOLCALL>[", ", ", "]</TOOLCALL>"};
    default: return {"<tool_call>\n", "\n</tool_call>\n<tool_call>\n", "\n</tool_call>"};
  }
}

}  // namespace

toolcall::Format forced_call_format(toolcall::Format f) {
  using toolcall::Format;
  switch (f) {
    case Format::kHermes:
    case Format::kLlama3:
    case Format::kMistral:
    case Format::kGranite:
    case Format::kApriel:
    case Format::kNemotron: return f;
    default: return Format::kHermes;
  }
}

Result<ToolCallGrammar> compile_tool_calls(toolcall::Format template_format, const std::vector<ToolSchema>& tools, bool parallel,
                                           int max_calls, const JsonGrammarOptions& options, const GrammarLimits& limits) {
  if (tools.empty()) return make_error("no tools to call");
  const toolcall::Format format = forced_call_format(template_format);
  // Llama 3's form has no list: one call per answer.
  if (format == toolcall::Format::kLlama3) parallel = false;
  const Wrapping w = wrapping_of(format);
  GrammarBuilder b(limits);
  JsonSchemaCompiler compiler(b, options);
  std::vector<uint32_t> arguments;
  for (const ToolSchema& t : tools) {
    Result<uint32_t> rule = t.parameters ? compiler.value_rule(*t.parameters, *t.parameters, "#") : compiler.any_object_rule();
    if (!rule) return make_error("function " + t.name + ": " + rule.message());
    arguments.push_back(*rule);
  }
  auto call_rule = b.declare("call");
  if (!call_rule) return call_rule.error();
  std::vector<GrammarBuilder::Frag> calls;
  for (std::size_t i = 0; i < tools.size(); ++i)
    calls.push_back(b.seq({b.literal("{\"name\": " + json::quote(tools[i].name) + ", \"" + w.arguments_key + "\": "), b.call(arguments[i]),
                           b.literal("}")}));
  if (auto s = b.define(*call_rule, b.alt(calls)); !s) return s.error();
  auto root = b.declare("tool-calls");
  if (!root) return root.error();
  auto more = [&] { return b.seq({b.literal(w.between), b.call(*call_rule)}); };
  GrammarBuilder::Frag body = b.seq({b.literal(w.open), b.call(*call_rule), b.repeat(more, 0, parallel ? max_calls - 1 : 0), b.literal(w.close)});
  if (auto s = b.define(*root, body); !s) return s.error();
  auto grammar = b.finish(*root);
  if (!grammar) return grammar.error();
  return ToolCallGrammar{std::move(*grammar), format};
}

}  // namespace sluice::constrain
