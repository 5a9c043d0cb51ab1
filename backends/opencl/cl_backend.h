#pragma once
// The OpenCL backend's objects behind the C handles, and what its files share.
// Every entry point catches what it throws (cl::Error, std::exception) and returns a status.
#define CL_HPP_ENABLE_EXCEPTIONS
#define CL_HPP_TARGET_OPENCL_VERSION 300
#define CL_HPP_MINIMUM_OPENCL_VERSION 200
#include <CL/opencl.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cl_fusion.h"
#include "cl_kv_geometry.h"
#include "cl_tuning.h"
#include "graph/graph_copy.h"
#include "sluice/backend.h"
#include "util/kv_shape.h"
#include "util/plugin_error.h"  // set_error

// Device memory. Buffers larger than the device's largest allocation are split into chunks of
// chunk_bytes; a range that straddles chunks (or is misaligned for typed access) is served by a
// read-only contiguous copy made on first use ("view") — only weights are ever read that way.
struct sl_buffer {
  uint64_t bytes = 0;
  uint64_t chunk_bytes = 0;
  std::vector<cl::Buffer> chunks;
  const void* host = nullptr;  // wrap_host: the caller's memory (read-only weights)
  std::map<std::pair<uint64_t, uint64_t>, cl::Buffer> views;
};

struct sl_kv_cache {
  sl_kv_layout layout{};    // layers NULL: each layer's own shape is in `layers`
  // Per layer (sl_kv_layout.layers): a FULL or WINDOW layer's pages in its own heads and widths (a
  // WINDOW layer's n_window_pages, addressed through the batch's window table); a STATE layer's
  // states in state_layers (always on the device).
  std::vector<sluice::KvLayerShape> layers;
  std::vector<cl::Buffer> state_layers;  // per layer: n_state_slots × state_bytes (a placeholder for others)
  bool on_device = false;   // every geometry's codecs give OpenCL source that builds with our kernels
  std::string fallback_reason;  // why the host keeps this cache, when it does
  std::vector<cl::Buffer> device_layers;              // on_device: one buffer per layer
  std::vector<std::vector<std::byte>> host_layers;    // otherwise: the host keeps the KV (codec encode/decode)
  // The recent window's exact rows (f16 bits): per layer n_recent_pages × ([K: head][slot][k_dim], then
  // [V: head][slot][v_dim]).
  std::vector<cl::Buffer> recent_layers;              // on_device
  std::vector<std::vector<uint16_t>> host_recent;     // host path
  // kv_write/attention/attention_merge (and attention_fused when a codec has fused functions, with
  // attention_fused_queries when the keys' are) built with the codecs' source, per query heads per
  // KV head. hpw: query heads per fused work-group.
  struct Kernels {
    cl::Kernel kv_write, attention, merge, fused, fused_queries;
    uint32_t hpw = 0;    // 0: no fused kernel
    uint32_t wide_wg = 0;  // kv_write's, attention_fused_queries' and attention_merge's work-group (WIDE_WG), fixed with the program
    cl::Kernel gather;     // kv_gather_f16: a prefill run's keys and values as f16 rows for attention_mma
    cl::Kernel write_rope;  // kv_write_rope: kv_write with the deferred rope of q and k in its launch
    bool ptx = false;       // built with SLUICE_PTX_SHFL: the outputs' 15-bit form can be written (att_write)
    cl::Kernel short_passes;  // attention_short, where the program has it (null otherwise)
    cl::Kernel short_join;    // attention_short_join: with the deferred kv_write (and rope) in its launch
    cl::Kernel gather_rows;   // kv_gather_f16_rows, where a codec decodes rows together (null otherwise)
    cl::Kernel recent_partial;  // attention_recent_partial: a prefill run's exact keys beside attention_mma
    uint32_t wg = 0;  // the program's attention work-group (WG): tuning att_wg, or att_wg_fused with a fused kernel
    bool query_parts = false;  // attention_fused_queries splits an area's rotations (the codec's fused_prepare_queries_part)
  };
  // The layers' geometries (cl_kv_geometry.h: [0] the layout's own), each with its programs.
  struct Geometry {
    sluice::ocl::KvGeometry shape;
    bool k_fused = false, v_fused = false;  // the codec's source has the fused device functions
    std::map<uint32_t, Kernels> kernels;
  };
  std::vector<Geometry> geometries;
  std::vector<uint32_t> geometry_of;  // per layer
  Geometry& geometry(uint32_t layer) { return geometries[geometry_of[layer]]; }
  const Geometry& geometry(uint32_t layer) const { return geometries[geometry_of[layer]]; }
};

