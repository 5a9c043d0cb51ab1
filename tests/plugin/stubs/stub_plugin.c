/* One source, many stub plugins: each target defines one STUB_* macro and gets a plugin that is
 * malformed (or well-formed) in exactly one way, so the loader's checks can be tested one by one. */
#include <stddef.h>
#include <string.h>

#include "sluice/backend.h"
#include "sluice/kvcodec.h"
#include "sluice/plugin.h"

/* Functions that fill the required slots of the tables; the loader never calls them. */
static uint32_t stub_device_count(void) { return 7; }
static sl_status stub_backend_create(const sl_backend_config* c, sl_backend** out, sl_error* err) {
  (void)c; (void)out;
  strcpy(err->message, "stub backend cannot start");
  return SL_ERR_UNSUPPORTED;
}
static void stub_backend_destroy(sl_backend* be) { (void)be; }
static sl_status stub_alloc(sl_backend* be, uint64_t bytes, sl_buffer** out, sl_error* err) {
  (void)be; (void)bytes; (void)out; (void)err;
  return SL_ERR_UNSUPPORTED;
}
static void stub_free(sl_backend* be, sl_buffer* b) { (void)be; (void)b; }
static sl_status stub_device_info(uint32_t i, sl_device_info* out, sl_error* err) {
  (void)i; (void)out; (void)err;
  return SL_ERR_UNSUPPORTED;
}
static sl_status stub_get_device_info(const sl_backend* be, sl_device_info* out, sl_error* err) {
  (void)be; (void)out; (void)err;
  return SL_ERR_UNSUPPORTED;
}
static sl_status stub_wrap(sl_backend* be, const void* host, uint64_t bytes, sl_buffer** out, sl_error* err) {
  (void)be; (void)host; (void)bytes; (void)out; (void)err;
  return SL_ERR_UNSUPPORTED;
}
static sl_status stub_upload(sl_backend* be, sl_buffer* dst, uint64_t off, const void* src, uint64_t bytes, sl_error* err) {
  (void)be; (void)dst; (void)off; (void)src; (void)bytes; (void)err;
  return SL_ERR_UNSUPPORTED;
}
static sl_status stub_download(sl_backend* be, const sl_buffer* src, uint64_t off, void* dst, uint64_t bytes, sl_error* err) {
  (void)be; (void)src; (void)off; (void)dst; (void)bytes; (void)err;
  return SL_ERR_UNSUPPORTED;
}
static sl_status stub_download_begin(sl_backend* be, const sl_buffer* src, uint64_t off, void* dst, uint64_t bytes, uint64_t* t,
                                     sl_error* err) {
  (void)be; (void)src; (void)off; (void)dst; (void)bytes; (void)t; (void)err;
  return SL_ERR_UNSUPPORTED;
}
static sl_status stub_download_wait(sl_backend* be, uint64_t t, sl_error* err) {
  (void)be; (void)t; (void)err;
  return SL_ERR_UNSUPPORTED;
}
static sl_status stub_sync(sl_backend* be, sl_error* err) {
  (void)be; (void)err;
  return SL_ERR_UNSUPPORTED;
}
static sl_status stub_kv_create(sl_backend* be, const sl_kv_layout* l, sl_kv_cache** out, sl_error* err) {
  (void)be; (void)l; (void)out; (void)err;
  return SL_ERR_UNSUPPORTED;
}
static void stub_kv_destroy(sl_backend* be, sl_kv_cache* c) { (void)be; (void)c; }
static sl_status stub_kv_copy_page(sl_backend* be, sl_kv_cache* c, uint32_t a, uint32_t b, sl_error* err) {
  (void)be; (void)c; (void)a; (void)b; (void)err;
  return SL_ERR_UNSUPPORTED;
}
static int stub_supports_node(const sl_backend* be, const sl_node_query* q) { (void)be; (void)q; return 0; }
static sl_status stub_graph_compute(sl_backend* be, const sl_graph* g, const sl_step* step, sl_error* err) {
  (void)be; (void)g; (void)step; (void)err;
  return SL_ERR_UNSUPPORTED;
}

static sl_status stub_codec_create(uint32_t head_dim, sl_kv_role role, const char* options, sl_kvcodec** out,
                                   sl_error* err) {
  (void)head_dim; (void)role; (void)options; (void)out;
  strcpy(err->message, "stub codec");
  return SL_ERR_UNSUPPORTED;
}
static void stub_codec_destroy(sl_kvcodec* c) { (void)c; }
static void stub_codec_format(const sl_kvcodec* c, sl_kv_format* f) { (void)c; (void)f; }
static sl_status stub_codec_code(const sl_kvcodec* c, const float* src, uint32_t n, void* dst, sl_error* err) {
  (void)c; (void)src; (void)n; (void)dst; (void)err;
  return SL_ERR_UNSUPPORTED;
}
static sl_status stub_codec_decode(const sl_kvcodec* c, const void* src, uint32_t n, float* dst, sl_error* err) {
  (void)c; (void)src; (void)n; (void)dst; (void)err;
  return SL_ERR_UNSUPPORTED;
}

#define BACKEND_MEMBERS                                                                                  \
  .device_count = stub_device_count, .device_info = stub_device_info, .create = stub_backend_create,             \
  .destroy = stub_backend_destroy, .get_device_info = stub_get_device_info, .alloc = stub_alloc,                 \
  .wrap_host = stub_wrap, .free = stub_free, .upload = stub_upload, .download = stub_download,                   \
  .download_begin = stub_download_begin, .download_wait = stub_download_wait, .synchronize = stub_sync,           \
  .kv_create = stub_kv_create, .kv_destroy = stub_kv_destroy, .kv_copy_page = stub_kv_copy_page,                 \
  .supports_node = stub_supports_node, .graph_compute = stub_graph_compute
