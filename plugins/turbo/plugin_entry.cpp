// One turbo codec's plugin entry; CMake builds this file once per codec name with TURBO_NAME,
// TURBO_FACTORY and TURBO_DESCRIPTION defined (plugins/turbo/CMakeLists.txt).
#include "turbo/turbo_codecs.h"

namespace {

const sl_kvcodec_api kApi = sluice::kvcodec::make_kvcodec_api<sluice::turbo::TURBO_FACTORY>();
const sl_plugin_descriptor kDescriptor = {sizeof(sl_plugin_descriptor), SL_ABI_VERSION, SL_PLUGIN_KVCODEC, TURBO_NAME, "0.1.0",
                                          TURBO_DESCRIPTION, nullptr, &kApi};

}  // namespace

extern "C" SL_EXPORT const sl_plugin_descriptor* sluice_plugin_entry(void) { return &kDescriptor; }
