#pragma once
// What the device-free fusion-pass tests (tests/backend/cpu_fusion_plan_test.cpp,
// tests/opencl/cl_fusion_plan_test.cpp) build graphs from: buffers that are only addresses, and weight
// descriptors without data.
#include <cstdint>

#include "sluice/graph.h"

namespace sluice::test {

// Distinct fake buffers: a fusion pass compares addresses and never reads through them.
inline sl_buffer* fake_buffer(int i) { return reinterpret_cast<sl_buffer*>(static_cast<std::uintptr_t>(0x1000 * (i + 1))); }

// An f32 weight of rows × cols with no data behind it.
inline sl_weight f32_weight(uint32_t rows, uint32_t cols) {
  sl_weight w{};
  w.struct_size = sizeof(w);
  w.dtype = SL_DTYPE_F32;
  w.rows = rows;
  w.cols = cols;
  return w;
}

}  // namespace sluice::test
