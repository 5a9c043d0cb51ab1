/* Expert store ABI: where the weights of Mixture-of-Experts experts live.
 *
 * The host describes, for every (layer, expert), the byte ranges of its parts in the model files
 * (e.g. gate/up/down weights, and their scales/biases when quantized). Before a MoE layer runs, the
 * host acquires the routed experts and gets host pointers to their parts; it releases them after the
 * layer. A store may keep everything resident (mmap) or read experts on demand into a bounded cache.
 */
#ifndef SLUICE_EXPERTSTORE_H
#define SLUICE_EXPERTSTORE_H

#include "sluice/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_expertstore sl_expertstore; /* opaque: owned by the store plugin */

typedef struct sl_expert_part {
  uint32_t file_index; /* into sl_expertstore_config.files */
  uint64_t offset;     /* byte offset in that file */
  uint64_t bytes;
} sl_expert_part;

typedef struct sl_expertstore_config {
  uint32_t struct_size;
  uint32_t n_files;
  const char* const* files;      /* model files (safetensors) */
  uint32_t n_layers;             /* MoE layers (dense layers are not described) */
  uint32_t n_experts;            /* experts per layer */
  uint32_t n_parts;              /* parts per expert */
  const sl_expert_part* parts;   /* [n_layers][n_experts][n_parts] */
  uint64_t budget_bytes;         /* cache budget; 0 = store's choice */
  const char* options;           /* store-specific, "" if none */
} sl_expertstore_config;

typedef struct sl_expertstore_stats {
  uint32_t struct_size;
  uint32_t abi_version;     /* SL_ABI_VERSION the plugin was built with (it fills this struct) */
  uint64_t bytes_read;      /* bytes that really came from the file system */
  uint64_t read_requests;
  uint64_t hits;            /* acquires served from memory */
  uint64_t misses;          /* acquires that had to read */
  uint64_t prefetched;      /* experts read ahead of need */
  uint64_t cache_bytes;     /* bytes held now */
  uint64_t budget_bytes;
  double read_seconds;      /* wall time with at least one read in flight (for bandwidth) */
  double read_p50_us;       /* latency of one read request, percentiles */
  double read_p99_us;
  uint64_t evictions;
  uint32_t direct_io;       /* 1 when reads bypass the page cache (O_DIRECT) */
} sl_expertstore_stats;

typedef struct sl_expertstore_layer_stats {
  uint32_t struct_size;
  uint32_t abi_version;     /* SL_ABI_VERSION the plugin was built with (it fills this struct) */
  uint64_t hits;
  uint64_t misses;
  uint64_t bytes_read;
} sl_expertstore_layer_stats;

typedef struct sl_expertstore_api {
  uint32_t struct_size;
  uint32_t abi_version;  /* SL_ABI_VERSION the plugin was built with */
  sl_status (*create)(const sl_expertstore_config* config, sl_expertstore** out, sl_error* err);
  void (*destroy)(sl_expertstore* store);
  /* Make experts[0..n) of `layer` usable; parts_out receives n * n_parts host pointers (expert-major),
   * valid until the matching release. */
  sl_status (*acquire)(sl_expertstore* store, uint32_t layer, const uint32_t* experts, uint32_t n,
                       const void** parts_out, sl_error* err);
  void (*release)(sl_expertstore* store, uint32_t layer, const uint32_t* experts, uint32_t n);
  /* A hint: these experts are likely needed soon. May be NULL. */
  void (*prefetch)(sl_expertstore* store, uint32_t layer, const uint32_t* experts, uint32_t n);
  void (*get_stats)(const sl_expertstore* store, sl_expertstore_stats* out);
  void (*get_layer_stats)(const sl_expertstore* store, uint32_t layer, sl_expertstore_layer_stats* out);
} sl_expertstore_api;

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_EXPERTSTORE_H */
