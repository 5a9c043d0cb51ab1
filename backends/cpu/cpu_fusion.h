#pragma once
// The CPU backend's fusion pass: which runs of a step graph's nodes it runs as one fused kernel.
// Device-free and pure (graph in, launches out), so the choice is unit-tested on its own.
#include <cstdint>
#include <vector>

#include "sluice/graph.h"

namespace sluice::cpu {

enum class LaunchKind {
  kSingle,       // one node, its own kernel
  kMatmulMulti,  // 2..4 MATMULs of one input: one pass over the input's quantized form (matvec_multi)
  kAddRmsNorm,   // ADD in place, then RMS_NORM of its result: one pass over the rows
};

struct Launch {
  LaunchKind kind;
  uint32_t first;  // nodes [first, first + count)
  uint32_t count;
};

constexpr uint32_t kMatmulMultiMax = 4;

std::vector<Launch> plan_launches(const sl_graph& g);

}  // namespace sluice::cpu
