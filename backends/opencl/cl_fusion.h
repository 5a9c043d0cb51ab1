#pragma once
// The OpenCL backend's fusion pass: which runs of a step graph's nodes it hands its kernels together —
// products of one input (the dp4a matvec reads the input's 15-bit form once for all) and the residual
// add with the norm after it. Device-free and pure (graph in, launches out): unit-tested without a
// GPU (tests/opencl/cl_fusion_plan_test.cpp).
#include <cstdint>
#include <vector>

#include "graph/patterns.h"

namespace sluice::ocl {

using Launch = graph::Run;
using LaunchKind = graph::RunKind;

constexpr uint32_t kMatmulMultiMax = 4;

inline std::vector<Launch> plan_launches(const sl_graph& g) { return graph::plan_common_runs(g, kMatmulMultiMax); }

}  // namespace sluice::ocl
