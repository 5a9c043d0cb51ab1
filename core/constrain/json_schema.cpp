#include "constrain/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "constrain/json_pattern.h"
#include "util/json.h"

namespace sluice::constrain {
namespace {

// Assertion keywords this compiler cannot honour exactly: a schema using one is refused rather
// than answered with output that might not validate.
constexpr std::string_view kUnsupported[] = {
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
    "propertyNames", "unevaluatedProperties", "unevaluatedItems", "contains", "minContains", "maxContains",
    "minProperties", "maxProperties", "multipleOf", "$dynamicRef", "$recursiveRef", "additionalItems"};

std::string json_text(const rapidjson::Value& v) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  v.Accept(writer);
  return {buffer.GetString(), buffer.GetSize()};
}

std::string child(const std::string& pointer, std::string_view key) {
  std::string out = pointer + "/";
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

bool matches_type(const rapidjson::Value& v, std::string_view type) {
  if (type == "string") return v.IsString();
  if (type == "integer") return v.IsInt64() || v.IsUint64() || (v.IsDouble() && std::floor(v.GetDouble()) == v.GetDouble());
  if (type == "number") return v.IsNumber();
  if (type == "boolean") return v.IsBool();
  if (type == "null") return v.IsNull();
  if (type == "object") return v.IsObject();
  if (type == "array") return v.IsArray();
  return false;
}

Error at(const std::string& pointer, const std::string& message) { return make_error(message + " (at " + pointer + ")"); }

}  // namespace

Result<uint32_t> JsonSchemaCompiler::value_rule(const rapidjson::Value& document, const rapidjson::Value& schema, const std::string& pointer) {
  return rule_for(Context{&document}, schema, pointer, 0);
}

uint32_t JsonSchemaCompiler::string_rule() {
  if (string_ < 0) {
    auto id = b_.declare("string");
    if (!id) return 0;  // rule limit: the builder's finish reports it
    string_ = *id;
    (void)b_.define(*id, json_string(b_, 0, -1));
  }
  return static_cast<uint32_t>(string_);
}

Result<uint32_t> JsonSchemaCompiler::any_value_rule() {
  if (any_value_ >= 0) return static_cast<uint32_t>(any_value_);
  auto id = b_.declare("any");
  if (!id) return id.error();
  any_value_ = *id;
  auto object = any_object_rule();
  if (!object) return object.error();
  auto array_rule = b_.declare("any-array");
  if (!array_rule) return array_rule.error();
  auto item = [&] { return b_.call(*id); };
  Frag items = b_.optional(b_.seq({item(), b_.star(b_.seq({ws(), b_.literal(","), ws(), item()}))}));
  if (auto s = b_.define(*array_rule, b_.seq({b_.literal("["), ws(), items, ws(), b_.literal("]")})); !s) return s.error();
  Frag body = b_.alt({b_.call(*object), b_.call(*array_rule), b_.call(string_rule()), json_number(b_, options_.max_number_digits),
                      b_.literal("true"), b_.literal("false"), b_.literal("null")});
  if (auto s = b_.define(*id, body); !s) return s.error();
  return *id;
}

Result<uint32_t> JsonSchemaCompiler::any_object_rule() {
  if (any_object_ >= 0) return static_cast<uint32_t>(any_object_);
  auto id = b_.declare("any-object");
  if (!id) return id.error();
  any_object_ = *id;
  auto value = any_value_rule();
  if (!value) return value.error();
  auto member = [&] { return b_.seq({b_.call(string_rule()), ws(), b_.literal(":"), ws(), b_.call(*value)}); };
  Frag members = b_.optional(b_.seq({member(), b_.star(b_.seq({ws(), b_.literal(","), ws(), member()}))}));
  if (auto s = b_.define(*id, b_.seq({b_.literal("{"), ws(), members, ws(), b_.literal("}")})); !s) return s.error();
  return *id;
}

Result<uint32_t> JsonSchemaCompiler::rule_for(const Context& ctx, const rapidjson::Value& schema, const std::string& pointer, int depth) {
  if (auto it = rules_.find(&schema); it != rules_.end()) return it->second;
  if (depth > options_.max_schema_depth)
    return at(pointer, "the schema nests deeper than " + std::to_string(options_.max_schema_depth) + " levels");
  if (schema.IsBool() && schema.GetBool()) return any_value_rule();
  auto id = b_.declare(pointer);
  if (!id) return at(pointer, id.message());
  rules_.emplace(&schema, *id);
  auto body = body_for(ctx, schema, pointer, depth);
  if (!body) return body.error();
  if (auto s = b_.define(*id, *body); !s) return s.error();
  return *id;
}

Result<const rapidjson::Value*> JsonSchemaCompiler::resolve(const Context& ctx, const std::string& ref, const std::string& pointer) {
  if (ref.empty() || ref[0] != '#') return at(pointer, "$ref '" + ref + "' is not supported: only local references (#/$defs/...) are");
  const rapidjson::Value* node = ctx.document;
  std::size_t pos = 1;
  while (pos < ref.size()) {
    if (ref[pos] != '/') return at(pointer, "$ref '" + ref + "' is not a JSON pointer");
    const std::size_t next = std::min(ref.find('/', pos + 1), ref.size());
    std::string token;
    for (std::size_t i = pos + 1; i < next; ++i) {
      if (ref[i] == '~' && i + 1 < next && (ref[i + 1] == '0' || ref[i + 1] == '1')) {
        token += ref[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        token += ref[i];
      }
    }
    if (node->IsObject()) {
      auto it = node->FindMember(token.c_str());
      if (it == node->MemberEnd()) return at(pointer, "$ref '" + ref + "' points at nothing");
      node = &it->value;
    } else if (node->IsArray()) {
      char* end = nullptr;
      const unsigned long index = std::strtoul(token.c_str(), &end, 10);
      if (token.empty() || *end || index >= node->Size()) return at(pointer, "$ref '" + ref + "' points at nothing");
      node = &(*node)[static_cast<rapidjson::SizeType>(index)];
    } else {
      return at(pointer, "$ref '" + ref + "' points at nothing");
    }
    pos = next;
  }
  return node;
}

Result<Frag> JsonSchemaCompiler::literal_of(const rapidjson::Value& value) { return b_.literal(json_text(value)); }

Result<Frag> JsonSchemaCompiler::body_for(const Context& ctx, const rapidjson::Value& schema, const std::string& pointer, int depth) {
  if (schema.IsBool()) {
    if (schema.GetBool()) {
      auto any = any_value_rule();
      if (!any) return any.error();
      return b_.call(*any);
    }
    return at(pointer, "the schema false admits no value");
  }
  if (!schema.IsObject()) return at(pointer, "a schema must be an object or a boolean");
  for (std::string_view key : kUnsupported)
    if (schema.HasMember(rapidjson::StringRef(key.data(), key.size())))
      return at(child(pointer, key), "the keyword '" + std::string(key) + "' is not supported");
  if (const auto* unique = json::member(schema, "uniqueItems"); unique && !(unique->IsBool() && !unique->GetBool()))
    return at(child(pointer, "uniqueItems"), "the keyword 'uniqueItems' is not supported");

  if (const auto* ref = json::member(schema, "$ref")) {
    if (!ref->IsString()) return at(child(pointer, "$ref"), "$ref must be a string");
    auto target = resolve(ctx, ref->GetString(), child(pointer, "$ref"));
    if (!target) return target.error();
    auto rule = rule_for(ctx, **target, ref->GetString(), depth + 1);
    if (!rule) return rule.error();
    return b_.call(*rule);
  }
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    const auto* list = json::member(schema, key);
    if (!list) continue;
    const std::string here = child(pointer, key);
    if (!list->IsArray() || list->Empty()) return at(here, std::string(key) + " must be a non-empty array");
    if (std::string_view(key) == "allOf" && list->Size() != 1)
      return at(here, "allOf with more than one schema is not supported");
    for (const char* other : {"type", "properties", "items", "enum", "const"})
      if (schema.HasMember(other)) return at(here, std::string(key) + " beside '" + other + "' is not supported");
    std::vector<Frag> options;
    for (rapidjson::SizeType i = 0; i < list->Size(); ++i) {
      auto rule = rule_for(ctx, (*list)[i], here + "/" + std::to_string(i), depth + 1);
      if (!rule) return rule.error();
      options.push_back(b_.call(*rule));
    }
    return b_.alt(options);
  }
  std::vector<std::string> types;
  if (const auto* type = json::member(schema, "type")) {
    if (type->IsString()) types.push_back(type->GetString());
    else if (type->IsArray())
      for (const auto& t : type->GetArray()) {
        if (!t.IsString()) return at(child(pointer, "type"), "type must be a string or an array of strings");
        types.push_back(t.GetString());
      }
    else return at(child(pointer, "type"), "type must be a string or an array of strings");
    for (const auto& t : types)
      if (t != "object" && t != "array" && t != "string" && t != "integer" && t != "number" && t != "boolean" && t != "null")
        return at(child(pointer, "type"), "unknown type '" + t + "'");
  }
  auto type_allows = [&](const rapidjson::Value& v) {
    if (types.empty()) return true;
    return std::any_of(types.begin(), types.end(), [&](const std::string& t) { return matches_type(v, t); });
  };
  if (const auto* value = json::member(schema, "const")) {
    if (!type_allows(*value)) return at(child(pointer, "const"), "const does not match the schema's type");
    return literal_of(*value);
  }
  if (const auto* list = json::member(schema, "enum")) {
    if (!list->IsArray() || list->Empty()) return at(child(pointer, "enum"), "enum must be a non-empty array");
    std::vector<Frag> options;
    for (const auto& v : list->GetArray())
      if (type_allows(v)) options.push_back(b_.literal(json_text(v)));
    if (options.empty()) return at(child(pointer, "enum"), "no enum value matches the schema's type");
    return b_.alt(options);
  }
  if (types.empty()) {
    // No type: what the other keywords imply, else any value.
    if (schema.HasMember("properties") || schema.HasMember("required") || schema.HasMember("additionalProperties")) types.push_back("object");
    else if (schema.HasMember("items") || schema.HasMember("prefixItems") || schema.HasMember("minItems") || schema.HasMember("maxItems"))
      types.push_back("array");
    else if (schema.HasMember("minLength") || schema.HasMember("maxLength") || schema.HasMember("format") || schema.HasMember("pattern"))
      types.push_back("string");
    else if (schema.HasMember("minimum") || schema.HasMember("maximum") || schema.HasMember("exclusiveMinimum") || schema.HasMember("exclusiveMaximum"))
      types.push_back("number");
    else {
      auto any = any_value_rule();
      if (!any) return any.error();
      return b_.call(*any);
    }
  }
  std::vector<Frag> options;
  for (const auto& t : types) {
    auto f = typed(ctx, schema, t, pointer, depth);
    if (!f) return f.error();
    options.push_back(*f);
  }
  return options.size() == 1 ? options[0] : b_.alt(options);
}

Result<Frag> JsonSchemaCompiler::typed(const Context& ctx, const rapidjson::Value& schema, const std::string& type, const std::string& pointer,
                                       int depth) {
  if (type == "object") return object_body(ctx, schema, pointer, depth);
  if (type == "array") return array_body(ctx, schema, pointer, depth);
  if (type == "string") return string_body(schema, pointer);
  if (type == "integer") return integer_body(schema, pointer, false);
  if (type == "number") return integer_body(schema, pointer, true);
  if (type == "boolean") return b_.alt({b_.literal("true"), b_.literal("false")});
  return b_.literal("null");
}

Result<Frag> JsonSchemaCompiler::object_body(const Context& ctx, const rapidjson::Value& schema, const std::string& pointer, int depth) {
  struct Property {
    std::string key_json;
    uint32_t rule;
    bool required;
  };
  std::set<std::string> required;
  if (const auto* list = json::member(schema, "required")) {
    if (!list->IsArray()) return at(child(pointer, "required"), "required must be an array of strings");
    for (const auto& name : list->GetArray()) {
      if (!name.IsString()) return at(child(pointer, "required"), "required must be an array of strings");
      required.insert(name.GetString());
    }
  }
  std::vector<Property> properties;
  std::vector<std::string> names;
  const auto* props = json::member(schema, "properties");
  if (props) {
    if (!props->IsObject()) return at(child(pointer, "properties"), "properties must be an object");
    if (props->MemberCount() > static_cast<unsigned>(options_.max_properties))
      return at(child(pointer, "properties"), "more than " + std::to_string(options_.max_properties) + " properties");
    for (const auto& m : props->GetObject()) {
      const std::string name(m.name.GetString(), m.name.GetStringLength());
      auto rule = rule_for(ctx, m.value, child(child(pointer, "properties"), name), depth + 1);
      if (!rule) return rule.error();
      properties.push_back({json::quote(name), *rule, required.count(name) > 0});
      names.push_back(name);
    }
  }
  for (const auto& name : required)
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      // A required name with no property schema: its value may be anything (JSON Schema's rule).
      auto any = any_value_rule();
      if (!any) return any.error();
      properties.push_back({json::quote(name), *any, true});
      names.push_back(name);
    }
  // Members the schema does not name: only where additionalProperties allows them explicitly, or
  // where the schema names none at all (a plain {"type": "object"}).
  std::optional<uint32_t> extra;
  if (const auto* additional = json::member(schema, "additionalProperties")) {
    if (!(additional->IsBool() && !additional->GetBool())) {
      auto rule = rule_for(ctx, *additional, child(pointer, "additionalProperties"), depth + 1);
      if (!rule) return rule.error();
      extra = *rule;
    }
  } else if (names.empty()) {
    auto any = any_value_rule();
    if (!any) return any.error();
    extra = *any;
  }

