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
static sl_status stub_matmul(sl_backend* be, const sl_buffer* x, uint32_t n, const sl_weight* w, const sl_weight* bias,
                             sl_buffer* out, sl_error* err) {
  (void)be; (void)x; (void)n; (void)w; (void)bias; (void)out; (void)err;
  return SL_ERR_UNSUPPORTED;
}
static sl_status stub_attention(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q,
                                const sl_attention_params* p, sl_buffer* out, sl_error* err) {
  (void)be; (void)c; (void)layer; (void)q; (void)p; (void)out; (void)err;
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

#define BACKEND_MEMBERS                                                                        \
  .device_count = stub_device_count, .create = stub_backend_create, .destroy = stub_backend_destroy, \
  .alloc = stub_alloc, .free = stub_free, .matmul = stub_matmul, .attention = stub_attention
#define KVCODEC_MEMBERS                                                                         \
  .create = stub_codec_create, .destroy = stub_codec_destroy, .get_format = stub_codec_format, \
  .encode = stub_codec_code, .decode = stub_codec_decode

/* A table from a later 1.x: the 1.0 table, then members this host has never heard of. */
typedef struct newer_backend_api {
  sl_backend_api v1_0;
  sl_status (*future_op)(sl_backend* be, sl_error* err);
  uint64_t future_flags;
} newer_backend_api;
typedef struct newer_kvcodec_api {
  sl_kvcodec_api v1_0;
  uint32_t (*future_hook)(const sl_kvcodec* c);
  uint64_t future_flags;
} newer_kvcodec_api;
typedef struct newer_descriptor {
  sl_plugin_descriptor v1_0;
  const char* future_license;
  uint64_t future_flags;
} newer_descriptor;

__attribute__((unused)) static const sl_backend_api full_backend = {sizeof(sl_backend_api), BACKEND_MEMBERS};
__attribute__((unused)) static const sl_kvcodec_api full_kvcodec = {sizeof(sl_kvcodec_api), KVCODEC_MEMBERS};

#if defined(STUB_WRONG_ABI_MAJOR)
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_MAJOR + 98, SL_PLUGIN_BACKEND, "stub-abi", "1.0.0",
                                          "built for a future ABI", NULL, &full_backend};
#elif defined(STUB_PROBE_FAILS)
static sl_status probe(sl_error* err) {
  strcpy(err->message, "no stub device on this machine");
  return SL_ERR_DEVICE;
}
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_MAJOR, SL_PLUGIN_BACKEND, "stub-probe", "1.0.0",
                                          "probe refuses", probe, &full_backend};
#elif defined(STUB_NEWER_BACKEND)
static sl_status future_op(sl_backend* be, sl_error* err) { (void)be; (void)err; return SL_OK; }
static const newer_backend_api api = {{sizeof(newer_backend_api), BACKEND_MEMBERS}, future_op, 42};
static const newer_descriptor newer = {
    {sizeof(newer_descriptor), SL_ABI_MAJOR, SL_PLUGIN_BACKEND, "stub-newer", "1.9.0", "from ABI 1.9", NULL, &api},
    "MIT", 1};
#define desc newer.v1_0
#elif defined(STUB_NEWER_KVCODEC)
static uint32_t future_hook(const sl_kvcodec* c) { (void)c; return 0; }
static const newer_kvcodec_api api = {{sizeof(newer_kvcodec_api), KVCODEC_MEMBERS}, future_hook, 42};
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_MAJOR, SL_PLUGIN_KVCODEC, "stub-newer-codec", "1.9.0",
                                          "from ABI 1.9", NULL, &api};
#elif defined(STUB_OLD_BACKEND)
/* Claims to end before matmul: older than anything this host accepts. */
static const sl_backend_api api = {offsetof(sl_backend_api, matmul), BACKEND_MEMBERS};
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_MAJOR, SL_PLUGIN_BACKEND, "stub-old", "0.1.0",
                                          "too old", NULL, &api};
#elif defined(STUB_OLD_KVCODEC)
static const sl_kvcodec_api api = {offsetof(sl_kvcodec_api, encode), KVCODEC_MEMBERS};
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_MAJOR, SL_PLUGIN_KVCODEC, "stub-old-codec", "0.1.0",
                                          "too old", NULL, &api};
#elif defined(STUB_MISSING_FUNCTION)
static const sl_backend_api api = {sizeof(sl_backend_api), .create = stub_backend_create,
                                   .destroy = stub_backend_destroy, .alloc = stub_alloc, .free = stub_free};
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_MAJOR, SL_PLUGIN_BACKEND, "stub-incomplete", "1.0.0",
                                          "no matmul", NULL, &api};
#elif defined(STUB_UNKNOWN_KIND)
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_MAJOR, 42, "stub-kind", "1.0.0", "what is it",
                                          NULL, &full_kvcodec};
#elif defined(STUB_DUPLICATE)
/* Built twice under two file names: the second one found must be refused. */
static const sl_plugin_descriptor desc = {sizeof desc, SL_ABI_MAJOR, SL_PLUGIN_KVCODEC, "stub-dup", STUB_DUPLICATE,
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
