/* Backend ABI: a compute device. The host owns the model description and the schedule; a backend
 * owns device memory and runs ops on it.
 *
 * Ops work on batches of tokens that may belong to several sequences (continuous batching): the host
 * calls begin_batch with each token's sequence slot and position and each sequence's page table, then
 * issues the layer ops; attention reads each token's own sequence from the paged KV cache.
 * Activations are float32 buffers laid out [n_rows, dim] contiguously. Weights are matrices
 * [rows = out features, cols = in features] in f32/f16/bf16, or affine-quantized (bits > 0).
 *
 * Ops may run asynchronously; download and synchronize wait for completion. A backend answers
 * supports_op so the host can send what it cannot do to the CPU backend.
 */
#ifndef SLUICE_BACKEND_H
#define SLUICE_BACKEND_H

#include "sluice/kvcodec.h"
#include "sluice/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_backend sl_backend;   /* an opened device, owned by the plugin */
typedef struct sl_buffer sl_buffer;     /* device memory, owned by the backend */
typedef struct sl_kv_cache sl_kv_cache; /* paged KV storage of every layer, owned by the backend */

typedef enum sl_dtype {
  SL_DTYPE_F32 = 0,
  SL_DTYPE_F16 = 1,
  SL_DTYPE_BF16 = 2,
  SL_DTYPE_I32 = 3,
  SL_DTYPE_U32 = 4 /* packed quantized words */
} sl_dtype;

enum sl_device_caps {
  SL_CAP_F16 = 1u << 0,       /* native half arithmetic */
  SL_CAP_INT8_DOT = 1u << 1,  /* packed int8 dot products */
  SL_CAP_MATRIX = 1u << 2,    /* matrix units (tensor cores) */
  SL_CAP_UNIFIED = 1u << 3,   /* shares memory with the host */
  SL_CAP_QUEUED = 1u << 4     /* ops return before the device has run them (a queue): the host gains
                                 by issuing the next pass while the device runs this one (ABI 1.4) */
};

typedef struct sl_device_info {
  uint32_t struct_size;
  char name[128];
  char vendor[64];
  char driver[64];
  char kind[16];          /* "cpu", "gpu", "accelerator" */
  uint64_t total_memory;  /* bytes */
  uint64_t free_memory;   /* bytes, 0 if unknown */
  uint64_t max_alloc;     /* largest single buffer */
  uint32_t compute_units;
  uint32_t caps;          /* sl_device_caps */
} sl_device_info;

typedef struct sl_backend_config {
  uint32_t struct_size;
  const char* device;   /* "" = the plugin's best device; otherwise plugin-specific, e.g. "0:1" */
  uint32_t n_threads;   /* host threads the backend may use; 0 = its choice */
  const char* options;  /* plugin-specific, "" if none */
} sl_backend_config;

/* A weight matrix [rows, cols] row-major, stored in a buffer. A vector (norm weight, bias) has rows 1.
 * Affine quantization (bits > 0): `data` holds uint32 words, each packing 32/bits values along cols,
 * low bits first; value = scale * q + bias per group of group_size consecutive cols. */
typedef struct sl_weight {
  uint32_t struct_size;
  sl_buffer* data;
  uint64_t offset;       /* bytes */
  uint32_t dtype;        /* sl_dtype of the values (unquantized) or SL_DTYPE_U32 (quantized) */
  uint32_t rows;
  uint32_t cols;
  uint32_t bits;         /* 0 = not quantized */
  uint32_t group_size;
  uint32_t scale_dtype;  /* sl_dtype of scales and biases */
  sl_buffer* scales;
  uint64_t scales_offset;
  sl_buffer* biases;
  uint64_t biases_offset;
} sl_weight;

/* The tokens of one forward pass. Host pointers; the backend copies what it needs in begin_batch. */
typedef struct sl_batch {
  uint32_t struct_size;
  uint32_t n_tokens;
  const int32_t* positions;  /* [n_tokens] position of each token in its sequence */
  const int32_t* seq_slots;  /* [n_tokens] which of the batch's sequences it belongs to */
  uint32_t n_seqs;
  uint32_t max_pages;        /* columns of page_table */
  const int32_t* page_table; /* [n_seqs][max_pages]: KV page of each run of page_tokens positions */
  /* --- added in ABI 1.2 (absent when struct_size is smaller: no recent window) ---------------- */
  /* [n_seqs][max_pages]: the recent page holding exact (f16) K/V rows for each page of positions,
   * or -1. Attention reads key j of a query at position p exactly when j > p - recent_window and
   * recent_table has a page for j; kv_write stores the exact rows wherever it has one. NULL = none. */
  const int32_t* recent_table;
} sl_batch;

