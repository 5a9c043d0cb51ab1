#include "server/static_assets.h"

#include <array>
#include <utility>

namespace sluice::server {

const EmbeddedFile* find_embedded_file(std::string_view path) {
  if (path == "/") path = "/index.html";
  for (const auto& f : embedded_files())
    if (f.path == path) return &f;
  return nullptr;
}

std::string_view content_type_for(std::string_view path) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 8> kTypes{{
      {".html", "text/html; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".json", "application/json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
  }};
  for (const auto& [ext, type] : kTypes)
    if (path.ends_with(ext)) return type;
  return "application/octet-stream";
}

namespace {

// If-None-Match holds one ETag, a list, or "*".
bool etag_matches(std::string_view header, std::string_view etag) {
  if (header == "*") return true;
  while (!header.empty()) {
    const auto comma = header.find(',');
    std::string_view item = header.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.starts_with("W/")) item.remove_prefix(2);
    if (item == etag) return true;
    if (comma == std::string_view::npos) break;
    header.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

Reply static_file_reply(const EmbeddedFile& file, const HttpRequest& request) {
  Reply reply;
  reply.content_type = std::string(content_type_for(file.path));
  reply.headers = {
      {"ETag", std::string(file.etag)},
      {"Cache-Control", "no-cache"},
      {"X-Content-Type-Options", "nosniff"},
  };
  if (file.path.ends_with(".html")) {
    // Our own scripts and styles only; the API may live on another origin (the app over --cors).
    reply.headers.emplace_back("Content-Security-Policy",
                               "default-src 'self'; connect-src *; img-src 'self' data:; object-src 'none'; "
                               "base-uri 'none'; frame-ancestors 'none'");
    reply.headers.emplace_back("Referrer-Policy", "no-referrer");
  }
  const auto given = request[http::field::if_none_match];
  if (!given.empty() && etag_matches(std::string_view(given.data(), given.size()), file.etag)) {
    reply.status = 304;
    return reply;
  }
  reply.body.assign(file.bytes);
  reply.binary = true;
  return reply;
}

void add_static_routes(Router& router) {
  auto serve = [](const EmbeddedFile* file) {
    return [file](const HttpRequest& req, const std::shared_ptr<ResponseChannel>&) -> std::optional<Reply> {
      return static_file_reply(*file, req);
    };
  };
  if (const EmbeddedFile* index = find_embedded_file("/")) router.add(http::verb::get, "/", serve(index));
  for (const auto& f : embedded_files()) router.add(http::verb::get, std::string(f.path), serve(&f));
}

}  // namespace sluice::server
