#pragma once
// The CPU backend's fusion pass: which runs of a step graph's nodes it runs as one fused kernel —
// products of one input (matvec_multi reads the input's quantized form once for all of them) and the
// residual add with the norm after it (one pass over the rows). Device-free and pure (graph in,
// launches out), so the choice is unit-tested on its own (cpu_fusion_plan_test.cpp).
#include <cstdint>
#include <vector>

#include "graph/patterns.h"

namespace sluice::cpu {

using Launch = graph::Run;
using LaunchKind = graph::RunKind;

constexpr uint32_t kMatmulMultiMax = 4;

inline std::vector<Launch> plan_launches(const sl_graph& g) { return graph::plan_common_runs(g, kMatmulMultiMax); }

}  // namespace sluice::cpu
