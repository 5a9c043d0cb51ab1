#pragma once
// This machine's memory bandwidth, measured the way a decode step reads: each thread streams its own
// share of one large array once (bandwidth benchmarks beside a decode figure say how close the decode
// came to what the memory can give, on the same machine in the same minutes).
#include <cstddef>

namespace sluice {

struct MemoryBandwidth {
  double read_gbs = 0;  // bytes read per second, best of the repetitions
  double copy_gbs = 0;  // memcpy: bytes read + bytes written per second
};

// `threads` threads (0 = every hardware thread), an array of `bytes` (far past any cache), best of `reps`.
MemoryBandwidth measure_memory_bandwidth(unsigned threads, std::size_t bytes = std::size_t(512) << 20, int reps = 5);

}  // namespace sluice
