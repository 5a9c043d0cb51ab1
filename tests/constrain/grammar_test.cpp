// The JSON Schema compiler: which whole texts each schema's grammar accepts and refuses, and the
// errors that name unsupported keywords.
#include <gtest/gtest.h>

#include "constrain_helpers.h"

namespace sluice::constrain {
namespace {

using testing::accepts;
using testing::grammar_from;

Grammar compile_ok(const std::string& schema) {
  auto g = grammar_from(schema);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.message());
  return g.ok() ? std::move(*g) : Grammar{};
}

TEST(JsonSchemaGrammar, ObjectWithRequiredAndOptionalPropertiesInOrder) {
  const Grammar g = compile_ok(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["a","c"]})");
  EXPECT_TRUE(accepts(g, R"({"a":1,"b":"x","c":true})"));
  EXPECT_TRUE(accepts(g, R"({"a":-20,"c":false})"));
  EXPECT_TRUE(accepts(g, "{ \"a\" : 1 ,\n \"c\" : true }"));
  EXPECT_FALSE(accepts(g, R"({"a":1})"));              // c required
  EXPECT_FALSE(accepts(g, R"({"c":true,"a":1})"));     // schema order
  EXPECT_FALSE(accepts(g, R"({"a":1,"c":true,"d":1})"));  // no additional properties by default
  EXPECT_FALSE(accepts(g, R"({"a":1,,"c":true})"));
  EXPECT_FALSE(accepts(g, R"({"a":01,"c":true})"));
  EXPECT_FALSE(accepts(g, R"({"a":1,"c":true})" " extra"));
}

TEST(JsonSchemaGrammar, WhitespaceIsBounded) {
  const Grammar g = compile_ok(R"({"type":"object","properties":{"a":{"type":"null"}},"required":["a"]})");
  EXPECT_TRUE(accepts(g, "{   \"a\":null}"));
  EXPECT_FALSE(accepts(g, "{        \"a\":null}"));
}

