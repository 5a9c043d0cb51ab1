#include "server/api_error.h"

#include <gtest/gtest.h>

#include "util/json.h"

using namespace sluice;
using namespace sluice::server;

TEST(ApiError, SerializesOpenAiShapeWithNullsForEmptyParamAndCode) {
  auto doc = json::parse(ApiError::bad_request("bad \"x\"").to_json(), "error");
  ASSERT_TRUE(doc.ok());
  const auto& e = (*doc)["error"];
  EXPECT_STREQ(e["message"].GetString(), "bad \"x\"");
  EXPECT_STREQ(e["type"].GetString(), "invalid_request_error");
  EXPECT_TRUE(e["param"].IsNull());
  EXPECT_TRUE(e["code"].IsNull());
}

TEST(ApiError, StatusCodesMatchTheirKinds) {
  EXPECT_EQ(ApiError::bad_request("x", "n").status, 400);
  EXPECT_EQ(ApiError::unauthorized().status, 401);
  EXPECT_EQ(ApiError::not_found("/x").status, 404);
  EXPECT_EQ(ApiError::method_not_allowed("GET", "/x").status, 405);
  EXPECT_EQ(ApiError::payload_too_large(10).status, 413);
  EXPECT_EQ(ApiError::uri_too_long(10).status, 414);
  EXPECT_EQ(ApiError::header_fields_too_large(10).status, 431);
  EXPECT_EQ(ApiError::overloaded("full").status, 503);
  auto doc = json::parse(ApiError::bad_request("x", "n").to_json(), "error");
  EXPECT_STREQ((*doc)["error"]["param"].GetString(), "n");
}
