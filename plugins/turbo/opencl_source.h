#pragma once
// The OpenCL C source a turbo codec instance hands to device backends: its layout and tables as
// definitions, then the device functions of kernels_cl/kvcodec_turbo.cl (embedded at build time).
#include <string>

#include "turbo/mse_stage.h"

namespace sluice::turbo {

// Names go through SL_KV_FN (docs/PLUGINS.md), so K and V instances share one program.
std::string mse_opencl_source(const MseStage& stage);

}  // namespace sluice::turbo