namespace sluice::ocl {

// A range of device memory a kernel can address: a buffer and a byte offset into it.
struct DevPtr {
  cl::Buffer buffer;
  uint64_t offset = 0;
};

// A device buffer that grows to the largest size asked of it and is then reused.
struct Scratch {
  cl::Buffer buffer;
  uint64_t bytes = 0;
  cl::Buffer& at_least(const cl::Context& context, uint64_t need) {
    if (bytes < need) {
      buffer = cl::Buffer(context, CL_MEM_READ_WRITE, need);
      bytes = need;
    }
    return buffer;
  }
};

// A rope launch's arguments: x (n_heads heads) rotated at the batch's positions with one
// (cos, sin) · factor table (sl_backend::RopeTable), and with it x2 (n_heads2 heads; null: x alone).
struct RopeLaunch {
  sl_buffer* x = nullptr;
  uint32_t n_heads = 0, head_dim = 0, half = 0;
  uint32_t style = 0;
  cl::Buffer table;
  sl_buffer* x2 = nullptr;
  uint32_t n_heads2 = 0;
};

// A KV_WRITE the attention of its layer may run in its own launch (attention_short_join), with the
// rope pair that rotates q and k first (rope.x null: none).
struct KvJoin {
  const sl_buffer* k = nullptr;
  const sl_buffer* v = nullptr;
  RopeLaunch rope;
};

// A norm that a product's launch finishes (NORM_ARGS in kernels_cl/matvec.cl): the launch before
// (kResidual, kEmbedNorm: cl_fusion.h) wrote x, the form of (w + w_offset) ⊙ x in form pair `slot`
// and the blocks' Σ x² in sl_backend::norm_parts; the product scales its sums by 1/rms and writes out.
struct NormStep {
  sl_buffer* x = nullptr;
  const sl_weight* weight = nullptr;
  float weight_offset = 0.0f, eps = 0.0f;
  sl_buffer* out = nullptr;
  uint32_t dim = 0;
  uint32_t slot = 0;
};

// What the two 15-bit form pairs (sl_backend::matvec_x8, matvec_x8_alt) hold: a decode activation's
// form, written by the launch that produced the activation, for the dp4a products that read it — in
// the same graph or the next (a pass split into graphs: MoE routing, a read-back between). Every
// launch forgets the forms of the buffers it writes (cl_graph.cpp), as do upload and free, so a form
// always stands for its buffer's values. A launch that reads a form from one pair and writes another
// writes the other pair; any other producer writes pair 0.
struct Forms {
  const sl_buffer* of[2]{};
  uint32_t cols[2]{};
  // The pair holding x's form of n values, or -1.
  int find(const sl_buffer* x, uint32_t n) const {
    for (int s = 0; s < 2; ++s)
      if (x && of[s] == x && cols[s] == n) return s;
    return -1;
  }
  void made(uint32_t slot, const sl_buffer* x, uint32_t n) {
    of[slot] = x;
    cols[slot] = n;
  }
  // A norm step's form (no buffer's values) or garbage now fills the pair.
  void clobbered(uint32_t slot) { of[slot] = nullptr; }
  // b's values are about to change: its form no longer stands for them.
  void written(const sl_buffer* b) {
    for (auto& o : of)
      if (o == b) o = nullptr;
    if (batch_of == b) batch_of = nullptr;
  }
  // The batch pair (sl_backend::batch_x8): the forms of a decode batch's n_rows rows of x, which the
  // products after the first that read the same x (q, k, v; gate, up) reuse — of one kind: the 15-bit
  // forms (kBatchInt15) or the tensor-core kernel's f16 rows with their sums a step of `kind` columns.
  static constexpr uint32_t kBatchInt15 = 1;
  const sl_buffer* batch_of = nullptr;
  uint32_t batch_cols = 0, batch_rows = 0, batch_kind = 0;
  bool holds_batch(const sl_buffer* x, uint32_t n, uint32_t rows, uint32_t kind) const {
    return x && batch_of == x && batch_cols == n && batch_rows == rows && batch_kind == kind;
  }
  void made_batch(const sl_buffer* x, uint32_t n, uint32_t rows, uint32_t kind) {
    batch_of = x;
    batch_cols = n;
    batch_rows = rows;
    batch_kind = kind;
  }
};

// ATTENTION's parameters as the kernels take them: the node's, and its sinks' buffer (null: none).
struct AttentionParams : sl_attention_params {
  const sl_buffer* sinks = nullptr;
};

struct DeviceRef {
  cl::Platform platform;
  cl::Device device;
  uint32_t platform_index = 0, device_index = 0;
};

// What the kernels may rely on, found at create time.
struct Capabilities {
  bool nvidia = false;       // inline PTX accepted (shfl.sync, dp4a, mma.sync)
  uint32_t sm = 0;           // NVIDIA compute capability ×10, 0 elsewhere
  bool unified = false;      // host memory is device memory (CPU devices)
  uint64_t base_align = 128; // bytes every buffer's start is aligned to (kernels load whole vectors from it)
  uint64_t max_alloc = 0;
  uint64_t local_mem = 0;
  size_t max_wg = 0;
  uint32_t compute_units = 0;
};

}  // namespace sluice::ocl

