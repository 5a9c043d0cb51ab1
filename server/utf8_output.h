#pragma once
// Every response is valid UTF-8, whatever bytes the request carried (a prompt echoed, a stop string,
// a path quoted in an error): invalid bytes become U+FFFD as the tokenizer's decoder replaces them
// (each maximal invalid subsequence → one U+FFFD, tokenizer::utf8_lossy). JSON's structure is ASCII
// and never part of an invalid sequence, so repairing a whole JSON text only touches string contents.
#include <string>

namespace sluice::server {

// Leaves valid text as it is (no copy); repairs it in place otherwise.
void make_valid_utf8(std::string& text);

}  // namespace sluice::server