TEST(JsonSchemaGrammar, AllOptionalPropertiesCommasStayRight) {
  const Grammar g = compile_ok(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}}})");
  for (const char* ok : {"{}", R"({"b":2})", R"({"a":1,"c":3})", R"({"a":1,"b":2,"c":3})", R"({"c":3})"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {R"({,"b":2})", R"({"a":1,})", R"({"a":1 "b":2})"}) EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(JsonSchemaGrammar, AdditionalPropertiesSchemaNeverRepeatsANamedKey) {
  const Grammar g = compile_ok(R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":{"type":"string"}})");
  EXPECT_TRUE(accepts(g, R"({"id":1,"x":"y","idx":"z","i":"q"})"));
  EXPECT_FALSE(accepts(g, R"({"id":1,"id":"y"})"));
  EXPECT_FALSE(accepts(g, R"({"id":1,"x":2})"));
  const Grammar any = compile_ok(R"({"type":"object"})");
  EXPECT_TRUE(accepts(any, R"({"k":[1,{"z":null}],"m":"\u00e9"})"));
}

TEST(JsonSchemaGrammar, StringsEscapesUtf8AndLengths) {
  const Grammar g = compile_ok(R"({"type":"string"})");
  EXPECT_TRUE(accepts(g, R"("a\"b\\c\n\u00e9")"));
  EXPECT_TRUE(accepts(g, "\"caf\xC3\xA9 \xF0\x9F\x98\x80\""));
  EXPECT_FALSE(accepts(g, "\"a\nb\""));           // raw control character
  EXPECT_FALSE(accepts(g, "\"\xC3\""));           // cut UTF-8
  EXPECT_FALSE(accepts(g, "\"\xED\xA0\x80\""));   // encoded surrogate
  EXPECT_FALSE(accepts(g, R"("\ud800")"));        // lone surrogate escape
  EXPECT_FALSE(accepts(g, R"("\x")"));
  const Grammar bounded = compile_ok(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(accepts(bounded, R"("a")"));
  EXPECT_TRUE(accepts(bounded, R"("ab")"));
  EXPECT_TRUE(accepts(bounded, "\"\xC3\xA9\\n\xC3\xA9\""));  // three characters
  EXPECT_FALSE(accepts(bounded, R"("abcd")"));
}

TEST(JsonSchemaGrammar, Formats) {
  const Grammar date = compile_ok(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(accepts(date, R"("2024-02-28")"));
  EXPECT_TRUE(accepts(date, R"("1999-12-31")"));
  EXPECT_FALSE(accepts(date, R"("2024-02-30")"));
  EXPECT_FALSE(accepts(date, R"("2024-13-01")"));
  EXPECT_FALSE(accepts(date, R"("2024-04-31")"));
  const Grammar dt = compile_ok(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(accepts(dt, R"("2024-05-01T13:45:00Z")"));
  EXPECT_TRUE(accepts(dt, R"("2024-05-01T13:45:00.123+02:00")"));
  EXPECT_FALSE(accepts(dt, R"("2024-05-01T24:00:00Z")"));
  const Grammar uuid = compile_ok(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(accepts(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(accepts(uuid, R"("123e4567e89b12d3a456426614174000")"));
  const Grammar email = compile_ok(R"({"type":"string","format":"email"})");
  EXPECT_TRUE(accepts(email, R"("jane.doe+x@example.co.uk")"));
  EXPECT_FALSE(accepts(email, R"("jane")"));
  const Grammar ip = compile_ok(R"({"format":"ipv4"})");
  EXPECT_TRUE(accepts(ip, R"("192.168.0.255")"));
  EXPECT_FALSE(accepts(ip, R"("192.168.0.256")"));
}

TEST(JsonSchemaGrammar, IntegerAndNumberBounds) {
  const Grammar g = compile_ok(R"({"type":"integer","minimum":-15,"maximum":230})");
  for (int v = -40; v <= 300; ++v) EXPECT_EQ(accepts(g, std::to_string(v)), v >= -15 && v <= 230) << v;
  EXPECT_FALSE(accepts(g, "-0"));
  EXPECT_FALSE(accepts(g, "007"));
  const Grammar ex = compile_ok(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})");
  EXPECT_FALSE(accepts(ex, "0"));
  EXPECT_TRUE(accepts(ex, "9"));
  EXPECT_FALSE(accepts(ex, "10"));
  const Grammar open = compile_ok(R"({"type":"integer","minimum":100})");
  EXPECT_FALSE(accepts(open, "99"));
  EXPECT_TRUE(accepts(open, "100"));
  EXPECT_TRUE(accepts(open, "123456"));
  const Grammar number = compile_ok(R"({"type":"number"})");
  for (const char* ok : {"0", "-1.5", "3.25e10", "1E-2", "12"}) EXPECT_TRUE(accepts(number, ok)) << ok;
  for (const char* bad : {"01", ".5", "1.", "+1", "1e", "--1"}) EXPECT_FALSE(accepts(number, bad)) << bad;
  const Grammar price = compile_ok(R"({"type":"number","minimum":0.5,"maximum":99.9})");
  EXPECT_TRUE(accepts(price, "1"));
  EXPECT_TRUE(accepts(price, "99"));
  EXPECT_FALSE(accepts(price, "0"));
  EXPECT_FALSE(accepts(price, "100"));
}

TEST(JsonSchemaGrammar, EnumConstAndTypeLists) {
  const Grammar g = compile_ok(R"({"enum":["red","green",3,null,{"a":[1]}]})");
  for (const char* ok : {R"("red")", R"("green")", "3", "null", R"({"a":[1]})"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  EXPECT_FALSE(accepts(g, R"("blue")"));
  const Grammar typed = compile_ok(R"({"type":"string","enum":["a",1]})");
  EXPECT_TRUE(accepts(typed, R"("a")"));
  EXPECT_FALSE(accepts(typed, "1"));
  const Grammar c = compile_ok(R"({"const":"fixed"})");
  EXPECT_TRUE(accepts(c, R"("fixed")"));
  EXPECT_FALSE(accepts(c, R"("other")"));
  const Grammar nullable = compile_ok(R"({"type":["string","null"]})");
  EXPECT_TRUE(accepts(nullable, "null"));
  EXPECT_TRUE(accepts(nullable, R"("x")"));
  EXPECT_FALSE(accepts(nullable, "1"));
}

TEST(JsonSchemaGrammar, ArraysItemCountsAndTuples) {
  const Grammar g = compile_ok(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})");
  EXPECT_FALSE(accepts(g, "[1]"));
  EXPECT_TRUE(accepts(g, "[1, 2]"));
  EXPECT_TRUE(accepts(g, "[1,2,3]"));
  EXPECT_FALSE(accepts(g, "[1,2,3,4]"));
  EXPECT_FALSE(accepts(g, "[1,2,]"));
  const Grammar empty_ok = compile_ok(R"({"type":"array","items":{"type":"string"}})");
  EXPECT_TRUE(accepts(empty_ok, "[]"));
  EXPECT_TRUE(accepts(empty_ok, R"(["a","b"])"));
  const Grammar tuple = compile_ok(R"({"type":"array","prefixItems":[{"type":"number"},{"type":"string"}],"items":false,"minItems":2})");
  EXPECT_TRUE(accepts(tuple, R"([1.5,"x"])"));
  EXPECT_FALSE(accepts(tuple, R"(["x",1])"));
}

TEST(JsonSchemaGrammar, AnyOfAndRecursiveRefs) {
  const Grammar g = compile_ok(R"({"anyOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind","x"]},
                                           {"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"string"}},"required":["kind","y"]}]})");
  EXPECT_TRUE(accepts(g, R"({"kind":"a","x":1})"));
  EXPECT_TRUE(accepts(g, R"({"kind":"b","y":"s"})"));
  EXPECT_FALSE(accepts(g, R"({"kind":"a","y":"s"})"));
  const Grammar tree = compile_ok(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},
      "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["name","children"]}}})");
  EXPECT_TRUE(accepts(tree, R"({"name":"r","children":[{"name":"a","children":[]},{"name":"b","children":[{"name":"c","children":[]}]}]})"));
  EXPECT_FALSE(accepts(tree, R"({"name":"r","children":[{"name":"a"}]})"));
}

TEST(JsonSchemaGrammar, Patterns) {
  struct Case {
    const char* pattern;
    std::vector<const char*> match, no_match;  // JSON string texts
  };
  const Case cases[] = {
      {"^[A-Z]{3}$", {R"("USD")", R"("EUR")"}, {R"("usd")", R"("USDX")", R"("US")"}},
      {R"(^\\d{5}(-\\d{4})?$)", {R"("12345")", R"("12345-6789")"}, {R"("1234")", R"("12345-67")", R"("abcde")"}},
      {"^#[0-9a-fA-F]{6}$", {R"("#00ffAA")"}, {R"("#00ffA")", R"("00ffAA0")"}},
      {"^[a-z0-9]+(?:-[a-z0-9]+)*$", {R"("my-slug-2")", R"("a")"}, {R"("-a")", R"("a--b")", R"("A")"}},
      {"^(cat|dog)s?$", {R"("cats")", R"("dog")"}, {R"("cow")", R"("catss")"}},
      {"ab+", {R"("xxabbby")", R"("ab")"}, {R"("a")", R"("ba")"}},  // unanchored: found anywhere
      {"^a.c$", {R"("abc")", R"("a\"c")", "\"a\xC3\xA9" "c\""}, {R"("a\nc")", R"("ac")"}},
      {"^[^a-z]+$", {R"("ABC 12")", R"("\\")"}, {R"("Ab")", "\"\xC3\xA9\""}},  // negated sets: ASCII only
      {R"re(^\\$\\.\\(x\\)$)re", {"\"$.(x)\""}, {"\"$x(x)\""}},
      {R"(^\\s\\w\\W$)", {R"(" a!")", R"("\ta ")"}, {R"("aa!")"}},
  };
  for (const Case& c : cases) {
    const std::string schema = std::string(R"({"type":"string","pattern":")") + c.pattern + "\"}";
    const Grammar g = compile_ok(schema);
    for (const char* s : c.match) EXPECT_TRUE(accepts(g, s)) << c.pattern << " " << s;
    for (const char* s : c.no_match) EXPECT_FALSE(accepts(g, s)) << c.pattern << " " << s;
  }
  for (const char* bad : {R"((?=a)b)", R"((a)\\1)", R"(\\bword)", "a^b", "[\xC3\xA9]", R"(\\p{L})", "a{1000}", "(a", "[a-", "*a"}) {
    auto g = grammar_from(std::string(R"({"type":"string","pattern":")") + bad + "\"}");
    EXPECT_FALSE(g.ok()) << bad;
  }
}

TEST(JsonSchemaGrammar, UnsupportedKeywordsAreNamed) {
  auto g = grammar_from(R"({"type":"object","properties":{"code":{"type":"string","pattern":"^(?=A)[A-Z]+$"}}})");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("lookaround"), std::string::npos) << g.message();
  EXPECT_NE(g.message().find("#/properties/code/pattern"), std::string::npos) << g.message();
  for (const char* schema : {R"({"not":{}})", R"({"type":"array","uniqueItems":true})", R"({"$ref":"https://example.com/s.json"})",
                             R"({"$ref":"#/$defs/missing"})", R"({"type":"wat"})", R"({"type":"string","format":"hostname-ish"})",
                             R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/a"}}})", "false", R"({"type":"integer","minimum":5,"maximum":1})"}) {
    auto r = grammar_from(schema);
    EXPECT_FALSE(r.ok()) << schema;
  }
}

TEST(JsonSchemaGrammar, LimitsStopHugeSchemas) {
  std::string schema = R"({"type":"object","properties":{)";
  for (int i = 0; i < 200; ++i) schema += (i ? "," : "") + std::string("\"p") + std::to_string(i) + R"(":{"type":"string","maxLength":1000})";
  schema += "}}";
  auto doc = json::parse(schema, "schema");
  ASSERT_TRUE(doc.ok());
  GrammarLimits limits;
  limits.max_positions = 20000;
  auto g = compile_json_schema(*doc, {}, limits);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("more than"), std::string::npos) << g.message();
  // An automaton that explodes when determinized stops at the work bound, with its own message.
  auto exploding = grammar_from(R"({"type":"string","pattern":"^(a|b)*a(a|b){18}$"})");
  ASSERT_FALSE(exploding.ok());
  EXPECT_NE(exploding.message().find("too complex"), std::string::npos) << exploding.message();
  auto nested = grammar_from(R"({"type":"string","pattern":"^([a-z]{0,200}){200}$"})");
  EXPECT_FALSE(nested.ok());
  EXPECT_FALSE(grammar_from(R"({"type":"string","maxLength":5000})").ok());
}

}  // namespace
}  // namespace sluice::constrain