struct sl_backend {
  sluice::ocl::DeviceRef ref;
  cl::Context context;
  cl::CommandQueue queue;
  sluice::ocl::Capabilities caps;
  bool use_ptx = false;      // vendor fast paths on (SLUICE_OPENCL_PORTABLE=1 turns them off)
  std::string options;       // the flags of sl_backend_config.options ("portable host-kv ...")
  // The kernels' tuning for this device (cl_tuning.h): the defaults, the built-in table's entries that
  // match it, then the options' tuning=FILE and tune.KEY=VALUE — resolved once, at create.
  sluice::ocl::Tuning tuning;
  // Programs by name ("ops", "matvec", ...).
  std::map<std::string, cl::Program> programs;
  std::map<std::string, cl::Kernel> kernels;
  // The current batch, on the host and on the device.
  std::vector<int32_t> positions, seq_slots, page_table;
  bool one_token_per_sequence = false;  // decode: no token reads a row another writes (begin_batch)
  std::vector<int32_t> state_slots;   // the batch's state slots (2.0), on the host: state copies read them
  std::vector<int32_t> recent_table;  // empty: the batch has no recent pages
  std::vector<int32_t> window_table;  // 2.0: the WINDOW layers' pages; empty: the batch has none
  uint32_t n_seqs = 0, max_pages = 0;
  cl::Buffer d_positions, d_seq_slots, d_page_table, d_recent_table, d_window_table;
  std::vector<int32_t> ids;  // embed's token ids, as copied to d_ids
  // Pinned host memory for downloads (cl_backend.cpp, pinned_staging), mapped while it lives.
  cl::Buffer pinned;
  void* pinned_map = nullptr;
  uint64_t pinned_bytes = 0;
  std::vector<cl::Event> batch_uploads, ids_uploads;  // copies of the vectors above not yet known done
  size_t d_positions_cap = 0, d_slots_cap = 0, d_table_cap = 0, d_recent_cap = 0, d_window_cap = 0;
  // The rope's (cos, sin) · factor per (position, pair), one table per frequency set and factor a
  // model uses (a few: Gemma 3's local and global layers differ), grown with the positions
  // (cl_ops.cpp, rope_table; kernels_cl/rope.cl says why a table).
  struct RopeTable {
    std::vector<float> inv_freq;
    float factor = 0.0f;
    cl::Buffer d_inv_freq;  // for rope_table_fill
    cl::Buffer table;       // float2 [positions][inv_freq.size()]
    uint32_t positions = 0;
  };
  std::vector<RopeTable> rope_tables;
  // embed's ids, kept on the device while unchanged.
  cl::Buffer d_ids;
  size_t d_ids_cap = 0;
  // Scratch: float32 weight blocks for prefill GEMMs (or the tensor-core GEMM's f16 activations),
  // attention split partials, and attention_fused_queries' query areas (read by every key split).
  sluice::ocl::Scratch gemm_scratch, att_partial, att_q_images;
  sluice::ocl::Scratch moe_rows, moe_weights;  // gather_rows/scatter_add_rows: the host's indices and weights
  // Copies of those host arrays whose uploads (not blocking) may still be running, oldest first.
  struct StagedHostArray {
    std::vector<unsigned char> bytes;
    cl::Event done;
  };
  std::deque<StagedHostArray> staged_host_arrays;
  sluice::ocl::Scratch argmax_values, argmax_indices;  // argmax's per-part maxima (cl_ops.cpp)
  sluice::ocl::Scratch argmax_done;  // NVIDIA's one-launch argmax: parts finished per row, zero between launches
  // SLUICE_OPENCL_PROFILE=1: every launch's event, summed per kernel and printed to stderr at destroy.
  bool profile = false;
  // SLUICE_OPENCL_HOST_TIMING=1: the host's time inside the table's entry points (without profiling
  // events, which slow the host), split into waiting for the device (download, synchronize) and the
  // rest — issuing work. Printed at destroy: when issuing a token's ops takes as long as the token,
  // the host, not the device, sets the pace.
  bool host_timing = false;
  uint64_t host_calls = 0;
  double host_issue_ms = 0, host_wait_ms = 0;
  std::vector<std::pair<std::string, cl::Event>> events;
  // download_begin's copies not yet waited for, by ticket: the copy's event and, for a small copy
  // staged through pinned memory (a read into pageable memory may hold the host until the copy is
  // done, which would undo what the early start is for), its stage slot, to be copied to dst at the
  // wait.
  struct DownloadInFlight {
    cl::Event done;
    int stage_slot = -1;
    void* dst = nullptr;
    uint64_t bytes = 0;
  };
  std::map<uint64_t, DownloadInFlight> downloads;
  uint64_t downloads_begun = 0;
  cl::Buffer small_pinned;             // kSmallStageSlots × kSmallStageBytes, mapped at small_pinned_map
  unsigned char* small_pinned_map = nullptr;
  std::vector<int> small_stage_free;   // free slots of small_pinned
  uint64_t launches_unflushed = 0;  // SLUICE_OPENCL_FLUSH_EVERY (cl_backend.cpp, launch)
  bool clblast_ok = true;    // false after CLBlast failed once on this device: our GEMM kernel instead
  // Quantized prefill GEMM on tensor cores (kernels_cl/gemm_mma.cl): 0 not tried yet, 1 built, -1 off
  // (not an sm_80+ NVIDIA device with PTX on, tuning mma = 0, or its program failed to build).
  int mma_state = 0;
  // The batched decode products on tensor cores (kernels_cl/matvec_batch_mma.cl): 0 not tried yet, 1
  // built, -1 off (not an sm_80+ NVIDIA device with PTX on, or a program failed to build).
  int batch_mma_state = 0;
  // Prefill attention on tensor cores (kernels_cl/attention_mma.cl), per head_dim: 1 built, -1 its
  // program failed to build (the portable kernels serve). The f16 keys and values it reads (kv_gather_f16).
  std::map<std::string, int> att_mma_state;  // per attention_mma program: 0 untried, 1 built, -1 failed
  sluice::ocl::Scratch att_k16, att_v16, att_mma_partial;
  // The decode activation as 15-bit integers for the dp4a matvec (kernels_cl/warp.cl): its bytes and
  // a float2 per 32 columns, in two pairs —
  // the joined gate/up/activation and residual launches write one while they read the other.
  sluice::ocl::Scratch matvec_x8, matvec_x8_blocks;
  sluice::ocl::Scratch matvec_x8_alt, matvec_x8_alt_blocks;
  sluice::ocl::Scratch batch_x8, batch_x8_blocks;  // a decode batch's rows in their 15-bit forms
  sluice::ocl::Forms forms;  // what they hold
  // The fusion pass's options (cl_fusion.h), from the device and the backend's options at create.
  sluice::ocl::FusionOptions fusion;
  // A norm step's blocks' Σ x² (NormStep).
  sluice::ocl::Scratch norm_parts;
  sluice::ocl::Scratch block_counts;  // finished work-groups a 32-row block of a product (zero between launches)
};

