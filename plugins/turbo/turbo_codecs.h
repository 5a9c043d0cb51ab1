#pragma once
// The TurboQuant KV codecs (docs/PLUGINS-kvcodec.md):
//   turbo2 / turbo3 / turbo4 — the MSE stage (mse_stage.h) at 2, 3, 4 bits per value + an f16
//                              scale per rotation block;
//   turbo-prod               — (b−1)-bit MSE stage + 1-bit QJL of the residual (arXiv 2504.19874,
//                              Algorithm 2): an unbiased inner-product estimate, made for keys.
// Options (after "name:", items separated by ':' or ';'):
//   seed=N            the rotation signs' (and QJL matrix's) seed; default kDefaultSeed
//   norm=exact|raw|ls the block scale (mse_stage.h); default exact
//   rot=1|2|4|8|16    turbo2/3/4: candidate rotations per block, the encoder keeps the best
//                     (mse_stage.h); 1 = the paper's quantizer. Default kDefaultKeyRotations for
//                     keys, kDefaultValueRotations for values: a key's error moves every softmax
//                     weight, a value's averages out over the keys attended, and with one rotation
//                     values accumulate in one domain (registers, not R local-memory slots) —
//                     perf/results/kv_codecs_quality.md measures the pair
//   bits=2..4         turbo-prod only: total bits per value; default 4 (3-bit MSE + 1-bit QJL)
#include <memory>

#include "kvcodec_common/codec_plugin.h"

namespace sluice::turbo {

inline constexpr uint64_t kDefaultSeed = 0x5111CE7u;
inline constexpr uint32_t kDefaultKeyRotations = 16;
inline constexpr uint32_t kDefaultValueRotations = 1;

std::unique_ptr<kvcodec::Codec> make_turbo2(uint32_t head_dim, sl_kv_role role, kvcodec::Options& options);
std::unique_ptr<kvcodec::Codec> make_turbo3(uint32_t head_dim, sl_kv_role role, kvcodec::Options& options);
std::unique_ptr<kvcodec::Codec> make_turbo4(uint32_t head_dim, sl_kv_role role, kvcodec::Options& options);
std::unique_ptr<kvcodec::Codec> make_turbo_prod(uint32_t head_dim, sl_kv_role role, kvcodec::Options& options);

}  // namespace sluice::turbo
