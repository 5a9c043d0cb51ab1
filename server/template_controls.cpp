#include "server/template_controls.h"

#include <array>
#include <string_view>

#include "util/json.h"

namespace sluice::server {
namespace {

using rapidjson::Value;

// Variables the server provides, and the template globals a same-named variable would hide.
constexpr std::array<std::string_view, 13> kReserved = {
    "messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "raise_exception", "strftime_now",
    "range", "dict", "namespace", "cycler", "joiner", "lipsum"};

bool identifier(std::string_view name) {
  if (name.empty() || name.size() > kMaxTemplateKwargNameBytes) return false;
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!letter(name[0])) return false;
  for (char c : name)
    if (!letter(c) && !(c >= '0' && c <= '9')) return false;
  return true;
}

bool valid_effort(std::string_view effort) {
  return effort == "none" || effort == "minimal" || effort == "low" || effort == "medium" || effort == "high";
}

}  // namespace

ApiResult<TemplateControls> parse_template_controls(const rapidjson::Value& body) {
  TemplateControls controls;
  auto& a = controls.kwargs.GetAllocator();
  if (const auto* kwargs = json::member(body, "chat_template_kwargs"); kwargs && !kwargs->IsNull()) {
    if (!kwargs->IsObject())
      return ApiError::bad_request("chat_template_kwargs must be an object", "chat_template_kwargs");
    if (kwargs->MemberCount() > kMaxTemplateKwargs)
      return ApiError::bad_request("chat_template_kwargs may set at most " + std::to_string(kMaxTemplateKwargs) +
                                       " variables", "chat_template_kwargs");
    for (auto it = kwargs->MemberBegin(); it != kwargs->MemberEnd(); ++it) {
      std::string_view name(it->name.GetString(), it->name.GetStringLength());
      const std::string field = "chat_template_kwargs." + std::string(name.substr(0, kMaxTemplateKwargNameBytes));
      if (!identifier(name))
        return ApiError::bad_request(field + ": a variable name is a letter or _ then letters, digits or _, at most " +
                                         std::to_string(kMaxTemplateKwargNameBytes) + " bytes", field);
      for (auto reserved : kReserved)
        if (name == reserved) return ApiError::bad_request(field + " is set by the server and cannot be overridden", field);
      if (name == "enable_thinking") {
        if (!it->value.IsBool()) return ApiError::bad_request(field + " must be a boolean", field);
        controls.enable_thinking = it->value.GetBool();
        continue;  // kept apart so the top-level field and the server default resolve in one place
      }
      if (controls.kwargs.HasMember(it->name)) continue;  // a repeated key: the first one counts
      controls.kwargs.AddMember(Value(it->name, a), Value(it->value, a), a);
    }
  }
  if (const auto* thinking = json::member(body, "enable_thinking"); thinking && !thinking->IsNull()) {
    if (!thinking->IsBool()) return ApiError::bad_request("enable_thinking must be a boolean", "enable_thinking");
    controls.enable_thinking = thinking->GetBool();
  }
  if (const auto* effort = json::member(body, "reasoning_effort"); effort && !effort->IsNull()) {
    std::string_view value = effort->IsString() ? std::string_view(effort->GetString(), effort->GetStringLength()) : "";
    if (!valid_effort(value))
      return ApiError::bad_request("reasoning_effort must be none, minimal, low, medium or high", "reasoning_effort");
    controls.reasoning_effort = std::string(value);
  }
  return controls;
}

}  // namespace sluice::server
