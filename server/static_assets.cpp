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

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// If-None-Match holds one ETag, a list, or "*".
bool etag_matches(std::string_view header, std::string_view etag) {
  if (header == "*") return true;
  while (!header.empty()) {
    const auto comma = header.find(',');
    std::string_view item = trimmed(header.substr(0, comma));
    if (item.starts_with("W/")) item.remove_prefix(2);
    if (item == etag) return true;
    if (comma == std::string_view::npos) break;
    header.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

bool accepts_gzip(std::string_view header) {
  bool star = false;
  while (!header.empty()) {
    const auto comma = header.find(',');
    std::string_view item = trimmed(header.substr(0, comma));
    std::string_view coding = trimmed(item.substr(0, item.find(';')));
    bool refused = false;
    if (const auto q = item.find(";"); q != std::string_view::npos) {
      std::string_view param = trimmed(item.substr(q + 1));
      // q=0, q=0.0, q=0.000: "not acceptable".
      if (param.starts_with("q=") && param.substr(2).find_first_not_of("0.") == std::string_view::npos) refused = true;
    }
    if (coding == "gzip" || coding == "x-gzip") return !refused;
    if (coding == "*") star = !refused;
    if (comma == std::string_view::npos) break;
    header.remove_prefix(comma + 1);
  }
  return star;
}

Reply static_file_reply(const EmbeddedFile& file, const HttpRequest& request) {
  const auto accept = request[http::field::accept_encoding];
  const bool gzip = !file.gzip.empty() && accepts_gzip(std::string_view(accept.data(), accept.size()));
  const std::string_view etag = gzip ? file.gzip_etag : file.etag;
  Reply reply;
  reply.content_type = std::string(content_type_for(file.path));
  reply.headers = {
      {"ETag", std::string(etag)},
      {"Cache-Control", "no-cache"},
      {"X-Content-Type-Options", "nosniff"},
  };
  if (!file.gzip.empty()) reply.headers.emplace_back("Vary", "Accept-Encoding");
  if (gzip) reply.headers.emplace_back("Content-Encoding", "gzip");
  if (file.path.ends_with(".html")) {
    // Our own scripts and styles only; the API may live on another origin (the app over --cors).
    reply.headers.emplace_back("Content-Security-Policy",
                               "default-src 'self'; connect-src *; img-src 'self' data:; object-src 'none'; "
                               "base-uri 'none'; frame-ancestors 'none'");
    reply.headers.emplace_back("Referrer-Policy", "no-referrer");
  }
  const auto given = request[http::field::if_none_match];
  if (!given.empty() && etag_matches(std::string_view(given.data(), given.size()), etag)) {
    reply.status = 304;
    return reply;
  }
  reply.body.assign(gzip ? file.gzip : file.bytes);
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
