// json::parse under limits: every limit is an error that names it, deep input never recurses (the
// old parser overflowed the stack at ~130 000 levels), and wide input stays linear.
#include <string>
#include <cstdint>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "util/json.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

std::string nested_arrays(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string nested_objects(std::size_t depth) {
  std::string text;
  for (std::size_t i = 0; i < depth; ++i) text += "{\"a\":";
  text += "0";
  text += std::string(depth, '}');
  return text;
}

std::string wide_object(std::size_t keys) {
  std::string text = "{";
  for (std::size_t i = 0; i < keys; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  return text + "}";
}

std::string parse_error(std::string_view text, const json::JsonLimits& limits = {}) {
  auto doc = json::parse(text, "input", limits);
  EXPECT_FALSE(doc.ok()) << "expected a limit error";
  return doc.ok() ? std::string() : doc.message();
}

TEST(JsonLimits, TwoHundredThousandNestedArraysAreAnErrorNotACrash) {
  const std::string msg = parse_error(nested_arrays(200000));
  EXPECT_THAT(msg, HasSubstr("input"));
  EXPECT_THAT(msg, HasSubstr("nesting deeper than 128 levels"));
  EXPECT_THAT(msg, HasSubstr("max_depth"));
  // Stopped at the first bracket too deep, not after reading the whole text.
  const auto at = msg.find("at offset ");
  ASSERT_NE(at, std::string::npos) << msg;
  EXPECT_LE(std::stoul(msg.substr(at + 10)), 130u) << msg;
}

TEST(JsonLimits, DeepObjectsAndUnclosedNestingAreErrorsToo) {
  EXPECT_THAT(parse_error(nested_objects(200000)), HasSubstr("max_depth"));
  EXPECT_THAT(parse_error(std::string(200000, '[')), HasSubstr("max_depth"));
  EXPECT_THAT(parse_error(std::string(200000, '{')), HasSubstr("malformed JSON"));  // a key must follow '{'
}

TEST(JsonLimits, DepthLimitIsExact) {
  json::JsonLimits limits;
  limits.max_depth = 5;
  EXPECT_TRUE(json::parse(nested_arrays(5), "input", limits).ok());
  EXPECT_TRUE(json::parse(nested_objects(5), "input", limits).ok());
  EXPECT_THAT(parse_error(nested_arrays(6), limits), HasSubstr("nesting deeper than 5 levels"));
  EXPECT_THAT(parse_error(nested_objects(6), limits), HasSubstr("max_depth"));
}

TEST(JsonLimits, WideObjectOfHundredThousandKeysParsesAndANarrowLimitRefusesIt) {
  const std::string text = wide_object(100000);
  auto doc = json::parse(text, "input");
  ASSERT_TRUE(doc.ok()) << doc.message();
  EXPECT_EQ(doc->MemberCount(), 100000u);
  EXPECT_EQ((*doc)["k99999"].GetInt(), 99999);

  json::JsonLimits narrow;
  narrow.max_object_members = 1000;
  const std::string msg = parse_error(text, narrow);
  EXPECT_THAT(msg, HasSubstr("an object of more than 1000 members (limit max_object_members)"));
}

TEST(JsonLimits, EachLimitIsNamedWhenExceeded) {
  json::JsonLimits limits;
  limits.max_array_elements = 3;
  EXPECT_THAT(parse_error("[1,2,3,4]", limits), HasSubstr("an array of more than 3 elements (limit max_array_elements)"));
  EXPECT_TRUE(json::parse("[1,2,3]", "input", limits).ok());

  limits = {};
  limits.max_object_members = 2;
  EXPECT_THAT(parse_error(R"({"a":1,"b":2,"c":3})", limits), HasSubstr("max_object_members"));
  EXPECT_TRUE(json::parse(R"({"a":[1,2,3],"b":{"x":1,"y":2}})", "input", limits).ok());  // counted per object

  limits = {};
  limits.max_string_bytes = 4;
  EXPECT_THAT(parse_error(R"(["abcde"])", limits), HasSubstr("a string of 5 bytes, longer than 4 (limit max_string_bytes)"));
  EXPECT_THAT(parse_error(R"({"abcde":1})", limits), HasSubstr("max_string_bytes"));  // keys too
  EXPECT_TRUE(json::parse(R"({"abcd":"abcd"})", "input", limits).ok());

  limits = {};
  limits.max_values = 4;
  EXPECT_THAT(parse_error("[[1],[2]]", limits), HasSubstr("more than 4 values (limit max_values)"));
  EXPECT_TRUE(json::parse("[[1],2]", "input", limits).ok());

  limits = {};
  limits.max_bytes = 8;
  EXPECT_THAT(parse_error("[1,2,3,4,5]", limits), HasSubstr("JSON text of 11 bytes is larger than 8 (limit max_bytes)"));
}

TEST(JsonLimits, MalformedTextStillReportsOffsetAndReason) {
  const std::string msg = parse_error(R"({"a": 1,,})");
  EXPECT_THAT(msg, HasSubstr("input: malformed JSON at offset 8"));
  EXPECT_THAT(parse_error("[1] [2]"), HasSubstr("malformed JSON"));  // one root value only
  EXPECT_THAT(parse_error(""), HasSubstr("malformed JSON"));
}

TEST(JsonLimits, ParsedValuesAreTheSameAsBefore) {
  auto doc = json::parse("\xEF\xBB\xBF" R"({"s":"x\u00e9\n","i":-3,"u":18446744073709551615,"d":0.1,"b":true,"n":null,"a":[]})",
                         "input");
  ASSERT_TRUE(doc.ok()) << doc.message();
  EXPECT_EQ(std::string((*doc)["s"].GetString()), "x\xC3\xA9\n");
  EXPECT_EQ((*doc)["i"].GetInt(), -3);
  EXPECT_EQ((*doc)["u"].GetUint64(), 18446744073709551615ull);
  EXPECT_EQ((*doc)["d"].GetDouble(), 0.1);  // full precision
  EXPECT_TRUE((*doc)["b"].GetBool());
  EXPECT_TRUE((*doc)["n"].IsNull());
  EXPECT_TRUE((*doc)["a"].IsArray());
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Numbers are converted by us, not by RapidJSON 1.1's full-precision path, which read past its table of
// powers of ten on long significands with large exponents and shifted by 64 on a zero significand
// (fuzz findings 5 and 7). Each value must be what json.loads would give, or a clear error.
TEST(JsonNumbers, ConvertExactlyOrRefuseClearly) {
  auto doc = json::parse(R"([0e40, 0.0e40, 0.1, -0, 1e-400, 18446744073709551615, -9223372036854775808,
                             18446744073709551616, 2.5e-3, 123456789012345678901234567890])", "input");
  ASSERT_TRUE(doc.ok()) << doc.message();
  const auto& a = doc->GetArray();
  EXPECT_TRUE(a[0].IsDouble());
  EXPECT_EQ(a[0].GetDouble(), 0.0);
  EXPECT_EQ(a[1].GetDouble(), 0.0);
  EXPECT_EQ(a[2].GetDouble(), 0.1);
  EXPECT_TRUE(a[3].IsInt64());
  EXPECT_EQ(a[3].GetInt64(), 0);
  EXPECT_EQ(a[4].GetDouble(), 0.0);  // underflow is zero, as in json.loads
  EXPECT_TRUE(a[5].IsUint64());
  EXPECT_EQ(a[5].GetUint64(), UINT64_MAX);
  EXPECT_TRUE(a[6].IsInt64());
  EXPECT_EQ(a[6].GetInt64(), INT64_MIN);
  EXPECT_TRUE(a[7].IsDouble());
  EXPECT_EQ(a[7].GetDouble(), 18446744073709551616.0);
  EXPECT_EQ(a[8].GetDouble(), 2.5e-3);
  EXPECT_EQ(a[9].GetDouble(), 123456789012345678901234567890.0);
  EXPECT_TRUE(json::parse("[5]", "input")->GetArray()[0].IsInt());  // small integers stay ints

  const std::string finding7 = "[" + std::string(77, '1') + "011e308]";
  auto big = json::parse(finding7, "input");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.message().find("malformed JSON at offset"), std::string::npos) << big.message();
  EXPECT_NE(big.message().find("beyond the range of a double"), std::string::npos) << big.message();
}

}  // namespace
}  // namespace sluice