namespace sluice::ocl {

// Runs fn, mapping exceptions to a status and message naming `what`.
template <class Fn>
sl_status guarded(sl_error* err, const char* what, Fn&& fn);
sl_status from_cl_error(sl_error* err, const char* what, const cl::Error& e);
const char* cl_error_name(cl_int code);

inline bool fits(uint64_t size, uint64_t offset, uint64_t count) { return offset <= size && count <= size - offset; }

// A buffer a kernel uses whole, with no offset argument (activations): it must be one allocation.
inline cl::Buffer& single(const sl_buffer* b) {
  if (b->chunks.size() != 1) throw std::runtime_error("activation buffer larger than one device allocation");
  return const_cast<cl::Buffer&>(b->chunks[0]);
}

// Devices.
std::vector<DeviceRef> all_devices(std::string* why_none);
sl_status describe_device(const DeviceRef& ref, sl_device_info* out);
Capabilities device_capabilities(const cl::Device& d);

// Programs: our kernels (kernels_cl/, embedded at build time) plus extra source, built once per
// process and cached on disk by source hash, options, device and driver.
cl::Program build_program(sl_backend* be, const std::string& source, const std::string& options);
bool program_has_kernel(const cl::Program& program, const char* name);  // kernels behind an #if in their source
cl::Kernel& kernel(sl_backend* be, const std::string& program, const char* name);
std::string kernel_source(const char* name);  // "common", "matvec", ... from kernels_cl/
std::string program_cache_dir();

// Memory.
// A device range for reading `bytes` at `offset` (a view when it straddles chunks or is misaligned).
DevPtr read_range(sl_backend* be, sl_buffer* b, uint64_t offset, uint64_t bytes, uint64_t align = 4);
// A writable device range: must lie in one chunk.
DevPtr write_range(sl_buffer* b, uint64_t offset, uint64_t bytes);
inline DevPtr whole(const sl_buffer* b) { return DevPtr{b->chunks.at(0), 0}; }
uint64_t weight_bytes(const sl_weight* w);  // bytes of the weight's data
bool weight_form_supported(uint32_t dtype, uint32_t bits);
// A batch vector to the device without waiting; v must not change until its event in `pending`
// completed (wait_uploads).
void upload_batch_vector(sl_backend* be, cl::Buffer& dst, size_t& cap, const std::vector<int32_t>& v,
                         std::vector<cl::Event>& pending);
void wait_uploads(std::vector<cl::Event>& pending);

// Launch helpers.
inline size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }
void launch(sl_backend* be, cl::Kernel& k, const cl::NDRange& global, const cl::NDRange& local = cl::NullRange);

