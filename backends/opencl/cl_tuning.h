#pragma once
// The OpenCL backend's kernel tuning as data: every parameter that chooses a work-group, a team, rows
// a work-item, a split count, a register cap, a kernel variant or a threshold, with its default; a
// per-device table of entries keyed by vendor and device name (backends/opencl/tuning.txt, embedded
// at build time) whose fields override the defaults; and what a backend's options add for measuring
// (`tuning=FILE`, `tune.KEY=VALUE`). Resolved once when a backend opens its device (sl_backend::tuning).
// Device-free: no OpenCL here, unit-tested without a GPU (tests/opencl/opencl_tuning_test.cpp).
//
// Where the code derives a choice from the device (NVIDIA's inline PTX, the compute capability, the
// compute units, CPU devices) it still does; the table holds the constants those rules use.
// Environment variables remain only for profiling and diagnostics (SLUICE_OPENCL_PROFILE and the like).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/result.h"

namespace sluice::ocl {

// A decode matvec's teams: work-items a team (Q4_TEAM: 32, 64 or 128) and rows a team (R4: 1, 2, 4
// or 8) — written "TEAMxROWS", e.g. "64x2".
struct TeamShape {
  uint32_t team = 0, rows = 0;
  bool operator==(const TeamShape&) const = default;
};

// One matrix shape's decode matvec teams (q4_shape_of: "ROWSxCOLS=TEAMxR").
struct ShapeChoice {
  uint32_t rows = 0, cols = 0;
  TeamShape shape;
  bool operator==(const ShapeChoice&) const = default;
};

// Every tuning parameter with its default: the values the backend used before they were data
// (measured on the H100 where a comment in the code or tuning.txt says so). 0 in a "forcing" field
// means "not forced": the rule or the kernel's own default applies.
struct Tuning {
  // The 4-bit decode matvec's shape per product (cl_device.cpp, q4_shape): q4_tall_shape from
  // q4_tall_rows rows, else q4_big_shape above q4_big_weights weights, else q4_base_shape with its team
  // doubled (up to 128) until q4_warps_per_cu warps of 32 work-items fill every compute unit.
  TeamShape q4_base_shape{32, 4};
  uint32_t q4_tall_rows = 16384;
  TeamShape q4_tall_shape{32, 2};
  uint64_t q4_big_weights = uint64_t(1) << 24;
  TeamShape q4_big_shape{64, 2};
  uint32_t q4_warps_per_cu = 12;
  uint32_t q4_team = 0;                   // forces every product's team (32, 64, 128)
  uint32_t q4_rows = 0;                   // forces every product's rows a team (1, 2, 4, 8)
  std::vector<ShapeChoice> q4_shape_of;   // one matrix shape's teams, over everything above
  uint32_t maxrreg = 0;                   // NVIDIA: registers a work-item of the matvec programs (16..255)
  // The dp4a decode matvec (cl_matmul.cpp; NVIDIA with PTX and sm_61+).
  uint32_t dp4a = 1;                      // 0: one-row 4-bit products through the float matvec
  uint32_t dp4a_min_log2 = 24;            // an input no op rounded takes dp4a from 2^n weights
  uint32_t glu_blocks = 1;                // 0: gate/up/activation in one work-group of 1024 a 32-row block
  TeamShape res_shape{32, 1};             // the residual join's product (matvec_q4_dp4a_res)
  // Batched decode (several sequences, a row each): 4-bit products of 2..q4_batch_max_rows activation
  // rows through matvec_q4_batch (cl_matmul_path.h), in chunks of q4_batch_chunk rows a work-group,
  // q4_batch_team_rows weight rows a team of 32.
  uint32_t q4_batch_max_rows = 64;        // 0: never (the general matvec up to 8 rows, then the GEMM); Hopper: 8
  uint32_t q4_batch_chunk = 8;            // 2, 4, 8 or 16
  uint32_t q4_batch_team_rows = 2;        // 1, 2 or 4
  uint32_t q4_batch_wide_rows = 0;        // batches of this many rows and more (0: none) take…
  uint32_t q4_batch_wide_team_rows = 2;   // …this many weight rows a team (1, 2 or 4)
  uint32_t q4_batch_dp4a = 1;             // 0: the float batch kernel where dp4a runs (see use_dp4a)
  // …and on tensor cores (kernels_cl/matvec_batch_mma.cl; sm_80+ NVIDIA with PTX): batches of
  // q4_batch_mma_min_rows rows and more, q4_batch_mma_m_tiles × 16 weight rows a warp,
  // q4_batch_mma_warps warps a work-group (cl_matmul_path.h, q4_batch_mma_shape), q4_batch_mma_unroll
  // steps' loads in flight a warp.
  uint32_t q4_batch_mma = 1;              // 0: never (dp4a or float as above)
  uint32_t q4_batch_mma_min_rows = 4;     // 2..4096
  uint32_t q4_batch_mma_m_tiles = 1;      // 1 or 2
  uint32_t q4_batch_mma_warps = 8;        // 2, 4, 8 or 16
  uint32_t q4_batch_mma_m_warps = 2;      // of them side by side in m: 1, 2, 4 or 8, fewer below…
  uint32_t q4_batch_mma_groups_per_cu = 1;  // …this many work-groups a compute unit (0: keep them)
  uint32_t q4_batch_mma_unroll = 1;       // 1, 2 or 4
  uint32_t q4_batch_mma_interleave = 0;   // 1: a step's MMAs over the tiles back to back (not yet timed)
  uint32_t q4_batch_multi = 1;        // 0: products of one input (q/k/v, gate/up) a launch each
  // Prefill products.
  uint32_t clblast = 1;                   // 0: our GEMM kernel instead of CLBlast's
  uint32_t mma = 1;                       // 0: no tensor-core GEMM (sm_80+ NVIDIA), the CLBlast path
  uint32_t mma_bk = 64;                   // its columns a step where K allows (32 or 64)
  uint32_t mma_bm = 128;                  // its activation rows a work-group with 64-column steps (64, 128)
  // Attention (cl_kv_cache.cpp, cl_attention.cpp).
  uint32_t att_wg = 64;                   // the attention kernels' work-group (64, 128, 256)
  uint32_t att_wg_fused = 0;              // the same where a program has the fused kernel (0: att_wg)
  uint32_t att_query_parts = 0;           // work-groups a fused query area's rotations split over (0: by the device)
  uint32_t att_team = 0;                  // generic kernel: work-items reading a key row (8, 16, 32)
  uint32_t att_kpt = 0;                   // generic kernel: keys a team loads before summing (1, 2, 4, 8)
  uint32_t att_vu = 0;                    // keys' values a work-item loads before using them (1..64)
  uint32_t att_shfl_local = 0;            // 1: warp exchanges emulated in local memory (checks them without PTX)
  uint32_t att_short = 512;               // attention_short up to this many keys (0: never)
  uint32_t att_groups_per_cu = 8;         // key splits: work-groups a compute unit, generic kernel
  uint32_t att_groups_per_cu_fused = 4;   // the same for the fused kernel and attention_short
  uint32_t fused_attention = 1;           // 0: the generic kernel even where a codec has fused functions
  uint32_t maxrreg_att = 0;               // NVIDIA: registers a work-item of the attention programs (16..255)
  uint32_t mma_att = 1;                   // 0: no tensor-core prefill attention (sm_80+ NVIDIA)
  uint32_t mma_att_min_run = 16;          // consecutive positions of a sequence it takes at least
  uint32_t mma_att_groups_per_cu = 8;     // its key splits: work-groups a compute unit
  uint32_t mma_att_min_tiles = 4;         // 64-key tiles a split keeps at least
  uint32_t mma_att_splits = 0;            // forces its key splits (1..64)
  uint32_t mma_att_queries = 64;          // queries a work-group of it (64 or 128: a warp per 16)
  // Memory.
  uint64_t max_alloc = 0;                 // largest buffer chunk in bytes (0: the device's own limit)