  // States S(i, written): before property i, with or without a member written (which decides the
  // comma). Tails are shared, so the automaton stays linear in the number of properties.
  const std::size_t n = properties.size();
  std::vector<std::array<uint32_t, 2>> s(n + 1);
  for (auto& pair : s) pair = {b_.new_state(), b_.new_state()};
  auto member = [&](bool written, Frag key, uint32_t rule) {
    Frag comma = written ? b_.seq({ws(), b_.literal(","), ws()}) : b_.empty();
    return b_.seq({comma, key, ws(), b_.literal(":"), ws(), b_.call(rule)});
  };
  for (std::size_t i = 0; i < n; ++i)
    for (int w = 0; w < 2; ++w) {
      if (!properties[i].required) b_.link(s[i][w], s[i + 1][w]);
      Frag m = member(w == 1, b_.literal(properties[i].key_json), properties[i].rule);
      b_.link(s[i][w], m.in);
      b_.link(m.out, s[i + 1][1]);
    }
  if (extra) {
    for (int w = 0; w < 2; ++w) {
      // Keys: plain ASCII strings other than the named properties (so no name is written twice).
      Frag key = b_.empty();
      {
        ByteSet plain = ByteSet::range(0x20, 0x7E);
        plain.remove("\"\\");
        // A trie of the names; leaving it at any byte makes the key a new name.
        const uint32_t root = b_.new_state();
        const uint32_t free_state = b_.new_state();
        const uint32_t closed = b_.new_state();
        b_.edge(free_state, plain, free_state);
        b_.edge(free_state, ByteSet::of('"'), closed);
        struct Node {
          std::map<unsigned char, std::size_t> next;
          bool terminal = false;
          uint32_t state;
        };
        std::vector<Node> trie{{{}, false, root}};
        for (const auto& name : names) {
          if (std::any_of(name.begin(), name.end(), [&](char c) { return !plain.has(static_cast<unsigned char>(c)); })) continue;
          std::size_t at_node = 0;
          for (char c : name) {
            auto [it, added] = trie[at_node].next.emplace(static_cast<unsigned char>(c), trie.size());
            if (added) trie.push_back({{}, false, b_.new_state()});
            at_node = it->second;
          }
          trie[at_node].terminal = true;
        }
        for (const Node& node : trie) {
          ByteSet leave = plain;
          for (const auto& [c, next] : node.next) {
            b_.edge(node.state, ByteSet::of(c), trie[next].state);
            leave.bits.reset(c);
          }
          b_.edge(node.state, leave, free_state);
          if (!node.terminal) b_.edge(node.state, ByteSet::of('"'), closed);
        }
        key = b_.seq({b_.literal("\""), Frag{root, closed}});
      }
      Frag m = member(w == 1, key, *extra);
      b_.link(s[n][w], m.in);
      b_.link(m.out, s[n][1]);
    }
  }
  const uint32_t end = b_.new_state();
  for (int w = 0; w < 2; ++w) {
    Frag close = b_.seq({ws(), b_.literal("}")});
    b_.link(s[n][w], close.in);
    b_.link(close.out, end);
  }
  Frag open = b_.seq({b_.literal("{"), ws()});
  b_.link(open.out, s[0][0]);
  return Frag{open.in, end};
}