// A diagnostics knob (perf/NOTES.md): the integer in environment variable `name` when `ok` accepts
// it, else 0. Callers read it once per process into a static. Kernel tuning is not read this way but
// from sl_backend::tuning (cl_tuning.h).
long env_knob(const char* name, bool (*ok)(long));

// NVIDIA's cap on registers a work-item (-cl-nv-maxrregcount=cap) when cap is not 0, else "": for
// measuring occupancy (tuning maxrreg for the matvec programs, maxrreg_att for the attention programs).
std::string nv_register_cap(const sl_backend* be, uint32_t cap);

// The 4-bit decode matvec's shape for a product of rows × cols (kernels_cl/matvec.cl): work-items a
// team (Q4_TEAM: 32, 64 or 128) and rows a team (R4: 1, 2, 4 or 8), by the rules and constants of
// sl_backend::tuning (q4_*; q4_team and q4_rows force one for every product).
using Q4Shape = TeamShape;
Q4Shape q4_shape(const sl_backend* be, uint32_t rows, uint32_t cols);
// The program holding the 4-bit decode kernels of a shape: "matvec" (32 × 4, with the other matvec
// kernels), else "matvec_t64_r2" and the like.
std::string q4_program(Q4Shape s);

// The dp4a decode matvec (kernels_cl/matvec.cl): NVIDIA with PTX and dp4a, unless tuning dp4a = 0.
bool use_dp4a(const sl_backend* be);
// For an op producing n_rows × cols values that a product may read next: whether to write their 15-bit
// form too (decode, one row of whole 32-column blocks, dp4a on), and where (pair 0, grown to fit).
bool int15_scratch(sl_backend* be, uint32_t n_rows, uint64_t cols, cl::Buffer*& xq, cl::Buffer*& blocks);
// Where the producer of n_rows × cols activation values (a norm, the activation, attention) writes their
// 15-bit forms for the dp4a product after it: one row's in pair 0 (int15_scratch), a decode batch's
// rows one after another in the batch pair (sl_backend::batch_x8) where the dp4a batch kernel reads
// them (batch_int15_by_producer, cl_matmul_path.h), or nowhere (false). made() records them in Forms
// once the launch that writes them is enqueued.
struct ProducedForms {
  cl::Buffer* xq = nullptr;
  cl::Buffer* blocks = nullptr;
  uint32_t rows = 0, cols = 0;
  explicit operator bool() const { return xq != nullptr; }
  void made(Forms& forms, const sl_buffer* out) const {
    if (!xq) return;
    if (rows == 1) forms.made(0, out, cols);
    else forms.made_batch(out, cols, rows, Forms::kBatchInt15);
  }
};
ProducedForms produced_forms(sl_backend* be, uint64_t n_rows, uint64_t cols);
std::pair<cl::Buffer&, cl::Buffer&> form_pair(sl_backend* be, uint32_t slot, uint64_t cols);  // a pair's buffers (cl_matmul.cpp)
// The norm step's last arguments, shared by the kernels that leave one (matvec_q4_dp4a_res,
// embed_norm_blocks): the norm weight, its dtype and offset, pair `slot`'s form and the blocks' Σ x²
// (norm_parts), from argument a on (cl_matmul.cpp).
void set_norm_step_args(sl_backend* be, cl::Kernel& k, cl_uint a, const sl_weight* weight, float weight_offset,
                        uint32_t slot, uint32_t dim);
