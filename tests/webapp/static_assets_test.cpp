// The web app's files as the server serves them: found by path, typed by extension, revalidated by
// ETag, exempt from the API key (the page holds no secret) while everything under /v1 is not.
#include <gtest/gtest.h>

#include "server/handlers.h"
#include "server/http_policy.h"
#include "server/router.h"
#include "server/static_assets.h"

namespace sluice::server {
namespace {

std::string header(const Reply& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

TEST(StaticAssets, EmbedsThePageAndItsScripts) {
  for (const char* path : {"/index.html", "/style.css", "/favicon.svg", "/app/main.js", "/app/chat.js", "/app/markdown.js",
                           "/app/models.js", "/app/settings.js", "/app/api.js"}) {
    const EmbeddedFile* f = find_embedded_file(path);
    ASSERT_NE(f, nullptr) << path;
    EXPECT_GT(f->bytes.size(), 100u) << path;
    EXPECT_EQ(f->etag.size(), 18u) << path;  // 16 hex digits in quotes
  }
  EXPECT_EQ(find_embedded_file("/"), find_embedded_file("/index.html"));
  EXPECT_EQ(find_embedded_file("/missing.js"), nullptr);
  EXPECT_EQ(find_embedded_file("/app/../index.html"), nullptr);  // paths are matched exactly, never resolved
  EXPECT_NE(find_embedded_file("/index.html")->bytes.find("<!doctype html>"), std::string_view::npos);
}

TEST(StaticAssets, ContentTypeFollowsTheExtension) {
  EXPECT_EQ(content_type_for("/index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(content_type_for("/app/chat.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(content_type_for("/style.css"), "text/css; charset=utf-8");
  EXPECT_EQ(content_type_for("/favicon.svg"), "image/svg+xml");
  EXPECT_EQ(content_type_for("/shot.png"), "image/png");
  EXPECT_EQ(content_type_for("/blob"), "application/octet-stream");
}

TEST(StaticAssets, AnswersWithBytesAndValidators) {
  const EmbeddedFile& page = *find_embedded_file("/");
  HttpRequest req{http::verb::get, "/", 11};
  const Reply r = static_file_reply(page, req);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, page.bytes);
  EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
  EXPECT_EQ(header(r, "ETag"), page.etag);
  EXPECT_EQ(header(r, "Cache-Control"), "no-cache");
  EXPECT_EQ(header(r, "X-Content-Type-Options"), "nosniff");
  EXPECT_NE(header(r, "Content-Security-Policy").find("default-src 'self'"), std::string::npos);
  EXPECT_TRUE(r.binary);  // the bytes go out as they are

  const Reply js = static_file_reply(*find_embedded_file("/app/chat.js"), req);
  EXPECT_EQ(header(js, "Content-Security-Policy"), "");  // only the page carries the policy
}

TEST(StaticAssets, MatchingIfNoneMatchGets304WithoutABody) {
  const EmbeddedFile& js = *find_embedded_file("/app/main.js");
  HttpRequest req{http::verb::get, "/app/main.js", 11};
  for (const std::string& given : {std::string(js.etag), "\"other\", " + std::string(js.etag), "W/" + std::string(js.etag),
                                  std::string("*")}) {
    req.set(http::field::if_none_match, given);
    const Reply r = static_file_reply(js, req);
    EXPECT_EQ(r.status, 304) << given;
    EXPECT_TRUE(r.body.empty());
    EXPECT_EQ(header(r, "ETag"), js.etag);
  }
  req.set(http::field::if_none_match, "\"0123456789abcdef\"");
  EXPECT_EQ(static_file_reply(js, req).status, 200);
}

TEST(StaticAssets, TextFilesGoGzippedToClientsThatAcceptIt) {
  const EmbeddedFile& js = *find_embedded_file("/app/chat.js");
  ASSERT_FALSE(js.gzip.empty());
  EXPECT_LT(js.gzip.size(), js.bytes.size() / 2);
  EXPECT_EQ(js.gzip.substr(0, 2), "\x1f\x8b");  // the gzip magic
  EXPECT_NE(js.gzip_etag, js.etag);
  HttpRequest req{http::verb::get, "/app/chat.js", 11};
  req.set(http::field::accept_encoding, "gzip, deflate, br");
  Reply r = static_file_reply(js, req);
  EXPECT_EQ(r.body, js.gzip);
  EXPECT_EQ(header(r, "Content-Encoding"), "gzip");
  EXPECT_EQ(header(r, "Vary"), "Accept-Encoding");
  EXPECT_EQ(header(r, "ETag"), js.gzip_etag);
  req.set(http::field::if_none_match, js.gzip_etag);
  EXPECT_EQ(static_file_reply(js, req).status, 304);
  req.set(http::field::if_none_match, js.etag);  // the other form's tag: not this representation
  EXPECT_EQ(static_file_reply(js, req).status, 200);

  req.erase(http::field::if_none_match);
  req.set(http::field::accept_encoding, "gzip;q=0, identity");
  r = static_file_reply(js, req);
  EXPECT_EQ(r.body, js.bytes);
  EXPECT_EQ(header(r, "Content-Encoding"), "");
  EXPECT_EQ(header(r, "Vary"), "Accept-Encoding");
}

TEST(StaticAssets, CorsAddsOriginToWhatTheAnswerVariesBy) {
  http::fields request, response;
  request.set(http::field::origin, "http://app.test");
  response.set(http::field::vary, "Accept-Encoding");
  CorsPolicy("http://app.test").apply(request, response);
  EXPECT_EQ(response[http::field::vary], "Accept-Encoding, Origin");
  http::fields plain;
  CorsPolicy("http://app.test").apply(request, plain);
  EXPECT_EQ(plain[http::field::vary], "Origin");
}

TEST(StaticAssets, ReadsAcceptEncoding) {
  EXPECT_TRUE(accepts_gzip("gzip"));
  EXPECT_TRUE(accepts_gzip("deflate, gzip;q=0.5"));
  EXPECT_TRUE(accepts_gzip("*"));
  EXPECT_TRUE(accepts_gzip("x-gzip"));
  EXPECT_FALSE(accepts_gzip(""));
  EXPECT_FALSE(accepts_gzip("identity"));
  EXPECT_FALSE(accepts_gzip("br"));
  EXPECT_FALSE(accepts_gzip("gzip;q=0"));
  EXPECT_FALSE(accepts_gzip("gzip; q=0.000, *"));  // refused by name: the star does not bring it back
  EXPECT_FALSE(accepts_gzip("*;q=0"));
  EXPECT_FALSE(accepts_gzip("gzipx"));
}

TEST(StaticAssets, PageIsOpenAndTheApiIsGuarded) {
  http::fields none;
  const std::string key = "secret";
  EXPECT_TRUE(is_authorized(none, "/", key));
  EXPECT_TRUE(is_authorized(none, "/app/chat.js", key));
  EXPECT_TRUE(is_authorized(none, "/style.css", key));
  for (const char* api : {"/v1/server", "/v1/hub/models", "/v1/hub/search", "/v1/hub/downloads", "/v1/hub/downloads/dl-1",
                          "/v1/chat/completions", "/app/missing.js"})
    EXPECT_FALSE(is_authorized(none, api, key)) << api;
  http::fields bearer;
  bearer.set(http::field::authorization, "Bearer secret");
  EXPECT_TRUE(is_authorized(bearer, "/v1/hub/downloads", key));
}

TEST(StaticAssets, EveryFileHasAGetRoute) {
  Router r;
  add_static_routes(r);
  EXPECT_NE(r.find(http::verb::get, "/").handler, nullptr);
  for (const auto& f : embedded_files()) EXPECT_NE(r.find(http::verb::get, f.path).handler, nullptr) << f.path;
  EXPECT_EQ(r.find(http::verb::post, "/").error->status, 405);
  EXPECT_EQ(r.find(http::verb::get, "/app/missing.js").error->status, 404);
}

TEST(QueryParams, DecodedByName) {
  EXPECT_EQ(query_param("/v1/hub/search?q=qwen+2.5%2Finstruct&limit=5", "q"), "qwen 2.5/instruct");
  EXPECT_EQ(query_param("/v1/hub/search?q=qwen&limit=5", "limit"), "5");
  EXPECT_EQ(query_param("/v1/hub/search?flag&q=", "q"), "");
  EXPECT_EQ(query_param("/v1/hub/search?flag", "flag"), "");
  EXPECT_FALSE(query_param("/v1/hub/search?q=x", "limit"));
  EXPECT_FALSE(query_param("/v1/hub/search", "q"));
  EXPECT_EQ(percent_decoded("a%2"), "a%2");     // a cut escape stays literal
  EXPECT_EQ(percent_decoded("a%zz"), "a%zz");
  EXPECT_EQ(percent_decoded("a+b"), "a+b");     // '+' is a space only in a query
}

}  // namespace
}  // namespace sluice::server
