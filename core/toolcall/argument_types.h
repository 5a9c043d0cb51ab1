#pragma once
// The declared JSON types of each function's parameters, from the request's `tools`. The notations that
// do not write JSON (Qwen3-Coder/Seed XML, GLM tags) write a value as bare text, so `5` can be the
// number 5 or the string "5": the function's schema says which, as vLLM reads it too.
#include <map>
#include <string>
#include <string_view>

#include <rapidjson/document.h>

namespace sluice::toolcall {

class ArgumentTypes {
 public:
  // Each tools[i].function.parameters.properties.NAME.type: a string, or the first non-"null" of a list.
  static ArgumentTypes from_tools(const rapidjson::Value& tools);

  void set(std::string_view function, std::string_view parameter, std::string_view type);
  // "" when the schema does not say.
  std::string_view type_of(std::string_view function, std::string_view parameter) const;

 private:
  std::map<std::string, std::map<std::string, std::string, std::less<>>, std::less<>> types_;
};

}  // namespace sluice::toolcall
