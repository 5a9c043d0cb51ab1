#pragma once
// The OpenCL backend's objects behind the C handles, and what its files share.
// Every entry point catches what it throws (cl::Error, std::exception) and returns a status.
#define CL_HPP_ENABLE_EXCEPTIONS
#define CL_HPP_TARGET_OPENCL_VERSION 300
#define CL_HPP_MINIMUM_OPENCL_VERSION 200
#include <CL/opencl.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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
  sl_kv_format k_format{};
  sl_kv_format v_format{};
  uint64_t page_bytes = 0;  // one page of a layer of the layout's geometry: K rows of every head, then V rows
  // Per layer (sl_kv_layout.layers): the kernels run the layers of the layout's own geometry
  // (uniform_with); the others are allocated in their widths, and their KV_WRITE and ATTENTION nodes
  // declined (cl_graph.cpp). A STATE layer's states live in state_layers (always on the device).
  std::vector<sluice::KvLayerShape> layers;
  sluice::KvLayerShape uniform;  // a FULL layer of the layout's geometry: what check_pages checks against
  std::vector<cl::Buffer> state_layers;  // per layer: n_state_slots × state_bytes (a placeholder for others)
  bool on_device = false;   // both codecs give OpenCL source that builds with our kernels
  std::string fallback_reason;  // why the host keeps this cache, when it does
  std::vector<cl::Buffer> device_layers;              // on_device: one buffer per layer
  std::vector<std::vector<std::byte>> host_layers;    // otherwise: the host keeps the KV (codec encode/decode)
  // The recent window's exact rows (f16 bits): per layer n_recent_pages × [K, V][head][slot][head_dim].
  std::vector<cl::Buffer> recent_layers;              // on_device
  std::vector<std::vector<uint16_t>> host_recent;     // host path
  bool k_fused = false, v_fused = false;  // the codec's source has the fused device functions
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
  };
  std::map<uint32_t, Kernels> kernels;
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

// A rope op not yet launched: its tensor and parameters (the positions are the batch's) — and,
// once the next rope joined it (q, then k), the second tensor x2 with its n_heads2 heads, waiting
// for the kv_write of x2 (cl_kv_cache.cpp) to run the pair inside its launch.
struct PendingRope {
  sl_buffer* x = nullptr;
  uint32_t n_heads = 0, head_dim = 0, half = 0;
  uint32_t style = 0;
  cl::Buffer table;  // its (cos, sin) · factor table (sl_backend::RopeTable), covering the batch's positions
  sl_buffer* x2 = nullptr;  // null: x alone
  uint32_t n_heads2 = 0;
};

// A decode kv_write not yet launched (cl_kv_cache.cpp), with the rope pair it took (rope.x null:
// none), waiting for the attention of the same cache and layer to run it in its launch.
struct PendingKvWrite {
  sl_kv_cache* cache = nullptr;  // null: none
  uint32_t layer = 0;
  const sl_buffer *k = nullptr, *v = nullptr;
  PendingRope rope;
};

// A one-row gate/up product (two 4-bit weights of the same shape, no biases) not yet launched, with
// its weights' device ranges as resolved when it was deferred.
struct PendingGlu {
  const sl_buffer* x = nullptr;
  uint32_t slot = 0;  // the pair holding x's form (sl_backend::x15_slot); the joined launch writes the other
  sl_weight ws[2]{};
  sl_buffer* outs[2]{};
  DevPtr data[2], scales[2], biases[2];
};

// A one-row 4-bit product (the o projection, down) not yet launched: it waits for an add_rms_norm of
// its output, with which it runs as one launch (matvec_q4_dp4a_res; cl_matmul.cpp, res_join). Its
// input's 15-bit form and its weight's device ranges as they were when it was deferred.
struct PendingProduct {
  const sl_buffer* x = nullptr;
  sl_weight w{};
  DevPtr data, scales, biases;
  sl_buffer* out = nullptr;
  cl::Buffer xq, blocks;
  uint32_t slot = 0;  // the form's pair (sl_backend::x15_slot); the joined launch writes the other
};

