#include "hub/url.h"

namespace sluice::hub {
namespace {

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

Result<Url> Url::parse(std::string_view text) {
  Url u;
  const auto colon = text.find("://");
  if (colon == std::string_view::npos) return make_error("'" + std::string(text) + "' is not an http(s):// URL");
  u.scheme = std::string(text.substr(0, colon));
  for (char& c : u.scheme) c = lower(c);
  if (u.scheme != "http" && u.scheme != "https") return make_error("'" + std::string(text) + "': only http and https are supported");
  std::string_view rest = text.substr(colon + 3);
  const auto path = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, path);
  u.target = path == std::string_view::npos ? "/" : std::string(rest.substr(path));
  if (u.target[0] != '/') u.target = "/" + u.target;
  if (auto hash = u.target.find('#'); hash != std::string::npos) u.target.resize(hash);
  if (authority.find('@') != std::string_view::npos) return make_error("'" + std::string(text) + "': credentials in URLs are not supported");
  bool bracketed = false;
  if (!authority.empty() && authority.front() == '[') {  // [IPv6]:port
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return make_error("'" + std::string(text) + "': unclosed [ in the host");
    u.host = std::string(authority.substr(1, close - 1));
    authority = authority.substr(close + 1);
    if (!authority.empty() && authority.front() != ':') return make_error("'" + std::string(text) + "': text after ] in the host");
    if (!authority.empty()) u.port = std::string(authority.substr(1));
    bracketed = true;
  } else {
    const auto port = authority.rfind(':');
    u.host = std::string(authority.substr(0, port));
    if (port != std::string_view::npos) u.port = std::string(authority.substr(port + 1));
  }
  if (u.host.empty()) return make_error("'" + std::string(text) + "': no host");
  // A name or IPv4 address (letters, digits, '-', '.', '_', '~', '%'), or an IPv6 address in brackets.
  for (char c : u.host) {
    const bool name_char = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                           c == '.' || c == '_' || c == '~' || c == '%';
    const bool v6_char = (c >= '0' && c <= '9') || (lower(c) >= 'a' && lower(c) <= 'f') || c == ':' || c == '.';
    if (bracketed ? !v6_char : !name_char) return make_error("'" + std::string(text) + "': bad host");
  }
  if (u.port.empty()) u.port = u.scheme == "https" ? "443" : "80";
  if (u.port.find_first_not_of("0123456789") != std::string::npos || u.port.size() > 5)
    return make_error("'" + std::string(text) + "': bad port");
  return u;
}

std::string Url::origin() const {
  const bool default_port = (scheme == "http" && port == "80") || (scheme == "https" && port == "443");
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return scheme + "://" + h + (default_port ? "" : ":" + port);
}

Result<Url> Url::resolve(std::string_view location) const {
  location = location.substr(0, location.find('#'));  // a fragment is the client's, never sent
  if (location.find("://") != std::string_view::npos) return Url::parse(location);
  if (location.starts_with("//")) return Url::parse(scheme + ":" + std::string(location));
  Url u = *this;
  if (location.starts_with("/")) {
    u.target = std::string(location);
  } else {
    // Relative to the current path's folder.
    const auto query = target.find('?');
    const std::string path = target.substr(0, query);
    u.target = path.substr(0, path.rfind('/') + 1) + std::string(location);
  }
  return u;
}

}  // namespace sluice::hub