/* Shape of the paged KV cache: n_pages pages, each holding page_tokens positions of every layer. */
typedef struct sl_kv_layout {
  uint32_t struct_size;
  uint32_t n_layers;
  uint32_t n_kv_heads;
  uint32_t head_dim;
  uint32_t page_tokens;
  uint32_t n_pages;
  const sl_kvcodec_api* k_api;
  const sl_kvcodec* k_codec;
  const sl_kvcodec_api* v_api;
  const sl_kvcodec* v_codec;
  /* --- added in ABI 1.2 (0 when struct_size is smaller) ---------------------------------------- */
  /* The recent window: the newest recent_window keys before each query are attended exactly, from
   * f16 copies kept in n_recent_pages recent pages (page_tokens positions of every layer and KV
   * head, K then V) beside the compressed pages. The host assigns them (sl_batch.recent_table);
   * only a backend that answers supports_op(SL_OP_KV_RECENT_WINDOW) gets a non-zero window. */
  uint32_t recent_window;
  uint32_t n_recent_pages;
} sl_kv_layout;

typedef struct sl_attention_params {
  uint32_t struct_size;
  uint32_t n_heads;
  uint32_t n_kv_heads;
  uint32_t head_dim;
  float scale;            /* usually 1/sqrt(head_dim) */
  uint32_t window;        /* sliding window in tokens; 0 = full causal */
  float softcap;          /* tanh soft-capping of scores; 0 = none */
  sl_buffer* sinks;       /* optional per-head sink logits (f32 [n_heads]); NULL = none */
} sl_attention_params;

typedef enum sl_rope_style {
  SL_ROPE_NEOX = 0,        /* rotate the two halves of the rotary dims (HF rotate_half) */
  SL_ROPE_INTERLEAVED = 1  /* rotate adjacent pairs */
} sl_rope_style;

typedef enum sl_activation {
  SL_ACT_SILU = 0,
  SL_ACT_GELU_TANH = 1,
  SL_ACT_GELU = 2
} sl_activation;

typedef enum sl_op {
  SL_OP_EMBED = 0,
  SL_OP_RMS_NORM,
  SL_OP_LAYER_NORM,
  SL_OP_MATMUL,
  SL_OP_ROPE,
  SL_OP_KV_WRITE,
  SL_OP_ATTENTION,
  SL_OP_GATED_ACTIVATION,
  SL_OP_ADD,
  SL_OP_MUL,
  SL_OP_SCALE,
  SL_OP_COPY,
  SL_OP_SOFTMAX,
  SL_OP_TOPK,
  SL_OP_KV_RECENT_WINDOW, /* ABI 1.2: the KV cache keeps a recent window exact (sl_kv_layout) */
  SL_OP_COUNT
} sl_op;

/* What a supports_op question is about: the op, and for weight ops the weight's form. */
typedef struct sl_op_query {
  uint32_t struct_size;
  uint32_t op;           /* sl_op */
  uint32_t weight_dtype; /* for EMBED/MATMUL/norms */
  uint32_t weight_bits;  /* 0, or quantization bits */
  const sl_kvcodec_api* k_api; /* for KV_WRITE/ATTENTION */
  const sl_kvcodec_api* v_api;
} sl_op_query;

