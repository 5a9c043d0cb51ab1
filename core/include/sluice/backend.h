/* Backend ABI 2: a compute device that runs step graphs.
 *
 * The host owns the model description and the schedule: every step it builds a graph of nodes
 * (sluice/graph.h) over tensors in buffers this backend allocated or wrapped, and hands it to
 * graph_compute with the step's batch (tokens, positions, page tables) and the KV cache. The backend
 * owns device memory and how it runs a graph: one kernel per node, or a run of nodes joined into one
 * launch (its own fusion pass). supports_node says, node by node, what it can run; the host sends
 * what it cannot to another backend (the CPU).
 *
 * Activations are dense row-major tensors; weights are matrices [rows = out features, cols = in
 * features] in f32/f16/bf16, or affine-quantized (bits > 0). graph_compute may return before the
 * device has finished (SL_CAP_QUEUED); download and synchronize wait for everything issued before.
 */
#ifndef SLUICE_BACKEND_H
#define SLUICE_BACKEND_H

#include "sluice/graph.h"
#include "sluice/kvcodec.h"
#include "sluice/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_backend sl_backend; /* an opened device, owned by the plugin */
typedef struct sl_plan sl_plan;       /* a graph prepared for replay, owned by the backend */

enum sl_device_caps {
  SL_CAP_F16 = 1u << 0,       /* native half arithmetic */
  SL_CAP_INT8_DOT = 1u << 1,  /* packed int8 dot products */
  SL_CAP_MATRIX = 1u << 2,    /* matrix units (tensor cores) */
  SL_CAP_UNIFIED = 1u << 3,   /* shares memory with the host */
  SL_CAP_QUEUED = 1u << 4,    /* graph_compute returns before the device has run it (a queue): the host
                                 gains by issuing the next step while the device runs this one */
  SL_CAP_KV_RECENT_WINDOW = 1u << 5, /* the KV cache can keep a recent window exact (sl_kv_layout) */
  /* 2.0: kv_create reads sl_kv_layout.layers (each layer's K and V widths, kind and state) and the
   * backend implements kv_copy_state and kv_clear_state. Without it the host gives only layouts whose
   * layers are all alike (layers NULL) and runs no model with recurrent layers there. */
  SL_CAP_KV_LAYERS = 1u << 6,
  /* 2.0: sliding-window layers may keep only their window's pages: the host declares them
   * SL_KV_WINDOW and hands their pages in sl_batch.window_table. Without it it declares them
   * SL_KV_FULL (every position kept) and attention alone applies the window. */
  SL_CAP_KV_WINDOW_PAGES = 1u << 7
};

/* Filled by the plugin. */
typedef struct sl_device_info {
  uint32_t struct_size;
  uint32_t abi_version;   /* SL_ABI_VERSION the plugin was built with */
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

/* What one layer of the cache keeps (2.0; sl_kv_layout.layers). */
typedef enum sl_kv_layer_kind {
  SL_KV_FULL = 0,   /* K and V rows of every position, in the pages of sl_batch.page_table */
  SL_KV_WINDOW = 1, /* K and V rows of the newest `window` positions only, in the pages of
                       sl_batch.window_table: a page that fell out of every query's window is -1 there
                       (released, perhaps reused by another sequence) and must not be read */
  SL_KV_STATE = 2   /* no K and V: a fixed-size state per sequence (a recurrent layer) in state slots */
} sl_kv_layer_kind;

/* One layer of the cache (2.0). Its rows are stored by its own codecs, made for its widths (a
 * codec's head_dim is k_head_dim for K, v_head_dim for V). */
typedef struct sl_kv_layer {
  uint32_t struct_size;
  uint32_t kind;          /* sl_kv_layer_kind */
  uint32_t n_kv_heads;    /* FULL, WINDOW: heads of K and V */
  uint32_t k_head_dim;    /* FULL, WINDOW: values of one head's K row (MLA's latent K may be wider than V) */
  uint32_t v_head_dim;    /* FULL, WINDOW: values of one head's V row */
  uint32_t window;        /* WINDOW: a query at position p reads only keys j with p - window < j <= p */
  uint64_t state_bytes;   /* STATE: bytes of one sequence's state (a multiple of 4; zeroed by kv_clear_state) */
  const sl_kvcodec_api* k_api;  /* FULL, WINDOW */
  const sl_kvcodec* k_codec;
  const sl_kvcodec_api* v_api;
  const sl_kvcodec* v_codec;
} sl_kv_layer;

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
  /* The recent window: the newest recent_window keys before each query are attended exactly, from
   * f16 copies kept in n_recent_pages recent pages (page_tokens positions of every layer and KV
   * head, K then V) beside the compressed pages; the host assigns them (sl_batch.recent_table). Only
   * a backend with SL_CAP_KV_RECENT_WINDOW gets a non-zero window. */
  uint32_t recent_window;
  uint32_t n_recent_pages;
  /* Per layer (2.0; only to a backend with SL_CAP_KV_LAYERS): [n_layers], each layer's kind, widths,
   * codecs and state. NULL: every layer SL_KV_FULL with n_kv_heads, head_dim and the codecs above
   * (which, given layers, describe the model's usual attention layer and may be ignored). A FULL
   * layer has n_pages pages, a WINDOW layer n_window_pages, a STATE layer n_state_slots state slots
   * and no pages; a recent page holds, per FULL or WINDOW layer, [K: head][slot][k_head_dim] then
   * [V: head][slot][v_head_dim] halves. */
  const sl_kv_layer* layers;
  uint32_t n_window_pages;  /* 2.0: pages of each WINDOW layer */
  uint32_t n_state_slots;   /* 2.0: state slots of each STATE layer (live sequences' states and snapshots) */
} sl_kv_layout;

