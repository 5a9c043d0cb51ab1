#pragma once
// The web chat app (webapp/): its files, embedded in the binary at build time (cmake/embed_files.cmake),
// served at / without the API key — the page holds no secret; what it calls under /v1 needs the key.
#include <span>
#include <string_view>

#include "server/router.h"

namespace sluice::server {

struct EmbeddedFile {
  std::string_view path;   // "/index.html", "/app/chat.js"
  std::string_view bytes;
  std::string_view etag;   // quoted, as the header carries it
  std::string_view gzip;       // the bytes gzip-compressed; empty when not worth it (images, tiny files)
  std::string_view gzip_etag;  // the compressed form's own ETag (a different representation)
};

// Every embedded file (generated).
std::span<const EmbeddedFile> embedded_files();
// The file a request path names ("/" is /index.html); null when none.
const EmbeddedFile* find_embedded_file(std::string_view path);
// By extension: text/html, text/css, text/javascript, image/svg+xml, ... (utf-8 for text).
std::string_view content_type_for(std::string_view path);
// Whether an Accept-Encoding value admits gzip ("gzip", "gzip, br", "*"; not "gzip;q=0").
bool accepts_gzip(std::string_view accept_encoding);

// GET of an embedded file: 200 with its bytes — gzip-compressed when the request accepts gzip and a
// compressed copy exists — or 304 when If-None-Match names the chosen form's ETag. The browser
// revalidates each time (the names carry no hash), which costs one small request per file.
Reply static_file_reply(const EmbeddedFile& file, const HttpRequest& request);

// GET / and GET of every embedded file.
void add_static_routes(Router& router);

}  // namespace sluice::server