// The norm of a joined add_rms_norm: x already holds x + delta, and out = rms_norm(x) is not computed
// yet — the next product reads its form (the other pair's) with the blocks' Σ x² in norm_parts and
// writes out in passing; anything else first launches it as a plain rms_norm (cl_matmul.cpp).
struct PendingNorm {
  sl_buffer* x = nullptr;
  sl_weight weight{};
  float weight_offset = 0.0f, eps = 0.0f;
  sl_buffer* out = nullptr;  // null: none
  uint32_t dim = 0;
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
  std::string options;       // sl_backend_config.options
  // Programs by name ("ops", "matvec", ...).
  std::map<std::string, cl::Program> programs;
  std::map<std::string, cl::Kernel> kernels;
  // The current batch, on the host and on the device.
  std::vector<int32_t> positions, seq_slots, page_table;
  std::vector<int32_t> state_slots;   // the batch's state slots (2.0), on the host: state copies read them
  std::vector<int32_t> recent_table;  // empty: the batch has no recent pages
  uint32_t n_seqs = 0, max_pages = 0;
  cl::Buffer d_positions, d_seq_slots, d_page_table, d_recent_table;
  std::vector<int32_t> ids;  // embed's token ids, as copied to d_ids
  // Pinned host memory for downloads (cl_backend.cpp, pinned_staging), mapped while it lives.
  cl::Buffer pinned;
  void* pinned_map = nullptr;
  uint64_t pinned_bytes = 0;
  std::vector<cl::Event> batch_uploads, ids_uploads;  // copies of the vectors above not yet known done
  size_t d_positions_cap = 0, d_slots_cap = 0, d_table_cap = 0, d_recent_cap = 0;
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
  sluice::ocl::Scratch moe_rows, moe_weights;
  sluice::ocl::Scratch argmax_values, argmax_indices;  // argmax's per-part maxima (cl_ops.cpp)
  sluice::ocl::Scratch argmax_done;  // NVIDIA's one-launch argmax: parts finished per row, zero between launches  // gather_rows/scatter_add_rows: the host's indices and weights
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
  struct PendingDownload {
    cl::Event done;
    int stage_slot = -1;
    void* dst = nullptr;
    uint64_t bytes = 0;
  };
  std::map<uint64_t, PendingDownload> downloads;
  uint64_t downloads_begun = 0;
  cl::Buffer small_pinned;             // kSmallStageSlots × kSmallStageBytes, mapped at small_pinned_map
  unsigned char* small_pinned_map = nullptr;
  std::vector<int> small_stage_free;   // free slots of small_pinned
  uint64_t launches_unflushed = 0;  // SLUICE_OPENCL_FLUSH_EVERY (cl_backend.cpp, launch)
  bool clblast_ok = true;    // false after CLBlast failed once on this device: our GEMM kernel instead
  // Quantized prefill GEMM on tensor cores (kernels_cl/gemm_mma.cl): 0 not tried yet, 1 built, -1 off
  // (not an sm_80+ NVIDIA device with PTX on, SLUICE_OPENCL_MMA=0, or its program failed to build).
  int mma_state = 0;
  // Prefill attention on tensor cores (kernels_cl/attention_mma.cl), per head_dim: 1 built, -1 its
  // program failed to build (the portable kernels serve). The f16 keys and values it reads (kv_gather_f16).
  std::map<uint32_t, int> att_mma_state;
  sluice::ocl::Scratch att_k16, att_v16, att_mma_partial;
  // The decode activation as 15-bit integers for the dp4a matvec (kernels_cl/warp.cl): its bytes, a
  // float2 per 32 columns, and the buffer (and its columns) they were made from — nullptr when they
  // stand for nothing. The ops that produce a product's input (rms_norm, add_rms_norm,
  // gated_activation) write them beside their output in decode on NVIDIA; every other entry point of
  // the table forgets them (cl_backend.cpp), so only a product issued right after its producer — or
  // after products of the same input — reads them.
  sluice::ocl::Scratch matvec_x8, matvec_x8_blocks;
  // A second pair, written by the joined gate/up/activation launch while it reads the first; x15_slot
  // says which pair holds x15_of's form (0 the first).
  sluice::ocl::Scratch matvec_x8_alt, matvec_x8_alt_blocks;
  const sl_buffer* x15_of = nullptr;
  uint32_t x15_cols = 0, x15_slot = 0;
  // Work an op deferred to join it with the next (flush_deferred runs it as it was asked):
  // a rope waiting for the second rope, or the pair of them for the kv_write of the second
  // (cl_ops.cpp, cl_kv_cache.cpp; x null: none), and a gate/up matmul_multi
  // waiting for the gated_activation of its outputs (cl_matmul.cpp; x null: none).
  sluice::ocl::PendingRope pending_rope;
  // A decode step's embedding not yet launched (NVIDIA dp4a): the rms_norm of its row right after
  // runs with it (embed_norm_blocks, cl_ops.cpp: embed_join), the norm left to the product that
  // reads it; any other entry point launches the embedding alone first.
  struct PendingEmbed {
    sl_buffer* out = nullptr;  // null: none
    sl_weight table{};
    cl::Buffer ids;
    uint64_t ids_off = 0;
  } pending_embed;
  sluice::ocl::PendingGlu pending_glu;
  sluice::ocl::PendingKvWrite pending_kv;  // a decode kv_write waiting for its attention (cl_kv_cache.cpp)
  // A product waiting for the add_rms_norm of its output, and the norm that joined it, waiting for
  // the product that reads it (cl_matmul.cpp; null x / out: none). norm_parts: its blocks' Σ x².
  sluice::ocl::PendingProduct pending_product;
  sluice::ocl::PendingNorm pending_norm;
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

// A measuring knob (perf/NOTES.md): the integer in environment variable `name` when `ok` accepts
// it, else 0. Callers read it once per process into a static.
long env_knob(const char* name, bool (*ok)(long));

// NVIDIA's cap on registers a work-item (-cl-nv-maxrregcount) from environment variable `knob`
// (16..255), else "": a measuring knob for occupancy (SLUICE_OPENCL_MAXRREG for the matvec programs,
// SLUICE_OPENCL_MAXRREG_ATT for the attention programs).
std::string nv_register_cap(const sl_backend* be, const char* knob);

// The 4-bit decode matvec's shape for a product of rows × cols (kernels_cl/matvec.cl): work-items a
// team (Q4_TEAM: 32, 64 or 128) and rows a team (R4: 1, 2, 4 or 8). SLUICE_OPENCL_Q4_TEAM and
// SLUICE_OPENCL_Q4_ROWS force one for every product (measuring).
struct Q4Shape {
  uint32_t team, rows;
};
Q4Shape q4_shape(const sl_backend* be, uint32_t rows, uint32_t cols);
// The program holding the 4-bit decode kernels of a shape: "matvec" (32 × 4, with the other matvec
// kernels), else "matvec_t64_r2" and the like.
std::string q4_program(Q4Shape s);

// The dp4a decode matvec (kernels_cl/matvec.cl): NVIDIA with PTX and dp4a, unless SLUICE_OPENCL_DP4A=0.
bool use_dp4a(const sl_backend* be);
// For an op producing n_rows × cols values that a product may read next: whether to write their 15-bit
// form too (decode, one row of whole 32-column blocks, dp4a on), and where (grown to fit).
bool int15_scratch(sl_backend* be, uint32_t n_rows, uint64_t cols, cl::Buffer*& xq, cl::Buffer*& blocks);
std::pair<cl::Buffer&, cl::Buffer&> form_pair(sl_backend* be, uint32_t slot, uint64_t cols);  // a slot's form buffers (cl_matmul.cpp)
// The norm step's last arguments, shared by the kernels that run it (matvec_q4_dp4a_res,
// embed_norm_blocks): the norm weight, its dtype and offset, slot `slot`'s form and the blocks' Σ x²
// (norm_parts), from argument a on (cl_matmul.cpp).
void set_norm_step_args(sl_backend* be, cl::Kernel& k, cl_uint a, const sl_weight* weight, float weight_offset,
                        uint32_t slot, uint32_t dim);
// Records that the form now holds `out`'s cols values (after the producing launch was enqueued), in
// the first pair of buffers (slot 0) or the second.
inline void int15_made(sl_backend* be, const sl_buffer* out, uint32_t cols, uint32_t slot = 0) {
  be->x15_of = out;
  be->x15_cols = cols;
  be->x15_slot = slot;
}

// The gate/up/activation join (cl_matmul.cpp). glu_defer: whether matmul_multi's products were
// recorded in sl_backend::pending_glu instead of launched (one row, two 4-bit weights of one shape,
// rows whole 32-row blocks, no biases, dp4a with x's form at hand). glu_join: launches the pending
// products with the activation of their outputs into act (and act's form), when `gate`, `up` and n
// are its outputs and rows; false leaves the pending products to flush_deferred. glu_flush: launches
// them as matmul_multi would have.
bool glu_defer(sl_backend* be, const sl_buffer* x, uint32_t n_rows, uint32_t count, const sl_weight* const* ws,
               const sl_weight* const* biases, sl_buffer* const* outs);
bool glu_join(sl_backend* be, uint32_t activation, const sl_buffer* gate, const sl_buffer* up, sl_buffer* act, uint64_t n);
void glu_flush(sl_backend* be);

// The residual join (cl_matmul.cpp): a one-row product, the add_rms_norm of its output and the
// product that reads the norm, in two launches instead of three. product_defer: whether matmul's
// product was recorded in pending_product instead of launched (NVIDIA dp4a, 4-bit, no bias, whole
// 32-row blocks, x's form at hand). res_join: launches the pending product with add_rms_norm(x,
// delta, weight) when delta is its output — x updated, out left pending (pending_norm) — or false,
// nothing changed. product_flush / norm_flush: launch what waits as it was asked.
bool product_defer(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const sl_weight* bias,
                   sl_buffer* out);
bool res_join(sl_backend* be, sl_buffer* x, const sl_buffer* delta, const sl_weight* weight, float weight_offset,
              sl_buffer* out, uint32_t dim, float eps);
void product_flush(sl_backend* be);
void norm_flush(sl_backend* be);
// An unquantized vector weight (norm weight, bias) with at least n values: its device range (cl_ops.cpp).
DevPtr vector_weight(sl_backend* be, const sl_weight* w, uint64_t n);
// rms_norm / add_rms_norm as asked (cl_ops.cpp), after their arguments were checked.
void rms_norm_run(sl_backend* be, sl_buffer* x, const sl_buffer* delta, const sl_weight* weight, float weight_offset,
                  sl_buffer* out, uint32_t n_rows, uint32_t dim, float eps);

// Launches work an op deferred to join it with the next (a waiting rope or pair of ropes, a gate/up
// pair, a product, a norm). Every entry point runs it first (cl_backend.cpp) but the ops that may
// join it, which run it themselves when they do not; a product reading `reader` leaves the pending
// norm of that buffer to take it in its own launch.
void flush_deferred(sl_backend* be, const sl_buffer* reader = nullptr);
// The rope pair kv_write(k, v) may run in its own launch (cl_ops.cpp): true and the pending pair in
// `out`, no longer pending (the caller must launch it), when k is the pair's second tensor with
// n_kv_heads heads of head_dim and v neither of its tensors; false otherwise, nothing changed.
bool take_rope_pair(sl_backend* be, const sl_buffer* k, const sl_buffer* v, uint32_t n_kv_heads, uint32_t head_dim,
                    PendingRope& out);
// Launches a kv_write deferred for the attention after it (cl_kv_cache.cpp), as kv_write would have.
void kv_write_flush(sl_backend* be);

// Ops.
sl_status embed(sl_backend*, const sl_weight*, const int32_t*, uint32_t, sl_buffer*, sl_error*);
// ABI 1.4: greedy decoding a token ahead (cl_ops.cpp; download_begin/download_wait in cl_backend.cpp).
sl_status embed_device(sl_backend*, const sl_weight*, const sl_buffer*, uint64_t, uint32_t, sl_buffer*, sl_error*);
sl_status argmax(sl_backend*, const sl_buffer*, uint32_t, uint32_t, sl_buffer*, uint64_t, sl_error*);
sl_status rms_norm(sl_backend*, const sl_buffer*, const sl_weight*, float, sl_buffer*, uint32_t, uint32_t, float, sl_error*);
sl_status add_rms_norm(sl_backend*, sl_buffer*, const sl_buffer*, const sl_weight*, float, sl_buffer*, uint32_t, uint32_t, float,
                       sl_error*);
sl_status matmul(sl_backend*, const sl_buffer*, uint32_t, const sl_weight*, const sl_weight*, sl_buffer*, sl_error*);
sl_status matmul_multi(sl_backend*, const sl_buffer*, uint32_t, uint32_t, const sl_weight* const*, const sl_weight* const*,
                       sl_buffer* const*, sl_error*);
sl_status rope(sl_backend*, sl_buffer*, uint32_t, uint32_t, uint32_t, const float*, float, uint32_t, sl_error*);
sl_status gated_activation(sl_backend*, uint32_t, const sl_buffer*, const sl_buffer*, sl_buffer*, uint64_t, sl_error*);
sl_status add(sl_backend*, const sl_buffer*, const sl_buffer*, sl_buffer*, uint64_t, sl_error*);
sl_status copy(sl_backend*, const sl_buffer*, uint64_t, sl_buffer*, uint64_t, uint64_t, sl_error*);
sl_status gather_rows(sl_backend*, const sl_buffer*, const int32_t*, uint32_t, uint32_t, sl_buffer*, sl_error*);
sl_status scatter_add_rows(sl_backend*, const sl_buffer*, const int32_t*, const float*, uint32_t, uint32_t, sl_buffer*, sl_error*);

sl_status kv_create(sl_backend*, const sl_kv_layout*, sl_kv_cache**, sl_error*);
void kv_destroy(sl_backend*, sl_kv_cache*);
sl_status kv_copy_page(sl_backend*, sl_kv_cache*, uint32_t, uint32_t, sl_error*);
sl_status kv_copy_state(sl_backend*, sl_kv_cache*, uint32_t, uint32_t, sl_error*);
sl_status kv_clear_state(sl_backend*, sl_kv_cache*, uint32_t, sl_error*);
sl_status copy_state(sl_backend*, sl_kv_cache*, const sl_tensor* x, const sl_tensor* out, sl_error*);
// Whether the kernels run KV_WRITE and ATTENTION of this layer of the cache (cl_kv_cache.h).
bool runs_layer(const sl_kv_cache* c, uint32_t layer);
sl_status kv_write(sl_backend*, sl_kv_cache*, uint32_t, const sl_buffer*, const sl_buffer*, sl_error*);
sl_status attention(sl_backend*, sl_kv_cache*, uint32_t, const sl_buffer*, const AttentionParams*, sl_buffer*, sl_error*);
bool codec_has_opencl(const sl_kvcodec_api* api, const sl_kvcodec* codec);

// The entry points graph_compute runs a graph's launches through (cl_graph.cpp), each wrapped as
// cl_backend.cpp says: flushing work an earlier op deferred, or joining it.
struct OpEntries {
  sl_status (*begin_batch)(sl_backend*, const sl_batch*, sl_error*);
  sl_status (*embed)(sl_backend*, const sl_weight*, const int32_t*, uint32_t, sl_buffer*, sl_error*);
  sl_status (*embed_device)(sl_backend*, const sl_weight*, const sl_buffer*, uint64_t, uint32_t, sl_buffer*, sl_error*);
  sl_status (*rms_norm)(sl_backend*, const sl_buffer*, const sl_weight*, float, sl_buffer*, uint32_t, uint32_t, float, sl_error*);
  sl_status (*add_rms_norm)(sl_backend*, sl_buffer*, const sl_buffer*, const sl_weight*, float, sl_buffer*, uint32_t, uint32_t, float,
                            sl_error*);
  sl_status (*matmul)(sl_backend*, const sl_buffer*, uint32_t, const sl_weight*, const sl_weight*, sl_buffer*, sl_error*);
  sl_status (*matmul_multi)(sl_backend*, const sl_buffer*, uint32_t, uint32_t, const sl_weight* const*, const sl_weight* const*,
                            sl_buffer* const*, sl_error*);
  sl_status (*rope)(sl_backend*, sl_buffer*, uint32_t, uint32_t, uint32_t, const float*, float, uint32_t, sl_error*);
  sl_status (*kv_write)(sl_backend*, sl_kv_cache*, uint32_t, const sl_buffer*, const sl_buffer*, sl_error*);
  sl_status (*attention)(sl_backend*, sl_kv_cache*, uint32_t, const sl_buffer*, const AttentionParams*, sl_buffer*, sl_error*);
  sl_status (*gated_activation)(sl_backend*, uint32_t, const sl_buffer*, const sl_buffer*, sl_buffer*, uint64_t, sl_error*);
  sl_status (*add)(sl_backend*, const sl_buffer*, const sl_buffer*, sl_buffer*, uint64_t, sl_error*);
  sl_status (*copy)(sl_backend*, const sl_buffer*, uint64_t, sl_buffer*, uint64_t, uint64_t, sl_error*);
  sl_status (*gather_rows)(sl_backend*, const sl_buffer*, const int32_t*, uint32_t, uint32_t, sl_buffer*, sl_error*);
  sl_status (*scatter_add_rows)(sl_backend*, const sl_buffer*, const int32_t*, const float*, uint32_t, uint32_t, sl_buffer*, sl_error*);
  sl_status (*argmax)(sl_backend*, const sl_buffer*, uint32_t, uint32_t, sl_buffer*, uint64_t, sl_error*);
  // COPY with a recurrent layer's state on one side (x or out a STATE tensor; cl_kv_cache.cpp).
  sl_status (*copy_state)(sl_backend*, sl_kv_cache*, const sl_tensor*, const sl_tensor*, sl_error*);
};
sl_status run_graph(sl_backend* be, const sl_graph* g, const sl_step* step, const OpEntries& ops, sl_error* err);
int node_supported(const sl_backend* be, const sl_node_query* q);

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
