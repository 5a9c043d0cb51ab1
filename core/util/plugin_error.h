#pragma once
// Filling the caller-owned sl_error at the plugin boundary, for every plugin built in this tree
// (header-only: plugins link nothing of the host). The message is cut to the buffer, always
// terminated; a null err is allowed.
#include <algorithm>
#include <cstring>
#include <string_view>

#include "sluice/plugin.h"

namespace sluice {

inline sl_status set_error(sl_error* err, sl_status status, std::string_view message) {
  if (err) {
    const std::size_t n = std::min<std::size_t>(message.size(), SL_ERROR_MESSAGE_SIZE - 1);
    std::memcpy(err->message, message.data(), n);
    err->message[n] = '\0';
  }
  return status;
}

}  // namespace sluice