Result<Frag> JsonSchemaCompiler::array_body(const Context& ctx, const rapidjson::Value& schema, const std::string& pointer, int depth) {
  auto count = [&](const char* key, int fallback) -> Result<int> {
    const auto* v = json::member(schema, key);
    if (!v) return fallback;
    if (!v->IsUint64()) return at(child(pointer, key), std::string(key) + " must be a non-negative integer");
    if (v->GetUint64() > static_cast<uint64_t>(options_.max_items))
      return at(child(pointer, key), std::string(key) + " above " + std::to_string(options_.max_items) + " is not supported");
    return static_cast<int>(v->GetUint64());
  };
  auto min_items = count("minItems", 0);
  if (!min_items) return min_items.error();
  auto max_items = count("maxItems", -1);
  if (!max_items) return max_items.error();
  if (*max_items >= 0 && *max_items < *min_items) return at(pointer, "maxItems is below minItems");
  auto sep = [&] { return b_.seq({ws(), b_.literal(","), ws()}); };

  if (const auto* prefix = json::member(schema, "prefixItems")) {
    if (!prefix->IsArray() || prefix->Empty()) return at(child(pointer, "prefixItems"), "prefixItems must be a non-empty array");
    const auto* items = json::member(schema, "items");
    if (items && !(items->IsBool() && !items->GetBool()))
      return at(child(pointer, "items"), "items beside prefixItems is supported only as false");
    const int n = static_cast<int>(prefix->Size());
    if (*min_items > n) return at(child(pointer, "minItems"), "minItems exceeds the prefixItems the array may hold");
    // The tuple's first k items for k in [minItems, min(n, maxItems)].
    const int most = *max_items >= 0 ? std::min(n, *max_items) : n;
    std::vector<uint32_t> rules;
    for (int i = 0; i < n; ++i) {
      auto rule = rule_for(ctx, (*prefix)[static_cast<rapidjson::SizeType>(i)], child(pointer, "prefixItems") + "/" + std::to_string(i), depth + 1);
      if (!rule) return rule.error();
      rules.push_back(*rule);
    }
    std::vector<Frag> options;
    for (int k = *min_items; k <= most; ++k) {
      std::vector<Frag> parts;
      for (int i = 0; i < k; ++i) {
        if (i) parts.push_back(sep());
        parts.push_back(b_.call(rules[i]));
      }
      options.push_back(b_.seq(parts));
    }
    return b_.seq({b_.literal("["), ws(), b_.alt(options), ws(), b_.literal("]")});
  }
  uint32_t item_rule;
  if (const auto* items = json::member(schema, "items")) {
    if (items->IsBool() && !items->GetBool()) {
      if (*min_items > 0) return at(child(pointer, "items"), "items false with minItems above 0 admits no array");
      return b_.seq({b_.literal("["), ws(), b_.literal("]")});
    }
    auto rule = rule_for(ctx, *items, child(pointer, "items"), depth + 1);
    if (!rule) return rule.error();
    item_rule = *rule;
  } else {
    auto any = any_value_rule();
    if (!any) return any.error();
    item_rule = *any;
  }
  if (*max_items == 0) return b_.seq({b_.literal("["), ws(), b_.literal("]")});
  auto more = [&] { return b_.seq({sep(), b_.call(item_rule)}); };
  Frag list = b_.seq({b_.call(item_rule), b_.repeat(more, std::max(0, *min_items - 1), *max_items < 0 ? -1 : *max_items - 1)});
  if (*min_items == 0) list = b_.optional(list);
  return b_.seq({b_.literal("["), ws(), list, ws(), b_.literal("]")});
}