// An unquantized vector weight (norm weight, bias) with at least n values: its device range (cl_ops.cpp).
DevPtr vector_weight(sl_backend* be, const sl_weight* w, uint64_t n);
// rms_norm / add_rms_norm as asked (cl_ops.cpp), after their arguments were checked; in decode on
// NVIDIA the output's form too, in pair 0.
void rms_norm_run(sl_backend* be, sl_buffer* x, const sl_buffer* delta, const sl_weight* weight, float weight_offset,
                  sl_buffer* out, uint32_t n_rows, uint32_t dim, float eps, Forms& forms);
// A norm step no product took: the norm as a launch of its own (x holds its input already).
void norm_step_finish(sl_backend* be, const NormStep& step, Forms& forms);

// Ops, one launch or a few each (graph nodes: cl_graph.cpp). Forms: what the form pairs hold in
// this graph's run, read and updated; step: a norm the launch before left, finished by this one.
sl_status embed(sl_backend*, const sl_weight*, const int32_t*, uint32_t, sl_buffer*, sl_error*);
sl_status embed_device(sl_backend*, const sl_weight*, const sl_buffer*, uint64_t, uint32_t, sl_buffer*, sl_error*);
sl_status argmax(sl_backend*, const sl_buffer*, uint32_t, uint32_t, sl_buffer*, uint64_t, sl_error*);
sl_status rms_norm(sl_backend*, const sl_buffer*, const sl_weight*, float, sl_buffer*, uint32_t, uint32_t, float, Forms&, sl_error*);
sl_status add_rms_norm(sl_backend*, sl_buffer*, const sl_buffer*, const sl_weight*, float, sl_buffer*, uint32_t, uint32_t, float,
                       Forms&, sl_error*);
sl_status matmul(sl_backend*, const sl_buffer*, uint32_t, const sl_weight*, const sl_weight*, sl_buffer*, Forms&, const NormStep*,
                 sl_error*);
// HEAD_MATMUL (2.4): per head, x's head times its slice of w's rows (kernels_cl/elementwise.cl).
sl_status head_matmul(sl_backend*, const sl_buffer* x, uint32_t n_tokens, const sl_weight* w, const sl_head_matmul_params& p,
                      sl_buffer* out, sl_error*);
