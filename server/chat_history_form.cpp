#include "server/chat_history_form.h"

#include <array>

#include "chat/template.h"
#include "util/json.h"

namespace sluice::server {
namespace {

using rapidjson::Value;

// Distinctive strings, so a hit in the rendered text can only come from the probe call. The call id
// is nine alphanumerics because Mistral's templates refuse any other shape.
constexpr const char* kProbeFunction = "sluice_probe_function";
constexpr const char* kProbeValue = "sluice_probe_value";
constexpr const char* kProbeArgumentsJson = R"({"sluice_probe_argument": "sluice_probe_value"})";

rapidjson::Document probe_variables(const ChatHistoryForm& form, const std::string& bos, const std::string& eos) {
  std::string text = R"({"messages": [{"role": "user", "content": "probe"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call00001", "type": "function",
      "function": {"name": "sluice_probe_function", "arguments": )" +
                     json::quote(kProbeArgumentsJson) + R"(}}]},
    {"role": "tool", "tool_call_id": "call00001", "name": "sluice_probe_function", "content": "probe result"}],
  "tools": [{"type": "function", "function": {"name": "sluice_probe_function", "description": "probe",
    "parameters": {"type": "object", "properties": {"sluice_probe_argument": {"type": "string"}},
                   "required": ["sluice_probe_argument"]}}}],
  "add_generation_prompt": false})";
  auto parsed = json::parse(text, "probe conversation");
  rapidjson::Document vars;
  vars.SetObject();
  if (!parsed) return vars;  // cannot happen: the text above is fixed
  auto& a = vars.GetAllocator();
  rapidjson::Document messages = apply_chat_history_form((*parsed)["messages"], form);
  vars.AddMember("messages", Value(messages, a), a);
  vars.AddMember("tools", Value((*parsed)["tools"], a), a);
  vars.AddMember("add_generation_prompt", false, a);
  vars.AddMember("bos_token", Value(bos.c_str(), a), a);
  vars.AddMember("eos_token", Value(eos.c_str(), a), a);
  return vars;
}

// Arguments sit a few levels down in the template's variables, which nest at most 64 deep.
json::JsonLimits arguments_limits() {
  json::JsonLimits limits;
  limits.max_depth = 48;
  return limits;
}

bool contains(const std::string& text, std::string_view needle) { return text.find(needle) != std::string::npos; }

}  // namespace

ChatHistoryForm probe_chat_history_form(const chat::Template& tmpl, const std::string& bos_token,
                                        const std::string& eos_token) {
  // Preference order: the transformers spelling first (object arguments, null content), then ""
  // content, then string arguments. A spelling counts when it renders and the call shows in the
  // prompt: as the argument's value for objects (templates may print key=value), as the untouched
  // JSON text for strings (a `tojson` of the string would escape it — what the model never saw).
  std::string last_failure = "no spelling rendered the tool call into the prompt";
  for (bool as_object : {true, false}) {
    for (bool null_content : {true, false}) {
      ChatHistoryForm form{as_object, null_content, true, {}};
      auto rendered = tmpl.render(probe_variables(form, bos_token, eos_token));
      if (!rendered) {
        last_failure = rendered.message();
        continue;
      }
      const bool shows = contains(*rendered, kProbeFunction) &&
                         contains(*rendered, as_object ? std::string_view(kProbeValue) : kProbeArgumentsJson);
      if (shows) return form;
    }
  }
  // Nothing shows a call (the template ignores tool_calls, or cannot render them): the spelling that
  // renders most often, so plain conversations still work.
  return ChatHistoryForm{true, false, false, last_failure};
}

rapidjson::Document apply_chat_history_form(const Value& messages, const ChatHistoryForm& form) {
  rapidjson::Document out;
  out.CopyFrom(messages, out.GetAllocator());
  if (!out.IsArray()) return out;
  auto& a = out.GetAllocator();
  for (auto& m : out.GetArray()) {
    if (!m.IsObject()) continue;
    if (!form.null_content && m.HasMember("content") && m["content"].IsNull()) m["content"].SetString("", a);
    if (!form.arguments_as_object || !m.HasMember("tool_calls") || !m["tool_calls"].IsArray()) continue;
    for (auto& call : m["tool_calls"].GetArray()) {
      if (!call.IsObject() || !call.HasMember("function") || !call["function"].IsObject()) continue;
      Value& function = call["function"];
      if (!function.HasMember("arguments") || !function["arguments"].IsString()) continue;
      Value& arguments = function["arguments"];
      // The request's own limits bound this text already; arguments that are not a JSON object
      // (a model's malformed call being replayed) stay the string they were.
      auto parsed = json::parse(std::string_view(arguments.GetString(), arguments.GetStringLength()),
                                "tool call arguments", arguments_limits());
      if (parsed && parsed->IsObject()) arguments.CopyFrom(*parsed, a);
    }
  }
  return out;
}

}  // namespace sluice::server
