// Fuzzes the streaming output path: StopMatcher fed generated text in random pieces, and the SSE
// framing of a payload. Input: a count byte, that many length-prefixed stop strings, then the
// generated text as length-prefixed pieces; the bytes of the last piece double as an SSE payload.
//   StopMatcher: what was emitted is the text up to the earliest stop string (or all of it, with the
//   flushed tail, when none came), nothing is emitted after stopping, and only a proper prefix of a
//   stop string is ever held back.
//   sse_event: a client that splits lines the way the SSE spec says reads back the payload (with
//   its line breaks normalized to \n) and sees exactly one event.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <vector>

#include "fuzz_support.h"
#include "server/sse.h"
#include "server/stop_matcher.h"

namespace {

using namespace sluice::server;

bool contains_any(std::string_view text, const std::vector<std::string>& stops) {
  return std::any_of(stops.begin(), stops.end(),
                     [&](const std::string& s) { return !s.empty() && text.find(s) != std::string_view::npos; });
}

void check_stop_matcher(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopMatcher matcher(stops);
  std::size_t longest = 0;
  for (const auto& s : stops) longest = std::max(longest, s.size());
  std::string full, emitted;
  for (const auto& piece : pieces) {
    const std::string before = full;
    full += piece;
    if (matcher.stopped()) {
      FUZZ_CHECK(matcher.push(piece).empty(), "text emitted after the stop");
      continue;
    }
    emitted += matcher.push(piece);
    FUZZ_CHECK(full.compare(0, emitted.size(), emitted) == 0, "emitted text is not a prefix of the input");
    if (matcher.stopped()) {
      FUZZ_CHECK(!contains_any(before, stops), "a stop string in an earlier piece was missed");
      bool at_stop = false;
      for (const auto& s : stops) {
        if (s.empty()) continue;
        FUZZ_CHECK(full.find(s) >= emitted.size(), "a stop string starts inside the emitted text");
        at_stop |= full.compare(emitted.size(), s.size(), s) == 0;
      }
      FUZZ_CHECK(at_stop, "the emitted text does not end where a stop string begins");
    } else {
      FUZZ_CHECK(!contains_any(full, stops), "a stop string went unnoticed");
      const std::size_t held = full.size() - emitted.size();
      FUZZ_CHECK(held == 0 || held < longest, "held back %zu bytes with stops of at most %zu", held, longest);
    }
  }
  const std::string tail = matcher.flush();
  if (matcher.stopped()) FUZZ_CHECK(tail.empty(), "flush after the stop returned text");
  else FUZZ_CHECK(emitted + tail == full, "emitted + flushed differs from the input");
}

// A client's reading of one event, per the SSE spec: lines end at \r\n, \r or \n; a blank line ends
// the event; `data` fields (one optional space after the colon) are joined with \n.
void check_sse(std::string_view payload) {
  const std::string event = sse_event(payload);
  std::vector<std::string> lines;
  std::string line;
  for (std::size_t i = 0; i < event.size(); ++i) {
    const char c = event[i];
    if (c == '\r' || c == '\n') {
      if (c == '\r' && i + 1 < event.size() && event[i + 1] == '\n') ++i;
      lines.push_back(std::exchange(line, {}));
    } else {
      line += c;
    }
  }
  FUZZ_CHECK(line.empty(), "the event does not end with a line break");
  FUZZ_CHECK(lines.size() >= 2 && lines.back().empty(), "the event does not end with a blank line");
  std::string data;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    FUZZ_CHECK(!lines[i].empty(), "a blank line inside the event splits it in two");
    FUZZ_CHECK(lines[i].rfind("data:", 0) == 0, "line %zu is not a data field", i);
    std::string_view value = std::string_view(lines[i]).substr(5);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    if (i) data += '\n';
    data += value;
  }
  std::string expected;
  for (std::size_t i = 0; i < payload.size(); ++i) {
    if (payload[i] == '\r') {
      if (i + 1 < payload.size() && payload[i + 1] == '\n') ++i;
      expected += '\n';
    } else {
      expected += payload[i];
    }
  }
  FUZZ_CHECK(data == expected, "the client reads %zu bytes back from a %zu-byte payload", data.size(), payload.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  std::vector<std::string> stops(in.ConsumeIntegralInRange<int>(0, 4));
  for (auto& s : stops) s = in.ConsumeBytesAsString(in.ConsumeIntegralInRange<std::size_t>(0, 24));
  std::vector<std::string> pieces;
  while (in.remaining_bytes() > 0) pieces.push_back(in.ConsumeBytesAsString(in.ConsumeIntegralInRange<std::size_t>(0, 48)));
  check_stop_matcher(stops, pieces);
  check_sse(pieces.empty() ? std::string_view() : std::string_view(pieces.back()));
  return 0;
}