sl_status matmul_multi(sl_backend*, const sl_buffer*, uint32_t, uint32_t, const sl_weight* const*, const sl_weight* const*,
                       sl_buffer* const*, Forms&, const NormStep*, sl_error*);
// 2.5: MATMUL_ID (cl_matmul.cpp; x of n or n * k rows), MOE_ROUTE and MOE_COMBINE (cl_moe.cpp).
sl_status matmul_id(sl_backend*, const sl_buffer* x, uint32_t x_rows, const sl_weight* w, const sl_buffer* ids, uint32_t n, uint32_t k,
                    uint32_t n_experts, sl_buffer* out, sl_error*);
bool routes_on_device(uint32_t n_experts, uint32_t k);  // within the routing kernel's limits
sl_status moe_route(sl_backend*, const sl_buffer* logits, uint32_t n, uint32_t E, const sl_weight* factors, const sl_moe_route_params& p,
                    sl_buffer* ids, sl_buffer* weights, sl_error*);
sl_status moe_combine(sl_backend*, const sl_buffer* x, const sl_buffer* weights, uint32_t n, uint32_t k, uint32_t dim, sl_buffer* out,
                      sl_error*);
// Checks a rope's arguments and finds its table: a launch of x alone (x2 null) in `out`.
sl_status rope_prepare(sl_backend*, sl_buffer*, uint32_t, uint32_t, uint32_t, const float*, float, uint32_t, RopeLaunch&, sl_error*);
void launch_rope(sl_backend* be, const RopeLaunch& r);  // x and x2 (where set) in one launch
sl_status gated_activation(sl_backend*, const sl_glu_params*, const sl_buffer*, const sl_buffer*, sl_buffer*, uint64_t, Forms&, sl_error*);
sl_status add(sl_backend*, const sl_buffer*, const sl_buffer*, sl_buffer*, uint64_t, sl_error*);
// out = x * scale, or tanh(x * scale / softcap) * softcap (softcap > 0); out may be x.
sl_status scale(sl_backend*, const sl_buffer* x, sl_buffer* out, uint64_t n, float scale, float softcap, sl_error*);
sl_status copy(sl_backend*, const sl_buffer*, uint64_t, sl_buffer*, uint64_t, uint64_t, sl_error*);
// out[r, dst_col + c] = x[r / repeat, src_col + c] for r < out_rows, c < width; out's other columns kept.
sl_status copy_columns(sl_backend*, const sl_buffer* x, uint32_t x_cols, sl_buffer* out, uint32_t out_rows, uint32_t out_cols,
                       const sl_copy_columns_params& p, sl_error*);
sl_status gather_rows(sl_backend*, const sl_buffer*, const int32_t*, uint32_t, uint32_t, sl_buffer*, sl_error*);
sl_status scatter_add_rows(sl_backend*, const sl_buffer*, const int32_t*, const float*, uint32_t, uint32_t, sl_buffer*, sl_error*);

// The dp4a joins (cl_fusion.h says when the plan asks for them). Each launches and returns true,
// or returns false having launched nothing, when what the pattern could not see does not allow it
// (where the weights lie in device memory, the input's form not at hand); the caller then runs the
// nodes one by one.
// kGlu: the gate/up products of x and the activation of their outputs into act, with act's form.
bool glu_join(sl_backend* be, const sl_buffer* x, const sl_weight* gate_w, const sl_weight* up_w, sl_buffer* gate, sl_buffer* up,
              sl_buffer* act, uint32_t activation, Forms& forms, const NormStep* step);
// kResidual: p = x_in · Wᵀ, resid += p, and the norm of resid into h left to the next launch (*left).
bool residual_join(sl_backend* be, const sl_buffer* x_in, const sl_weight* w, sl_buffer* p, sl_buffer* resid,
                   const sl_weight* norm_weight, float weight_offset, float eps, sl_buffer* h, Forms& forms, NormStep* left);
// kEmbedNorm: the one id's row of the table into e, the norm of e into h left to the next launch.
bool embed_norm_join(sl_backend* be, const sl_weight* table, const sl_tensor& ids, sl_buffer* e, const sl_weight* norm_weight,
                     float weight_offset, float eps, sl_buffer* h, Forms& forms, NormStep* left);

