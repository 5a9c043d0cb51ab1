#include "server/http_policy.h"

#include <gtest/gtest.h>

#include "server/router.h"

using namespace sluice::server;

TEST(Auth, NoKeyConfiguredAllowsEverything) {
  http::fields h;
  EXPECT_TRUE(is_authorized(h, "/v1/models", ""));
}

TEST(Auth, BearerOrXApiKeyIsAccepted) {
  http::fields h;
  EXPECT_FALSE(is_authorized(h, "/v1/models", "secret"));
  h.set(http::field::authorization, "Bearer secret");
  EXPECT_TRUE(is_authorized(h, "/v1/models", "secret"));
  h.set(http::field::authorization, "Bearer secreT");
  EXPECT_FALSE(is_authorized(h, "/v1/models", "secret"));
  h.set(http::field::authorization, "Bearer secret2");
  EXPECT_FALSE(is_authorized(h, "/v1/models", "secret"));
  http::fields x;
  x.set("x-api-key", "secret");
  EXPECT_TRUE(is_authorized(x, "/v1/chat/completions", "secret"));
}

TEST(Auth, HealthAndMetricsAreExempt) {
  http::fields h;
  EXPECT_TRUE(is_authorized(h, "/health", "secret"));
  EXPECT_TRUE(is_authorized(h, "/metrics", "secret"));
}

TEST(Cors, DisabledAddsNothing) {
  CorsPolicy cors("");
  http::request<http::string_body> req;
  req.set(http::field::origin, "http://a.example");
  http::response<http::string_body> res;
  cors.apply(req, res);
  EXPECT_EQ(res.count(http::field::access_control_allow_origin), 0u);
}

TEST(Cors, ExactOriginOnly) {
  CorsPolicy cors("http://a.example");
  http::request<http::string_body> req;
  req.set(http::field::origin, "http://a.example");
  http::response<http::string_body> res;
  cors.apply(req, res);
  EXPECT_EQ(res[http::field::access_control_allow_origin], "http://a.example");
  http::request<http::string_body> other;
  other.set(http::field::origin, "http://b.example");
  http::response<http::string_body> res2;
  cors.apply(other, res2);
  EXPECT_EQ(res2.count(http::field::access_control_allow_origin), 0u);
}

TEST(Cors, PreflightAnswers204WithMethodsAndRequestedHeaders) {
  CorsPolicy cors("*");
  http::request<http::string_body> req{http::verb::options, "/v1/chat/completions", 11};
  req.set(http::field::origin, "http://a.example");
  req.set(http::field::access_control_request_headers, "authorization, content-type");
  auto res = cors.preflight(req);
  EXPECT_EQ(res.result(), http::status::no_content);
  EXPECT_EQ(res[http::field::access_control_allow_origin], "*");
  EXPECT_NE(res[http::field::access_control_allow_methods].find("POST"), std::string::npos);
  EXPECT_EQ(res[http::field::access_control_allow_headers], "authorization, content-type");
}

TEST(Router, FindsRoutesAnd404sAnd405s) {
  Router r;
  r.add(http::verb::get, "/health", [](const HttpRequest&, const std::shared_ptr<ResponseChannel>&) {
    return std::optional<Reply>(Reply::json("{}"));
  });
  auto ok = r.find(http::verb::get, "/health");
  ASSERT_NE(ok.handler, nullptr);
  EXPECT_EQ(ok.route, "/health");
  auto wrong_method = r.find(http::verb::post, "/health");
  ASSERT_EQ(wrong_method.handler, nullptr);
  EXPECT_EQ(wrong_method.error->status, 405);
  auto missing = r.find(http::verb::get, "/nope");
  EXPECT_EQ(missing.error->status, 404);
  EXPECT_EQ(missing.route, "other");
  EXPECT_EQ(target_path("/v1/models?x=1"), "/v1/models");
}

TEST(Router, PrefixRoutesTakeTheRestOfThePathAfterExactOnes) {
  Router r;
  auto answer = [](const char* body) {
    return [body](const HttpRequest&, const std::shared_ptr<ResponseChannel>&) {
      return std::optional<Reply>(Reply::json(body));
    };
  };
  r.add(http::verb::get, "/v1/models", answer("list"));
  r.add_prefix(http::verb::get, "/v1/models/", "/v1/models/{id}", answer("one"));
  auto list = r.find(http::verb::get, "/v1/models");
  ASSERT_NE(list.handler, nullptr);
  EXPECT_EQ((*list.handler)(HttpRequest{}, nullptr)->body, "list");
  auto one = r.find(http::verb::get, "/v1/models/org/name");
  ASSERT_NE(one.handler, nullptr);
  EXPECT_EQ((*one.handler)(HttpRequest{}, nullptr)->body, "one");
  EXPECT_EQ(one.route, "/v1/models/{id}");
  EXPECT_EQ(r.find(http::verb::get, "/v1/models/").error->status, 404);  // no id
  EXPECT_EQ(r.find(http::verb::delete_, "/v1/models/x").error->status, 405);
}
