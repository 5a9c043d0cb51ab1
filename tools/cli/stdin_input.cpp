#include "stdin_input.h"

#include <unistd.h>

#include "util/file_io.h"

namespace sluice::cli {

Result<std::string> read_stdin(std::size_t max_bytes) { return read_all(STDIN_FILENO, max_bytes, "stdin"); }

}  // namespace sluice::cli
