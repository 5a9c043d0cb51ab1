#include "server/tool_request.h"

#include <set>
#include <string>

#include "util/json.h"

namespace sluice::server {
namespace {

using rapidjson::Value;

constexpr rapidjson::SizeType kMaxTools = 512;

// OpenAI's rule for function names (letters, digits, '_' and '-', at most 64), plus '.' and ':' that
// some clients use in namespaced names.
bool valid_function_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

std::optional<ApiError> check_tool(const Value& tool, const std::string& where, std::set<std::string>& names) {
  if (!tool.IsObject()) return ApiError::bad_request(where + " must be an object", where);
  auto type = json::string(tool, "type");
  if (!type) return ApiError::bad_request(where + ".type is required and must be \"function\"", where + ".type");
  if (*type != "function")
    return ApiError::bad_request(where + ".type must be \"function\" (got \"" + *type + "\")", where + ".type");
  const Value* function = json::member(tool, "function");
  if (!function || !function->IsObject())
    return ApiError::bad_request(where + ".function must be an object", where + ".function");
  const std::string f = where + ".function";
  auto name = json::string(*function, "name");
  if (!name) return ApiError::bad_request(f + ".name is required and must be a string", f + ".name");
  if (!valid_function_name(*name))
    return ApiError::bad_request(f + ".name must be 1 to 64 letters, digits, '_', '-', '.' or ':'", f + ".name");
  if (!names.insert(*name).second)
    return ApiError::bad_request(f + ".name \"" + *name + "\" is given twice", f + ".name");
  if (const Value* params = json::member(*function, "parameters"); params && !params->IsObject())
    return ApiError::bad_request(f + ".parameters must be a JSON Schema object", f + ".parameters");
  if (const Value* d = json::member(*function, "description"); d && !d->IsString() && !d->IsNull())
    return ApiError::bad_request(f + ".description must be a string", f + ".description");
  if (const Value* s = json::member(*function, "strict"); s && !s->IsBool() && !s->IsNull())
    return ApiError::bad_request(f + ".strict must be a boolean", f + ".strict");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_tool_fields(const Value& body, ToolFields& out) {
  std::set<std::string> names;
  if (const Value* tools = json::member(body, "tools"); tools && !tools->IsNull()) {
    if (!tools->IsArray()) return ApiError::bad_request("tools must be an array", "tools");
    if (tools->Size() > kMaxTools)
      return ApiError::bad_request("tools may hold at most " + std::to_string(kMaxTools) + " functions", "tools");
    for (rapidjson::SizeType i = 0; i < tools->Size(); ++i) {
      if (auto err = check_tool((*tools)[i], "tools[" + std::to_string(i) + "]", names)) return err;
    }
    out.tools.CopyFrom(*tools, out.tools.GetAllocator());
  }
  if (const Value* choice = json::member(body, "tool_choice"); choice && !choice->IsNull()) {
    if (choice->IsString()) {
      std::string_view c(choice->GetString(), choice->GetStringLength());
      if (c == "none") out.choice = ToolChoice::kNone;
      else if (c == "auto") out.choice = ToolChoice::kAuto;
      else if (c == "required") out.choice = ToolChoice::kRequired;
      else return ApiError::bad_request("tool_choice must be \"none\", \"auto\", \"required\" or a function", "tool_choice");
    } else if (choice->IsObject()) {
      auto type = json::string(*choice, "type");
      const Value* function = json::member(*choice, "function");
      auto name = function && function->IsObject() ? json::string(*function, "name") : std::nullopt;
      if (!type || *type != "function" || !name)
        return ApiError::bad_request("tool_choice must be {\"type\": \"function\", \"function\": {\"name\": …}}",
                                     "tool_choice");
      if (!names.contains(*name))
        return ApiError::bad_request("tool_choice names \"" + *name + "\", which is not in tools", "tool_choice");
      out.choice = ToolChoice::kNamed;
      out.forced_name = *name;
    } else {
      return ApiError::bad_request("tool_choice must be a string or an object", "tool_choice");
    }
  }
  if ((out.choice == ToolChoice::kRequired || out.choice == ToolChoice::kNamed) && !out.has_tools())
    return ApiError::bad_request("tool_choice requires tools", "tool_choice");
  if (const Value* parallel = json::member(body, "parallel_tool_calls"); parallel && !parallel->IsNull()) {
    if (!parallel->IsBool()) return ApiError::bad_request("parallel_tool_calls must be a boolean", "parallel_tool_calls");
    out.parallel_calls = parallel->GetBool();
  }
  return std::nullopt;
}

}  // namespace sluice::server
