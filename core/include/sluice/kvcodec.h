/* KV codec ABI: how one head vector of K or V is stored in the cache, and (optionally) how attention
 * runs directly on the stored form.
 *
 * A codec instance is made for one head_dim and one role (K or V). It stores each head vector as a
 * fixed-size "row" of row_bytes, built from blocks (values_per_block values in bytes_per_block bytes).
 * Backends keep rows in pages (see backend.h) and never look inside a row: they call the codec.
 *
 * Every backend can use every codec through encode/decode (decode-then-attend). A codec may add the
 * fused hooks below so that a CPU backend scores keys and accumulates values on the compressed rows
 * without materialising the history, and may give OpenCL source for device backends.
 */
#ifndef SLUICE_KVCODEC_H
#define SLUICE_KVCODEC_H

#include "sluice/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_kvcodec sl_kvcodec; /* opaque: owned by the codec plugin */

typedef enum sl_kv_role { SL_KV_KEYS = 0, SL_KV_VALUES = 1 } sl_kv_role;

typedef struct sl_kv_format {
  uint32_t struct_size;
  uint32_t abi_version;     /* SL_ABI_VERSION the plugin was built with (it fills this struct) */
  uint32_t head_dim;
  uint32_t values_per_block;
  uint32_t bytes_per_block;
  uint32_t row_bytes;       /* bytes of one stored head vector */
  float bits_per_value;     /* row_bytes * 8 / head_dim */
  uint32_t domain_dim;      /* floats in the fused accumulator (>= head_dim; e.g. padded rotation) */
} sl_kv_format;

typedef struct sl_kvcodec_api {
  uint32_t struct_size;
  uint32_t abi_version;  /* SL_ABI_VERSION the plugin was built with */

  /* options: the text after "name:" in --kv-codec, or "" */
  sl_status (*create)(uint32_t head_dim, sl_kv_role role, const char* options, sl_kvcodec** out,
                      sl_error* err);
  void (*destroy)(sl_kvcodec* codec);
  void (*get_format)(const sl_kvcodec* codec, sl_kv_format* out);

  /* n_rows head vectors of head_dim float32 each → n_rows rows of row_bytes (and back). */
  sl_status (*encode)(const sl_kvcodec* codec, const float* src, uint32_t n_rows, void* dst, sl_error* err);
  sl_status (*decode)(const sl_kvcodec* codec, const void* src, uint32_t n_rows, float* dst, sl_error* err);

  /* --- optional fused attention hooks (all NULL, or all set for the role) ---------------------
   * Keys:   prepare_query turns a float32 query (head_dim) into query_state_bytes of state (for
   *         example the rotated query and per-block lookup tables); score_keys writes dot(q, k_i)
   *         for n_rows stored rows, rows[i] at rows + i * row_stride.
   * Values: accumulate_values adds sum_i weights[i] * v_i into acc (domain_dim floats, the codec's
   *         domain, e.g. rotated); finish_values maps acc back to head_dim floats. */
  uint32_t (*query_state_bytes)(const sl_kvcodec* codec);
  void (*prepare_query)(const sl_kvcodec* codec, const float* q, void* state);
  void (*score_keys)(const sl_kvcodec* codec, const void* state, const void* rows, size_t row_stride,
                     uint32_t n_rows, float* scores);
  void (*accumulate_values)(const sl_kvcodec* codec, const void* rows, size_t row_stride, uint32_t n_rows,
                            const float* weights, float* acc);
  void (*finish_values)(const sl_kvcodec* codec, const float* acc, float* out);

  /* Optional: OpenCL C source of the codec's device functions (docs/PLUGINS.md); NULL if none. */
  const char* (*opencl_source)(const sl_kvcodec* codec);
} sl_kvcodec_api;

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_KVCODEC_H */
