#pragma once
// Forced tool calls (tool_choice "required" or a named function): a grammar for the model's own
// call syntax wrapped around JSON arguments that follow each function's `parameters` schema.
//
// Formats whose calls carry one JSON object of arguments are written as the model writes them:
// Hermes / Qwen `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`, Llama 3
// `{"name": …, "parameters": {…}}`, Mistral `[TOOL_CALLS][{…}]`, Granite `<|tool_call|>[{…}]`,
// Apriel `<tool_calls>[{…}]</tool_calls>`, Nemotron `<TOOLCALL>[{…}]</TOOLCALL>`. The others (XML
// parameters, DeepSeek / Kimi / harmony channels, Gemma 4's notation) and templates with no call
// syntax fall back to the Hermes form, which the answer is then parsed as.
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "constrain/json_schema.h"
#include "toolcall/tool_call.h"

namespace sluice::constrain {

struct ToolSchema {
  std::string name;
  const rapidjson::Value* parameters = nullptr;  // a JSON Schema object; null: any JSON object
};

struct ToolCallGrammar {
  Grammar grammar;
  toolcall::Format format;  // the syntax the grammar writes (the answer's parser must use it)
};

// The format forced calls are written in for a template's format.
toolcall::Format forced_call_format(toolcall::Format template_format);

// One call of any of `tools` (parallel: one or more, up to max_calls).
Result<ToolCallGrammar> compile_tool_calls(toolcall::Format template_format, const std::vector<ToolSchema>& tools, bool parallel,
                                           int max_calls = 8, const JsonGrammarOptions& options = {}, const GrammarLimits& limits = {});

}  // namespace sluice::constrain
