#pragma once
// The KV codecs built into the host: f32 (exact) and f16 (half precision, the usual default).
// They implement the same C table as codec plugins, fused hooks included.
#include "sluice/kvcodec.h"

namespace sluice {

const sl_kvcodec_api* builtin_f32_codec();
const sl_kvcodec_api* builtin_f16_codec();

}  // namespace sluice
