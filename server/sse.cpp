#include "server/sse.h"

namespace sluice::server {

std::string sse_event(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 8);
  // A client ends a line at \r\n, \r or \n (SSE spec), so each of them starts a new `data:` line; a bare
  // \r passed through would end the line early and the client would drop the rest as an unknown field.
  std::size_t start = 0;
  while (true) {
    std::size_t br = data.find_first_of("\r\n", start);
    out += "data: ";
    out.append(data.substr(start, br == std::string_view::npos ? std::string_view::npos : br - start));
    out += '\n';
    if (br == std::string_view::npos) break;
    start = br + (data[br] == '\r' && br + 1 < data.size() && data[br + 1] == '\n' ? 2 : 1);
  }
  out += '\n';
  return out;
}

}  // namespace sluice::server
