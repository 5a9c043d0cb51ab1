#pragma once
// Standard input for the commands that read it (tokenize, detokenize, chat-template): read whole but
// bounded, so a runaway pipe is a clear error rather than unbounded memory.
#include <cstddef>
#include <string>

#include "util/result.h"

namespace sluice::cli {

inline constexpr std::size_t kMaxStdinBytes = std::size_t{64} << 20;

Result<std::string> read_stdin(std::size_t max_bytes = kMaxStdinBytes);

}  // namespace sluice::cli
