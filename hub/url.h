#pragma once
// http(s) URLs as the hub protocol needs them: the endpoint, resolve URLs, redirect targets (absolute,
// scheme-relative or relative). Parsing is strict and bounded by the text it is given; no I/O.
#include <string>
#include <string_view>

#include "util/result.h"

namespace sluice::hub {

struct Url {
  std::string scheme;  // "http" or "https"
  std::string host;
  std::string port;    // always set (80/443 by default)
  std::string target;  // path and query, "/" at least

  static Result<Url> parse(std::string_view text);
  std::string origin() const;  // scheme://host[:port] (the port only when not the default)
  std::string text() const { return origin() + target; }
  // The URL a Location header names: absolute (any host) or relative to this one.
  Result<Url> resolve(std::string_view location) const;
};

}  // namespace sluice::hub