typedef struct sl_backend_api {
  uint32_t struct_size;

  /* Devices this plugin can open, before opening one (for `sluice devices`). */
  uint32_t (*device_count)(void);
  sl_status (*device_info)(uint32_t index, sl_device_info* out, sl_error* err);

  sl_status (*create)(const sl_backend_config* config, sl_backend** out, sl_error* err);
  void (*destroy)(sl_backend* be);
  sl_status (*get_device_info)(const sl_backend* be, sl_device_info* out, sl_error* err);
  int (*supports_op)(const sl_backend* be, const sl_op_query* query); /* 1 yes, 0 no */

  /* Memory. wrap_host makes a buffer over host memory that outlives it (zero-copy where the device
   * can read host memory; otherwise a device copy). */
  sl_status (*alloc)(sl_backend* be, uint64_t bytes, sl_buffer** out, sl_error* err);
  sl_status (*wrap_host)(sl_backend* be, const void* host, uint64_t bytes, sl_buffer** out, sl_error* err);
  void (*free)(sl_backend* be, sl_buffer* buffer);
  sl_status (*upload)(sl_backend* be, sl_buffer* dst, uint64_t offset, const void* src, uint64_t bytes, sl_error* err);
  sl_status (*download)(sl_backend* be, const sl_buffer* src, uint64_t offset, void* dst, uint64_t bytes, sl_error* err);
  sl_status (*synchronize)(sl_backend* be, sl_error* err);

  /* KV cache. */
  sl_status (*kv_create)(sl_backend* be, const sl_kv_layout* layout, sl_kv_cache** out, sl_error* err);
  void (*kv_destroy)(sl_backend* be, sl_kv_cache* cache);
  sl_status (*kv_copy_page)(sl_backend* be, sl_kv_cache* cache, uint32_t src_page, uint32_t dst_page, sl_error* err);

  /* The batch the following ops belong to. */
  sl_status (*begin_batch)(sl_backend* be, const sl_batch* batch, sl_error* err);

  /* out[i, :] = table[ids[i], :] for the batch's n_tokens ids (host array). */
  sl_status (*embed)(sl_backend* be, const sl_weight* table, const int32_t* ids, uint32_t n, sl_buffer* out, sl_error* err);
  /* out = x / rms(x) * (weight + weight_offset), per row of dim. */
  sl_status (*rms_norm)(sl_backend* be, const sl_buffer* x, const sl_weight* weight, float weight_offset,
                        sl_buffer* out, uint32_t n_rows, uint32_t dim, float eps, sl_error* err);
  sl_status (*layer_norm)(sl_backend* be, const sl_buffer* x, const sl_weight* weight, const sl_weight* bias,
                          sl_buffer* out, uint32_t n_rows, uint32_t dim, float eps, sl_error* err);
  /* out[t, r] = sum_c x[t, c] * w[r, c] (+ bias[r]); x is [n_rows, w.cols], out [n_rows, w.rows]. */
  sl_status (*matmul)(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const sl_weight* bias,
                      sl_buffer* out, sl_error* err);
  /* Rotary embedding in place on x [n_tokens, n_heads, head_dim] at the batch's positions:
   * angle = position * inv_freq[i] for i < rotary_dim/2; cos/sin multiplied by attention_factor. */
  sl_status (*rope)(sl_backend* be, sl_buffer* x, uint32_t n_heads, uint32_t head_dim, uint32_t rotary_dim,
                    const float* inv_freq, float attention_factor, uint32_t style, sl_error* err);
  /* Store the batch's K and V ([n_tokens, n_kv_heads, head_dim]) of `layer` at their positions. */
  sl_status (*kv_write)(sl_backend* be, sl_kv_cache* cache, uint32_t layer, const sl_buffer* k, const sl_buffer* v,
                        sl_error* err);
  /* Causal attention of the batch's queries [n_tokens, n_heads, head_dim] over their sequences'
   * cached positions 0..position (within the window); out [n_tokens, n_heads, head_dim]. */
  sl_status (*attention)(sl_backend* be, sl_kv_cache* cache, uint32_t layer, const sl_buffer* q,
                         const sl_attention_params* params, sl_buffer* out, sl_error* err);
  /* out = act(gate) * up, n values. */
  sl_status (*gated_activation)(sl_backend* be, uint32_t activation, const sl_buffer* gate, const sl_buffer* up,
                                sl_buffer* out, uint64_t n, sl_error* err);
  /* out = a + b, out = a * b (n values); out may alias a. */
  sl_status (*add)(sl_backend* be, const sl_buffer* a, const sl_buffer* b, sl_buffer* out, uint64_t n, sl_error* err);
  sl_status (*mul)(sl_backend* be, const sl_buffer* a, const sl_buffer* b, sl_buffer* out, uint64_t n, sl_error* err);
  /* x *= s in place, n values. */
  sl_status (*scale)(sl_backend* be, sl_buffer* x, float s, uint64_t n, sl_error* err);
  /* Copy n floats; offsets in floats. */
  sl_status (*copy)(sl_backend* be, const sl_buffer* src, uint64_t src_offset, sl_buffer* dst, uint64_t dst_offset,
                    uint64_t n, sl_error* err);
  /* Row-wise softmax in place over [n_rows, dim]. */
  sl_status (*softmax)(sl_backend* be, sl_buffer* x, uint32_t n_rows, uint32_t dim, sl_error* err);
  /* Top-k routing over router logits [n_rows, n_experts] → ids [n_rows, k] (i32) and weights [n_rows, k]
   * (f32). softmax_first: probabilities over all experts, then top-k; otherwise top-k logits then
   * softmax over them. normalize: weights divided by their sum. */
  sl_status (*topk)(sl_backend* be, const sl_buffer* logits, uint32_t n_rows, uint32_t n_experts, uint32_t k,
                    int softmax_first, int normalize, sl_buffer* ids, sl_buffer* weights, sl_error* err);

  /* --- added in ABI 1.1 (may be absent: the host checks struct_size and falls back) ---------- */
  /* Mixture-of-Experts row movement, rows of dim floats; rows[] and weights[] are host arrays.
   * gather_rows:      dst[i, :] = src[rows[i], :] for i < n.
   * scatter_add_rows: dst[rows[i], :] += weights[i] * src[i, :] for i < n, in order of i. */
  sl_status (*gather_rows)(sl_backend* be, const sl_buffer* src, const int32_t* rows, uint32_t n, uint32_t dim,
                           sl_buffer* dst, sl_error* err);
  sl_status (*scatter_add_rows)(sl_backend* be, const sl_buffer* src, const int32_t* rows, const float* weights,
                                uint32_t n, uint32_t dim, sl_buffer* dst, sl_error* err);

  /* --- added in ABI 1.3 (may be absent: the host checks struct_size and issues the single ops) --- */
  /* Fused forms of op sequences every layer repeats; each does what the ops it replaces would, so a
   * backend may implement it by calling them (the reference CPU backend fuses for speed: fewer passes
   * and, on a GPU, fewer launches — decode is many small ops).
   * matmul_multi: for i < count, outs[i] = matmul(x, n_rows, ws[i], biases ? biases[i] : NULL) — several
   *   products of one input (q/k/v, gate/up). Every ws[i] has the same cols; the outs are distinct from
   *   x and from each other. count is 1..SL_MATMUL_MULTI_MAX. biases may be NULL, or hold NULL entries.
   * add_rms_norm: the pre-norm residual step: x += delta (n_rows × dim values, in place), then
   *   out = rms_norm(x, weight, weight_offset, eps) per row as rms_norm. out is distinct from x and delta. */
  sl_status (*matmul_multi)(sl_backend* be, const sl_buffer* x, uint32_t n_rows, uint32_t count, const sl_weight* const* ws,
                            const sl_weight* const* biases, sl_buffer* const* outs, sl_error* err);
  sl_status (*add_rms_norm)(sl_backend* be, sl_buffer* x, const sl_buffer* delta, const sl_weight* weight, float weight_offset,
                            sl_buffer* out, uint32_t n_rows, uint32_t dim, float eps, sl_error* err);

  /* --- added in ABI 1.4 (may be absent: the host then reads every token's logits) ------------- */
  /* Greedy decoding a token ahead: the token a pass picks stays on the device and is the next
   * pass's input, which the host issues before it reads that token back.
   * argmax: ids[ids_offset + r] (i32) = the first index of the largest value in row r of x
   *   [n_rows, dim]; NaN values are passed over (a row of nothing but NaN gives 0).
   * embed_device: embed with the n ids read from a device buffer (i32, from element ids_offset)
   *   instead of a host array; an id outside the table gives a row of zeros (the device cannot
   *   refuse it).
   * download_begin: starts copying `bytes` of src from `offset` into host memory dst, after all work
   *   issued before it; *ticket names the copy. dst must stay valid until download_wait returns
   *   for the ticket. download_wait: waits for that copy; each ticket is waited for once. */
  sl_status (*argmax)(sl_backend* be, const sl_buffer* x, uint32_t n_rows, uint32_t dim, sl_buffer* ids, uint64_t ids_offset,
                      sl_error* err);
  sl_status (*embed_device)(sl_backend* be, const sl_weight* table, const sl_buffer* ids, uint64_t ids_offset, uint32_t n,
                            sl_buffer* out, sl_error* err);
  sl_status (*download_begin)(sl_backend* be, const sl_buffer* src, uint64_t offset, void* dst, uint64_t bytes, uint64_t* ticket,
                              sl_error* err);
  sl_status (*download_wait)(sl_backend* be, uint64_t ticket, sl_error* err);
} sl_backend_api;

#define SL_MATMUL_MULTI_MAX 4u

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_BACKEND_H */
