// Fuzzes the chat-template engine: the input is a template, a NUL byte, then the variables as a JSON
// object (messages, tools, bos_token, ...). Without a NUL, or when the variables are not a JSON object,
// the template renders a small tool-calling conversation. Parse and render errors are fine; a crash,
// a hang or unbounded memory is a finding. The output and step budgets are set below the production
// defaults only so that each execution stays fast; depth and wall time keep theirs.
#include <chrono>

#include "chat/budget.h"
#include "chat/template.h"
#include "fuzz_support.h"
#include "util/json.h"

namespace {

constexpr const char* kDefaultVariables = R"({
  "messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
    {"role": "assistant", "content": "21 °C."}
  ],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
  "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"
})";

const rapidjson::Document& default_variables() {
  static const rapidjson::Document doc = [] {
    auto parsed = sluice::json::parse(kDefaultVariables, "default variables");
    FUZZ_CHECK(parsed && parsed->IsObject());
    return std::move(*parsed);
  }();
  return doc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto [source, variables_text] = fuzz::split_at_nul(input);

  auto tmpl = chat::Template::parse(source);
  if (!tmpl) {
    FUZZ_CHECK(!tmpl.message().empty());
    return 0;
  }
  auto variables = json::parse(variables_text, "variables");
  const rapidjson::Value& vars = variables && variables->IsObject() ? *variables : default_variables();

  chat::RenderOptions options;
  options.budget.max_output_bytes = 1u << 20;
  options.budget.max_steps = 1'000'000;
  options.budget.max_held_bytes = 16u << 20;
  // A fixed clock keeps strftime_now reproducible.
  const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1795000000));
  auto rendered = tmpl->render(vars, now, options);
  if (!rendered) FUZZ_CHECK(!rendered.message().empty());
  else FUZZ_CHECK(rendered->size() <= options.budget.max_output_bytes, "output %zu bytes", rendered->size());
  return 0;
}
