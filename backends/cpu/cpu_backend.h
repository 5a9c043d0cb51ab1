#pragma once
// The CPU backend's objects behind the C handles, and the kernels its graph runner (cpu_graph.cpp)
// calls for each node or fused run of nodes (cpu_fusion.h). Tensors reach the kernels as buffers
// exactly their size (views into the graph's buffers).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu_fusion.h"
#include "sluice/backend.h"
#include "util/kv_shape.h"
#include "util/plugin_error.h"  // set_error
#include "thread_pool.h"

struct sl_buffer {
  std::byte* data = nullptr;
  uint64_t bytes = 0;
  bool owned = false;  // false: wraps host memory the caller keeps alive
};

// Per layer (sluice::KvLayerShape): a FULL layer's n_pages pages or a WINDOW layer's n_window_pages,
// each page the K rows of every head ([head][slot]) then the V rows, in the layer's codecs; a STATE
// layer's n_state_slots states. Layers lie one after the other, so a uniform model's layer l starts
// at l * n_pages * page_bytes, as it always did.
struct sl_kv_cache {
  sl_kv_layout layout{};  // layers NULL: see `layers`
  std::vector<sluice::KvLayerShape> layers;
  std::vector<uint64_t> offset;         // per layer: its pages' first byte in storage
  std::vector<uint64_t> recent_offset;  // per layer: its recent rows' first half in recent
  std::vector<uint64_t> state_offset;   // per layer: its states' first byte in state
  std::vector<std::byte> storage;
  // The recent window's exact rows, f16: per layer, n_recent_pages × ([K: head][slot][k_dim], [V: head][slot][v_dim]).
  std::vector<uint16_t> recent;
  std::vector<std::byte> state;  // per STATE layer, n_state_slots × state_bytes
  bool has_state = false;
};

struct sl_backend {
  std::unique_ptr<sluice::cpu::ThreadPool> pool;
  unsigned n_threads = 1;
  // The option activations=int8: decode products take int8 activations (quant_int8.cpp).
  bool int8_activations = false;
  // The option prefetch=BYTES: how far ahead the decode products ask for their weights (QuantView).
  std::size_t prefetch_bytes = 2048;
  // The option kernels=avx2|avx512: whether the AVX-512 VNNI kernels run (the default where built).
  bool wide_kernels = false;
  // The current step's batch (copied at graph_compute).
  std::vector<int32_t> positions;
  std::vector<int32_t> seq_slots;
  std::vector<int32_t> page_table;
  std::vector<int32_t> recent_table;  // empty: the batch has no recent pages
  std::vector<int32_t> window_table;  // empty: the batch has no window pages
  std::vector<int32_t> state_slots;   // empty: the batch has no state slots
  uint32_t n_seqs = 0;
  uint32_t max_pages = 0;
  uint64_t downloads_begun = 0;  // download_begin's tickets so far
  // Scratch reused across calls (weights converted to float32 block by block for prefill GEMMs).
  std::vector<std::vector<float>> scratch;  // one per thread
};

