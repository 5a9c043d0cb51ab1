#pragma once
// The built-in `resident` expert store: every expert stays in the memory-mapped model files, and
// acquiring one is pointer arithmetic. It implements the same C table as expert-store plugins.
#include "sluice/expertstore.h"

namespace sluice {

const sl_expertstore_api* builtin_resident_store();

}  // namespace sluice