sl_status kv_create(sl_backend*, const sl_kv_layout*, sl_kv_cache**, sl_error*);
void kv_destroy(sl_backend*, sl_kv_cache*);
sl_status kv_copy_page(sl_backend*, sl_kv_cache*, uint32_t, uint32_t, sl_error*);
sl_status kv_copy_state(sl_backend*, sl_kv_cache*, uint32_t, uint32_t, sl_error*);
sl_status kv_clear_state(sl_backend*, sl_kv_cache*, uint32_t, sl_error*);
// COPY with a recurrent layer's state on one side (x or out a STATE tensor; cl_kv_cache.cpp).
sl_status copy_state(sl_backend*, sl_kv_cache*, const sl_tensor* x, const sl_tensor* out, sl_error*);
// Recurrent layers (cl_recurrent.cpp, ABI 2.2): the states are the STATE tensor's rows in the cache.
constexpr uint32_t kConvMaxTaps = 64;  // CONV_MAX_K in kernels_cl/recurrent.cl
sl_status causal_conv(sl_backend*, sl_kv_cache*, const sl_buffer* x, const sl_weight* w, uint32_t activation, sl_buffer* out,
                      const sl_tensor& window, sl_error*);
sl_status gated_delta(sl_backend*, sl_kv_cache*, const sl_buffer* qkv, const sl_buffer* a, const sl_buffer* b, const sl_weight* a_log,
                      const sl_gated_delta_params&, sl_buffer* out, const sl_tensor& state, sl_error*);
// Whether the kernels run KV_WRITE and ATTENTION of this layer of the cache (cl_kv_cache.h).
bool runs_layer(const sl_kv_cache* c, uint32_t layer);
// KV_WRITE; rope: a rope pair of q and k to run first — in the write's launch where k is its second
// tensor, with the cache's head shape, on a device cache (kv_write_rope).
sl_status kv_write(sl_backend*, sl_kv_cache*, uint32_t, const sl_buffer*, const sl_buffer*, const RopeLaunch* rope, sl_error*);
// ATTENTION; join: a KV_WRITE of this layer (and its rope pair) to run first — in the attention's
// launch where the batch and the kernels allow (attention_join_applies), else as kv_write would.
sl_status attention(sl_backend*, sl_kv_cache*, uint32_t, const sl_buffer*, const AttentionParams*, sl_buffer*, const KvJoin* join,
                    Forms&, sl_error*);
bool codec_has_opencl(const sl_kvcodec_api* api, const sl_kvcodec* codec);

// The step's batch to the device (cl_backend.cpp), before a graph's launches.
sl_status begin_batch(sl_backend* be, const sl_batch* batch, sl_error* err);
sl_status run_graph(sl_backend* be, const sl_graph* g, const sl_step* step, sl_error* err);
int node_supported(const sl_backend* be, const sl_node_query* q);
// Plans (cl_graph.cpp): the graph copied and its launches planned once; each compute checks the
// nodes again only for a new batch size or cache, then runs the launches as graph_compute would.
sl_status create_plan(sl_backend* be, const sl_graph* g, sl_plan** out, sl_error* err);
sl_status compute_plan(sl_backend* be, sl_plan* plan, const sl_step* step, sl_error* err);

template <class Fn>
sl_status guarded(sl_error* err, const char* what, Fn&& fn) {
  try {
    return fn();
  } catch (const cl::Error& e) {
    return from_cl_error(err, what, e);
  } catch (const std::bad_alloc&) {
    return set_error(err, SL_ERR_OUT_OF_MEMORY, std::string(what) + ": out of host memory");
  } catch (const std::exception& e) {
    return set_error(err, SL_ERR_DEVICE, std::string(what) + ": " + e.what());
  }
}

}  // namespace sluice::ocl

// A graph prepared for replay (sluice/backend.h plan_create): the graph's own copy and the fusion
// pass's launches over it — what graph_compute works out every step, worked out once.
struct sl_plan {
  explicit sl_plan(const sl_graph& g) : graph(g) {}
  sluice::graph::GraphCopy graph;
  std::vector<sluice::ocl::Launch> launches;
  bool checked = false;             // the nodes passed check_graph for:
  uint32_t checked_tokens = 0;      //   this batch size
  const sl_kv_cache* checked_cache = nullptr;  // and this cache
};