namespace sluice::cpu {

inline float* f32(sl_buffer* b) { return reinterpret_cast<float*>(b->data); }
inline const float* f32(const sl_buffer* b) { return reinterpret_cast<const float*>(b->data); }
inline const std::byte* weight_data(const sl_weight* w) { return w->data->data + w->offset; }


// Does [offset, offset + count) lie within size? Written so that no sum can wrap around.
inline bool fits(uint64_t size, uint64_t offset, uint64_t count) { return offset <= size && count <= size - offset; }

// Output rows per chunk of the decode matvecs (float and quantized weights) on the pool.
constexpr std::size_t kMatvecGrain = 64;

// Row r of a weight as float32 into dst (cols values).
void weight_row_to_f32(const sl_weight* w, uint32_t r, float* dst);
bool weight_dtype_supported(const sl_weight* w);

sl_status embed(sl_backend*, const sl_weight*, const int32_t*, uint32_t, sl_buffer*, sl_error*);
sl_status rms_norm(sl_backend*, const sl_buffer*, const sl_weight*, float, sl_buffer*, uint32_t, uint32_t, float, sl_error*);
sl_status matmul(sl_backend*, const sl_buffer*, uint32_t, const sl_weight*, const sl_weight*, sl_buffer*, sl_error*);
sl_status rope(sl_backend*, sl_buffer*, uint32_t, uint32_t, uint32_t, const float*, float, uint32_t, sl_error*);
sl_status gated_activation(sl_backend*, const sl_glu_params*, const sl_buffer*, const sl_buffer*, sl_buffer*, uint64_t, sl_error*);
sl_status add(sl_backend*, const sl_buffer*, const sl_buffer*, sl_buffer*, uint64_t, sl_error*);
// out = x * scale, or tanh(x * scale / softcap) * softcap (softcap > 0); out may be x.
sl_status scale(sl_backend*, const sl_buffer* x, sl_buffer* out, uint64_t n, float scale, float softcap, sl_error*);
sl_status copy(sl_backend*, const sl_buffer*, uint64_t, sl_buffer*, uint64_t, uint64_t, sl_error*);
// out[r, dst_col + c] = x[r / repeat, src_col + c] for r < out_rows, c < width (x of x_cols columns,
// out of out_cols); out's other columns kept.
sl_status copy_columns(sl_backend*, const sl_buffer* x, uint32_t x_cols, sl_buffer* out, uint32_t out_rows, uint32_t out_cols,
                       const sl_copy_columns_params& p, sl_error*);
// HEAD_MATMUL (2.4, cpu_head_matmul.cpp): per head, x's head times its slice of w's rows.
sl_status head_matmul(sl_backend*, const sl_buffer* x, uint32_t n_tokens, const sl_weight* w, const sl_head_matmul_params& p,
                      sl_buffer* out, sl_error*);

// One product of a few activation rows (decode) for matvec_products: x (n_rows × w->cols) times w.
struct FewRowsProduct {
  const float* x;
  uint32_t n_rows;
  const sl_weight* w;
  float* out;  // n_rows × w->rows
};
// Whether the CPU's products take the weight's form (as matmul checks it); an error names `op`.
sl_status check_weight_form(const char* op, const sl_weight* w, sl_error* err);
// Whether n_rows activation rows take the few-rows kernels, which stream each weight row once (cpu_matmul.cpp).
bool few_rows(uint32_t n_rows);
// Few-rows products in one parallel region, each output what matmul gives, bit for bit: every weight's
// rows split into the chunks its own matmul would use, all chunks handed out together (one fork and
// join for all). May throw std::bad_alloc.
void matvec_products(sl_backend* be, const FewRowsProduct* products, std::size_t count);

// Fused forms the fusion pass chooses (cpu_matmul.cpp, cpu_ops.cpp).
sl_status matmul_multi(sl_backend*, const sl_buffer*, uint32_t, uint32_t, const sl_weight* const*, const sl_weight* const*,
                       sl_buffer* const*, sl_error*);
sl_status add_rms_norm(sl_backend*, sl_buffer*, const sl_buffer*, const sl_weight*, float, sl_buffer*, uint32_t, uint32_t, float,
                       sl_error*);

// Embedding with ids on the device, and the argmax of rows (cpu_ops.cpp).
sl_status argmax(sl_backend*, const sl_buffer*, uint32_t, uint32_t, sl_buffer*, uint64_t, sl_error*);
sl_status embed_device(sl_backend*, const sl_weight*, const sl_buffer*, uint64_t, uint32_t, sl_buffer*, sl_error*);

sl_status gather_rows(sl_backend*, const sl_buffer*, const int32_t*, uint32_t, uint32_t, sl_buffer*, sl_error*);
sl_status scatter_add_rows(sl_backend*, const sl_buffer*, const int32_t*, const float*, uint32_t, uint32_t, sl_buffer*, sl_error*);
// 2.5: MOE_ROUTE, MATMUL_ID (x of n or n * k rows) and MOE_COMBINE (cpu_moe_ops.cpp).
sl_status moe_route(sl_backend*, const sl_buffer* logits, uint32_t n, uint32_t E, const sl_weight* factors, const sl_moe_route_params& p,
                    sl_buffer* ids, sl_buffer* weights, sl_error*);
sl_status matmul_id(sl_backend*, const sl_buffer* x, uint32_t x_rows, const sl_weight* w, const sl_buffer* ids, uint32_t n, uint32_t k,
                    uint32_t n_experts, sl_buffer* out, sl_error*);
sl_status moe_combine(sl_backend*, const sl_buffer* x, const sl_buffer* weights, uint32_t n, uint32_t k, uint32_t dim, sl_buffer* out,
                      sl_error*);

sl_status kv_create(sl_backend*, const sl_kv_layout*, sl_kv_cache**, sl_error*);
void kv_destroy(sl_backend*, sl_kv_cache*);
sl_status kv_copy_page(sl_backend*, sl_kv_cache*, uint32_t, uint32_t, sl_error*);
sl_status kv_copy_state(sl_backend*, sl_kv_cache*, uint32_t, uint32_t, sl_error*);
sl_status kv_clear_state(sl_backend*, sl_kv_cache*, uint32_t, sl_error*);
// A sequence's state in a STATE layer (the batch's slot of sequence seq), checked; null and err set otherwise.
std::byte* state_of(sl_backend*, sl_kv_cache*, uint32_t layer, uint32_t seq, sl_error*);
sl_status kv_write(sl_backend*, sl_kv_cache*, uint32_t, const sl_buffer*, const sl_buffer*, sl_error*);
sl_status attention(sl_backend*, sl_kv_cache*, uint32_t, const sl_buffer*, const sl_attention_params*, const float* sinks, sl_buffer*,
                    sl_error*);

// Recurrent layers (cpu_recurrent.cpp, ABI 2.2): the states are the STATE tensor's rows in the cache.
sl_status causal_conv(sl_backend*, sl_kv_cache*, const sl_buffer* x, const sl_weight* w, uint32_t activation, sl_buffer* out,
                      const sl_tensor& window, sl_error*);
sl_status gated_delta(sl_backend*, sl_kv_cache*, const sl_buffer* qkv, const sl_buffer* a, const sl_buffer* b, const sl_weight* a_log,
                      const sl_gated_delta_params&, sl_buffer* out, const sl_tensor& state, sl_error*);

// The graph entry points (cpu_graph.cpp).
int supports_node(const sl_backend*, const sl_node_query*);
sl_status graph_compute(sl_backend*, const sl_graph*, const sl_step*, sl_error*);

}  // namespace sluice::cpu