/* What supports_node is asked about: a node, the tensors its indices refer to (their kinds, shapes,
 * dtypes and weight forms; a BUFFER tensor's buffer may be NULL, as the host asks before it
 * allocates), and for KV_WRITE and ATTENTION the layout (codecs) of the cache it will run against. */
typedef struct sl_node_query {
  uint32_t struct_size;
  const sl_node* node;
  const sl_tensor* tensors;
  uint32_t n_tensors;
  const sl_kv_layout* kv;  /* or NULL */
} sl_node_query;

/* One step: the tokens and the cache a graph runs against. */
typedef struct sl_step {
  uint32_t struct_size;
  const sl_batch* batch;
  sl_kv_cache* cache;  /* NULL when the graph has no KV_WRITE or ATTENTION */
} sl_step;

/* The table a backend plugin exports (sl_plugin_descriptor.api). Members marked optional may be NULL. */
typedef struct sl_backend_api {
  uint32_t struct_size;
  uint32_t abi_version;  /* SL_ABI_VERSION the plugin was built with */

  /* Devices this plugin can open, before opening one (for `sluice devices`). */
  uint32_t (*device_count)(void);
  sl_status (*device_info)(uint32_t index, sl_device_info* out, sl_error* err);

  sl_status (*create)(const sl_backend_config* config, sl_backend** out, sl_error* err);
  void (*destroy)(sl_backend* be);
  sl_status (*get_device_info)(const sl_backend* be, sl_device_info* out, sl_error* err);

  /* Memory. wrap_host makes a buffer over host memory that outlives it (zero-copy where the device
   * can read host memory; otherwise a device copy). upload and download wait for work issued before
   * them; download_begin starts a copy after that work and returns at once, *ticket naming it, dst
   * valid until download_wait returns for the ticket (each ticket is waited for once). */
  sl_status (*alloc)(sl_backend* be, uint64_t bytes, sl_buffer** out, sl_error* err);
  sl_status (*wrap_host)(sl_backend* be, const void* host, uint64_t bytes, sl_buffer** out, sl_error* err);
  void (*free)(sl_backend* be, sl_buffer* buffer);
  sl_status (*upload)(sl_backend* be, sl_buffer* dst, uint64_t offset, const void* src, uint64_t bytes, sl_error* err);
  sl_status (*download)(sl_backend* be, const sl_buffer* src, uint64_t offset, void* dst, uint64_t bytes, sl_error* err);
  sl_status (*download_begin)(sl_backend* be, const sl_buffer* src, uint64_t offset, void* dst, uint64_t bytes,
                              uint64_t* ticket, sl_error* err);
  sl_status (*download_wait)(sl_backend* be, uint64_t ticket, sl_error* err);
  sl_status (*synchronize)(sl_backend* be, sl_error* err);

  /* The KV cache. kv_copy_page copies one page of every FULL layer (prefix sharing). */
  sl_status (*kv_create)(sl_backend* be, const sl_kv_layout* layout, sl_kv_cache** out, sl_error* err);
  void (*kv_destroy)(sl_backend* be, sl_kv_cache* cache);
  sl_status (*kv_copy_page)(sl_backend* be, sl_kv_cache* cache, uint32_t src_page, uint32_t dst_page, sl_error* err);

  /* Graphs. supports_node: 1 if the backend runs the node as given (op, parameters, tensor kinds,
   * dtypes and weight forms), 0 otherwise — also for an op it does not know. graph_compute runs every
   * node of the graph in order, as if one by one. */
  int (*supports_node)(const sl_backend* be, const sl_node_query* query);
  sl_status (*graph_compute)(sl_backend* be, const sl_graph* graph, const sl_step* step, sl_error* err);

  /* Optional: a graph prepared once and run for many steps of the same shape (same tensors, same
   * node list; the batch's values and the HOST tensors' contents may change, their sizes may not):
   * plan_create may record its launches or a device command buffer. plan_compute(plan, step) does
   * what graph_compute(graph, step) would. The graph's memory may be released after plan_create. */
  sl_status (*plan_create)(sl_backend* be, const sl_graph* graph, sl_plan** out, sl_error* err);
  sl_status (*plan_compute)(sl_backend* be, sl_plan* plan, const sl_step* step, sl_error* err);
  void (*plan_destroy)(sl_backend* be, sl_plan* plan);

  /* Recurrent state (2.0; required with SL_CAP_KV_LAYERS, else may be NULL). kv_copy_state copies
   * the states of every STATE layer in slot src_slot to slot dst_slot (the host's snapshots at page
   * boundaries, and restoring one for a request that shares the prefix); kv_clear_state zeroes a
   * slot's states (a new sequence). Both take effect after the work issued before them and before
   * any issued after (a queued backend enqueues them). */
  sl_status (*kv_copy_state)(sl_backend* be, sl_kv_cache* cache, uint32_t src_slot, uint32_t dst_slot, sl_error* err);
  sl_status (*kv_clear_state)(sl_backend* be, sl_kv_cache* cache, uint32_t slot, sl_error* err);
} sl_backend_api;

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_BACKEND_H */
