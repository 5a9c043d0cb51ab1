#pragma once
// sl_tensor descriptions (the ABI's graph tensors) made in one place: a step graph's tensors and the
// probe nodes a BackendHandle asks supports_node about are the same two kinds.
#include <cstdint>

#include "sluice/graph.h"

namespace sluice {

// Rows × cols of `dtype` in buffer b from offset_bytes (b null: a probe's activation, no memory).
inline sl_tensor buffer_tensor(uint32_t rows, uint32_t cols, uint32_t dtype = SL_DTYPE_F32, sl_buffer* b = nullptr,
                               uint64_t offset_bytes = 0) {
  sl_tensor t{};
  t.struct_size = sizeof(t);
  t.kind = SL_TENSOR_BUFFER;
  t.dtype = dtype;
  t.rows = rows;
  t.cols = cols;
  t.buffer = b;
  t.offset = offset_bytes;
  return t;
}

// Weight w as a tensor of its own shape and dtype (w must outlive the tensor).
inline sl_tensor weight_tensor(const sl_weight& w) {
  sl_tensor t{};
  t.struct_size = sizeof(t);
  t.kind = SL_TENSOR_WEIGHT;
  t.dtype = w.dtype;
  t.rows = w.rows;
  t.cols = w.cols;
  t.weight = &w;
  return t;
}

}  // namespace sluice