#define KVCODEC_MEMBERS                                                                         \
  .create = stub_codec_create, .destroy = stub_codec_destroy, .get_format = stub_codec_format, \
  .encode = stub_codec_code, .decode = stub_codec_decode

/* A table from a later 2.x: the 2.0 table, then members this host has never heard of. */
typedef struct newer_backend_api {
  sl_backend_api v2_0;
  sl_status (*future_op)(sl_backend* be, sl_error* err);
  uint64_t future_flags;
} newer_backend_api;
typedef struct newer_kvcodec_api {
  sl_kvcodec_api v2_0;
  uint32_t (*future_hook)(const sl_kvcodec* c);
  uint64_t future_flags;
} newer_kvcodec_api;
typedef struct newer_descriptor {
  sl_plugin_descriptor v2_0;
  const char* future_license;
  uint64_t future_flags;
} newer_descriptor;

__attribute__((unused)) static const sl_backend_api full_backend = {sizeof(sl_backend_api), SL_ABI_VERSION, BACKEND_MEMBERS};
__attribute__((unused)) static const sl_kvcodec_api full_kvcodec = {sizeof(sl_kvcodec_api), SL_ABI_VERSION, KVCODEC_MEMBERS};

#if defined(STUB_WRONG_ABI_MAJOR)
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_VERSION_OF(SL_ABI_MAJOR + 98, 3), SL_PLUGIN_BACKEND, "stub-abi",
                                          "1.0.0", "built for a future ABI", NULL, &full_backend};
#elif defined(STUB_ABI_1)
/* An ABI 1 plugin: its descriptor held the major alone (1) where abi_version is now. */
static const sl_plugin_descriptor desc = {sizeof desc, 1, SL_PLUGIN_BACKEND, "stub-abi1", "0.9.0", "built for ABI 1", NULL,
                                          &full_backend};
#elif defined(STUB_PROBE_FAILS)
static sl_status probe(sl_error* err) {
  strcpy(err->message, "no stub device on this machine");
  return SL_ERR_DEVICE;
}
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_VERSION, SL_PLUGIN_BACKEND, "stub-probe", "1.0.0",
                                          "probe refuses", probe, &full_backend};
#elif defined(STUB_NEWER_BACKEND)
static sl_status future_op(sl_backend* be, sl_error* err) { (void)be; (void)err; return SL_OK; }
static const newer_backend_api api = {{sizeof(newer_backend_api), SL_ABI_VERSION_OF(SL_ABI_MAJOR, 9), BACKEND_MEMBERS}, future_op, 42};
static const newer_descriptor newer = {
    {sizeof(newer_descriptor), SL_ABI_VERSION_OF(SL_ABI_MAJOR, 9), SL_PLUGIN_BACKEND, "stub-newer", "1.9.0", "from ABI 1.9", NULL, &api},
    "MIT", 1};
#define desc newer.v2_0
#elif defined(STUB_NEWER_KVCODEC)
static uint32_t future_hook(const sl_kvcodec* c) { (void)c; return 0; }
static const newer_kvcodec_api api = {{sizeof(newer_kvcodec_api), SL_ABI_VERSION_OF(SL_ABI_MAJOR, 9), KVCODEC_MEMBERS}, future_hook, 42};
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_VERSION, SL_PLUGIN_KVCODEC, "stub-newer-codec", "1.9.0",
                                          "from ABI 1.9", NULL, &api};
#elif defined(STUB_OLD_BACKEND)
/* Claims to end before graph_compute: older than anything this host accepts. */
static const sl_backend_api api = {offsetof(sl_backend_api, graph_compute), SL_ABI_VERSION, BACKEND_MEMBERS};
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_VERSION, SL_PLUGIN_BACKEND, "stub-old", "0.1.0",
                                          "too old", NULL, &api};
#elif defined(STUB_OLD_KVCODEC)
static const sl_kvcodec_api api = {offsetof(sl_kvcodec_api, encode), SL_ABI_VERSION, KVCODEC_MEMBERS};
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_VERSION, SL_PLUGIN_KVCODEC, "stub-old-codec", "0.1.0",
                                          "too old", NULL, &api};
#elif defined(STUB_MISSING_FUNCTION)
static const sl_backend_api api = {sizeof(sl_backend_api), SL_ABI_VERSION, .create = stub_backend_create,
                                   .destroy = stub_backend_destroy, .alloc = stub_alloc, .free = stub_free};
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_VERSION, SL_PLUGIN_BACKEND, "stub-incomplete", "1.0.0",
                                          "no graph_compute", NULL, &api};
#elif defined(STUB_UNKNOWN_KIND)
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_VERSION, 42, "stub-kind", "1.0.0", "what is it",
                                          NULL, &full_kvcodec};
#elif defined(STUB_DUPLICATE)
/* Built twice under two file names: the second one found must be refused. */
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_VERSION, SL_PLUGIN_KVCODEC, "stub-dup", STUB_DUPLICATE,
                                          "one of two", NULL, &full_kvcodec};
#endif

#if defined(STUB_NULL_ENTRY)
SL_EXPORT const sl_plugin_descriptor* sluice_plugin_entry(void) { return NULL; }
#elif defined(STUB_NO_ENTRY)
/* A shared library that is not a plugin: it exports something, just not the entry. */
SL_EXPORT int sluice_something_else(void) { return (int)full_backend.struct_size + (int)full_kvcodec.struct_size; }
#else
SL_EXPORT const sl_plugin_descriptor* sluice_plugin_entry(void) {
  return &desc;
}
#endif
