#pragma once
// Server-sent events framing for streamed completions: `data: {json}\n\n`, ended by `data: [DONE]\n\n`.
#include <string>
#include <string_view>

namespace sluice::server {

// One event carrying a JSON payload. JSON text has no raw newlines, so one `data:` line suffices;
// a payload that does contain line breaks (\n, \r or \r\n) is split into several `data:` lines, as the SSE spec requires.
std::string sse_event(std::string_view data);
inline std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace sluice::server
