#include "toolcall/argument_types.h"

namespace sluice::toolcall {
namespace {

const rapidjson::Value* member(const rapidjson::Value& v, const char* name) {
  if (!v.IsObject()) return nullptr;
  auto it = v.FindMember(name);
  return it == v.MemberEnd() ? nullptr : &it->value;
}

std::string_view declared_type(const rapidjson::Value& schema) {
  const rapidjson::Value* type = member(schema, "type");
  if (!type) return {};
  if (type->IsString()) return {type->GetString(), type->GetStringLength()};
  if (type->IsArray()) {
    for (const auto& t : type->GetArray()) {
      if (t.IsString() && std::string_view(t.GetString(), t.GetStringLength()) != "null")
        return {t.GetString(), t.GetStringLength()};
    }
  }
  return {};
}

}  // namespace

ArgumentTypes ArgumentTypes::from_tools(const rapidjson::Value& tools) {
  ArgumentTypes types;
  if (!tools.IsArray()) return types;
  for (const auto& tool : tools.GetArray()) {
    const rapidjson::Value* function = member(tool, "function");
    const rapidjson::Value* name = function ? member(*function, "name") : nullptr;
    const rapidjson::Value* params = function ? member(*function, "parameters") : nullptr;
    const rapidjson::Value* props = params ? member(*params, "properties") : nullptr;
    if (!name || !name->IsString() || !props || !props->IsObject()) continue;
    for (const auto& p : props->GetObject()) {
      std::string_view type = declared_type(p.value);
      if (!type.empty())
        types.set({name->GetString(), name->GetStringLength()}, {p.name.GetString(), p.name.GetStringLength()}, type);
    }
  }
  return types;
}

void ArgumentTypes::set(std::string_view function, std::string_view parameter, std::string_view type) {
  types_[std::string(function)][std::string(parameter)] = std::string(type);
}

std::string_view ArgumentTypes::type_of(std::string_view function, std::string_view parameter) const {
  auto f = types_.find(function);
  if (f == types_.end()) return {};
  auto p = f->second.find(parameter);
  return p == f->second.end() ? std::string_view{} : std::string_view(p->second);
}

}  // namespace sluice::toolcall