Result<Frag> JsonSchemaCompiler::string_body(const rapidjson::Value& schema, const std::string& pointer) {
  const auto* min_len = json::member(schema, "minLength");
  const auto* max_len = json::member(schema, "maxLength");
  if (const auto* pattern = json::member(schema, "pattern")) {
    if (!pattern->IsString()) return at(child(pointer, "pattern"), "pattern must be a string");
    if (min_len || max_len || schema.HasMember("format"))
      return at(child(pointer, "pattern"), "pattern together with minLength / maxLength / format is not supported");
    auto f = json_pattern_string(b_, std::string_view(pattern->GetString(), pattern->GetStringLength()));
    if (!f) return at(child(pointer, "pattern"), f.message());
    return *f;
  }
  if (const auto* format = json::member(schema, "format")) {
    if (!format->IsString()) return at(child(pointer, "format"), "format must be a string");
    if (min_len || max_len) return at(pointer, "format together with minLength / maxLength is not supported");
    auto f = json_string_format(b_, format->GetString());
    if (!f)
      return at(child(pointer, "format"),
                "format '" + std::string(format->GetString()) + "' is not supported (date, time, date-time, uuid, email, ipv4 are)");
    return *f;
  }
  if (!min_len && !max_len) return b_.call(string_rule());
  auto length = [&](const rapidjson::Value* v, const char* key, int fallback) -> Result<int> {
    if (!v) return fallback;
    if (!v->IsUint64()) return at(child(pointer, key), std::string(key) + " must be a non-negative integer");
    if (v->GetUint64() > static_cast<uint64_t>(options_.max_string_length))
      return at(child(pointer, key), std::string(key) + " above " + std::to_string(options_.max_string_length) + " is not supported");
    return static_cast<int>(v->GetUint64());
  };
  auto lo = length(min_len, "minLength", 0);
  if (!lo) return lo.error();
  auto hi = length(max_len, "maxLength", -1);
  if (!hi) return hi.error();
  if (*hi >= 0 && *hi < *lo) return at(pointer, "maxLength is below minLength");
  return json_string(b_, *lo, *hi);
}