  bool operator==(const Tuning&) const = default;
};

// The fields a table entry, a tuning file or a `tune.` option may set, by name, in Tuning's order.
std::vector<std::string> tuning_field_names();

// A device as the table matches it: CL_DEVICE_VENDOR and CL_DEVICE_NAME.
struct DeviceId {
  std::string vendor, name;
};

// A tuning text: `key = value` lines (`#` comments), first for every device, then in sections whose
// header names the devices they apply to — `[vendor "GLOB" device "GLOB" "GLOB" ...]`, globs with `*`
// and `?` matched against the whole string, ignoring case. tuning.txt says more.
struct TuningSetting {
  std::size_t field = 0;  // index into tuning_field_names()
  std::string value;      // validated when parsed
  std::string where;      // "FILE line N", for messages
};
struct TuningSection {
  std::string header;     // as written, for resolve's report
  std::string vendor;
  std::vector<std::string> devices;
  std::vector<TuningSetting> settings;
};
struct TuningText {
  std::vector<TuningSetting> global;
  std::vector<TuningSection> sections;
};

// Limits on a tuning text (the built-in table and a user's file alike).
inline constexpr std::size_t kTuningMaxBytes = 64 * 1024;
inline constexpr std::size_t kTuningMaxLine = 1024;
inline constexpr std::size_t kTuningMaxSections = 256;
inline constexpr std::size_t kTuningMaxShapes = 64;  // entries of one q4_shape_of

// Parses and validates a tuning text; errors name `what` and the line.
Result<TuningText> parse_tuning_text(std::string_view text, const std::string& what);
// Reads a user's tuning file (at most kTuningMaxBytes) and parses it.
Result<TuningText> read_tuning_file(const std::string& path);

// Sets one field from its text, validated (the accepted values are in the message otherwise).
Status set_tuning_field(Tuning& t, std::string_view key, std::string_view value);

bool glob_match(std::string_view pattern, std::string_view text);  // `*`, `?`; ignoring ASCII case
bool section_matches(const TuningSection& s, const DeviceId& d);

// sl_backend_config.options: tokens separated by spaces or commas — flags (the known words below),
// `tuning=FILE` (once) and `tune.KEY=VALUE` (applied in order, after the table and the file).
struct BackendOptions {
  std::vector<std::string> flags;
  std::string tuning_file;
  std::vector<std::pair<std::string, std::string>> settings;  // (key, value) of tune.KEY=VALUE
};
// Flags the OpenCL backend knows: portable, host-kv, generic-attention, no-attention-join,
// no-res-join, no-glu-join, no-rope-join (the fusion pass's joins: cl_fusion.h), glu-whole-block.
Result<BackendOptions> parse_backend_options(std::string_view text);

// The device's tuning: the defaults, then every matching section of the built-in table in order
// (later entries over earlier ones), then the global settings and matching sections of the
// options' tuning file, then their tune.KEY=VALUE settings. `applied` lists what was used.
struct ResolvedTuning {
  Tuning tuning;
  std::vector<std::string> applied;
};
Result<ResolvedTuning> resolve_tuning(const DeviceId& device, std::string_view table, const BackendOptions& options);

// backends/opencl/tuning.txt, embedded at build time (embed_tuning.cmake).
extern const char kBuiltinTuningTable[];

}  // namespace sluice::ocl
