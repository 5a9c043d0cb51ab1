#pragma once
// The OpenCL C source a turbo codec instance hands to device backends: its layout and tables as
// definitions, then the device functions of kernels_cl/kvcodec_turbo.cl (embedded at build time).
#include <string>

#include "sluice/kvcodec.h"
#include "turbo/mse_stage.h"

namespace sluice::turbo {

std::string mse_opencl_source(const MseStage& stage, sl_kv_role role);

}  // namespace sluice::turbo
