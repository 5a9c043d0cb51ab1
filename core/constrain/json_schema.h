#pragma once
// JSON Schema → grammar rules. Supported: type (one or a list), properties / required /
// additionalProperties (false, true or a schema), enum, const, items / prefixItems with minItems /
// maxItems, anyOf / oneOf, a one-element allOf, local $ref into $defs / definitions / any JSON
// pointer (recursion allowed, depth bounded by the matcher), string minLength / maxLength and
// format (date, time, date-time, uuid, email, ipv4), pattern (the subset json_pattern.h names),
// integer minimum / maximum (exclusive too),
// number, boolean, null. Any other assertion keyword is an error naming it and where it stands.
//
// Outputs: properties in the order the schema lists them; a property not required may be left
// out; properties a schema does not name are written only where additionalProperties allows them
// explicitly (an object schema with no properties at all takes any members).
#include <cstdint>
#include <string>
#include <unordered_map>

#include <rapidjson/document.h>

#include "constrain/grammar.h"
#include "constrain/json_lexical.h"

namespace sluice::constrain {

struct JsonGrammarOptions {
  int max_whitespace = 3;        // bytes of whitespace between two JSON tokens
  int max_number_digits = 15;    // per integer / fraction part of an unbounded number
  int max_schema_depth = 64;     // nesting of the schema itself
  int max_string_length = 1024;  // the largest maxLength / minLength compiled exactly
  int max_items = 256;           // the largest minItems / maxItems compiled exactly
  int max_properties = 256;      // properties of one object schema
};

class JsonSchemaCompiler {
 public:
  JsonSchemaCompiler(GrammarBuilder& builder, JsonGrammarOptions options = {}) : b_(builder), options_(options) {}

  // The rule for values valid under `schema`, which lies inside `document` ($ref resolves
  // against the document). Errors name the keyword and its JSON pointer.
  Result<uint32_t> value_rule(const rapidjson::Value& document, const rapidjson::Value& schema, const std::string& pointer = "#");
  // Any JSON value / any JSON object (response_format json_object).
  Result<uint32_t> any_value_rule();
  Result<uint32_t> any_object_rule();

  Frag ws() { return json_whitespace(b_, options_.max_whitespace); }
  GrammarBuilder& builder() { return b_; }

 private:
  struct Context {
    const rapidjson::Value* document;
  };
  Result<uint32_t> rule_for(const Context& ctx, const rapidjson::Value& schema, const std::string& pointer, int depth);
  Result<Frag> body_for(const Context& ctx, const rapidjson::Value& schema, const std::string& pointer, int depth);
  Result<Frag> typed(const Context& ctx, const rapidjson::Value& schema, const std::string& type, const std::string& pointer, int depth);
  Result<Frag> object_body(const Context& ctx, const rapidjson::Value& schema, const std::string& pointer, int depth);
  Result<Frag> array_body(const Context& ctx, const rapidjson::Value& schema, const std::string& pointer, int depth);
  Result<Frag> string_body(const rapidjson::Value& schema, const std::string& pointer);
  Result<Frag> integer_body(const rapidjson::Value& schema, const std::string& pointer, bool is_number);
  Result<Frag> literal_of(const rapidjson::Value& value);
  Result<const rapidjson::Value*> resolve(const Context& ctx, const std::string& ref, const std::string& pointer);
  uint32_t string_rule();

  GrammarBuilder& b_;
  JsonGrammarOptions options_;
  std::unordered_map<const rapidjson::Value*, uint32_t> rules_;  // compiled schemas (shared; $ref cycles)
  int64_t any_value_ = -1, any_object_ = -1, string_ = -1;
};

// A whole grammar: values valid under the schema (a JSON object/boolean), or any JSON object.
Result<Grammar> compile_json_schema(const rapidjson::Value& schema, const JsonGrammarOptions& options = {}, const GrammarLimits& limits = {});
Result<Grammar> compile_any_json_object(const JsonGrammarOptions& options = {}, const GrammarLimits& limits = {});

}  // namespace sluice::constrain