Result<Frag> JsonSchemaCompiler::integer_body(const rapidjson::Value& schema, const std::string& pointer, bool is_number) {
  // Bounds become an integer range; a bounded number is written as an integer in it (every
  // integer is a number, so the output validates).
  std::optional<int64_t> lo, hi;
  auto bound = [&](const char* key, bool lower, bool exclusive) -> Status {
    const auto* v = json::member(schema, key);
    if (!v) return {};
    if (!v->IsNumber()) return at(child(pointer, key), std::string(key) + " must be a number");
    const double d = v->GetDouble();
    if (!std::isfinite(d) || std::abs(d) > 9e15) return at(child(pointer, key), std::string(key) + " is out of the supported range");
    int64_t k = lower ? static_cast<int64_t>(std::ceil(d)) : static_cast<int64_t>(std::floor(d));
    if (exclusive && static_cast<double>(k) == d) k += lower ? 1 : -1;
    if (lower) lo = lo ? std::max(*lo, k) : k;
    else hi = hi ? std::min(*hi, k) : k;
    return {};
  };
  for (auto [key, lower, exclusive] : {std::tuple{"minimum", true, false}, std::tuple{"exclusiveMinimum", true, true},
                                       std::tuple{"maximum", false, false}, std::tuple{"exclusiveMaximum", false, true}})
    if (auto s = bound(key, lower, exclusive); !s) return s.error();
  if (lo && hi && *lo > *hi) return at(pointer, "no integer lies between the bounds");
  if (is_number && !lo && !hi) return json_number(b_, options_.max_number_digits);
  return json_integer(b_, lo, hi, options_.max_number_digits);
}

Result<Grammar> compile_json_schema(const rapidjson::Value& schema, const JsonGrammarOptions& options, const GrammarLimits& limits) {
  GrammarBuilder builder(limits);
  JsonSchemaCompiler compiler(builder, options);
  auto root = compiler.value_rule(schema, schema);
  if (!root) return root.error();
  return builder.finish(*root);
}

Result<Grammar> compile_any_json_object(const JsonGrammarOptions& options, const GrammarLimits& limits) {
  GrammarBuilder builder(limits);
  JsonSchemaCompiler compiler(builder, options);
  auto root = compiler.any_object_rule();
  if (!root) return root.error();
  return builder.finish(*root);
}

}  // namespace sluice::constrain
