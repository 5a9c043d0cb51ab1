/* Sluice plugin ABI — the C boundary between the host and its plugins.
 *
 * A plugin is a shared library (MODULE) that exports exactly one symbol, `sluice_plugin_entry`, a
 * function returning a pointer to a static `sl_plugin_descriptor`. Everything else crosses through the
 * function tables the descriptor points to.
 *
 * Versioning rules (see docs/PLUGINS.md):
 *  - SL_ABI_MAJOR changes only when an existing member changes meaning or position; the host refuses
 *    a plugin whose major differs, naming both versions. SL_ABI_MINOR grows when members are added.
 *  - Every struct that crosses the boundary starts with `struct_size` (sizeof as the writer compiled
 *    it); every table and struct a plugin fills carries, next to it, the `abi_version` it was built
 *    with (SL_ABI_VERSION). Structs and tables only grow at the end; the reader checks `struct_size`
 *    before touching a member added later, and treats members beyond the writer's size as absent
 *    (NULL / 0). Each member added after x.0 says in its comment which minor added it.
 *  - Optional function pointers may be NULL; the host checks before calling.
 *
 * Errors: functions return `sl_status`; on failure they write a NUL-terminated message into the
 * caller-owned `sl_error` (never NULL). No C++ exception, longjmp or abort may cross the boundary.
 *
 * Ownership: whoever allocates releases, through the same table (`create`/`destroy`, `alloc`/`free`).
 * Strings returned by a plugin stay valid until the object they came from is destroyed.
 */
#ifndef SLUICE_PLUGIN_H
#define SLUICE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SL_ABI_MAJOR 2u
#define SL_ABI_MINOR 5u
/* A version in one word: major in the high 16 bits, minor in the low 16. */
#define SL_ABI_VERSION_OF(major, minor) (((uint32_t)(major) << 16) | (uint32_t)(minor))
#define SL_ABI_VERSION SL_ABI_VERSION_OF(SL_ABI_MAJOR, SL_ABI_MINOR)
#define SL_ABI_VERSION_MAJOR(v) ((uint32_t)(v) >> 16)
#define SL_ABI_VERSION_MINOR(v) ((uint32_t)(v) & 0xFFFFu)
#define SL_PLUGIN_ENTRY_SYMBOL "sluice_plugin_entry"

#if defined(__GNUC__)
#define SL_EXPORT __attribute__((visibility("default")))
#else
#define SL_EXPORT
#endif

typedef enum sl_status {
  SL_OK = 0,
  SL_ERR_INVALID_ARGUMENT = 1,
  SL_ERR_UNSUPPORTED = 2,   /* this op/format is not available here: the host falls back */
  SL_ERR_OUT_OF_MEMORY = 3, /* host or device memory exhausted */
  SL_ERR_DEVICE = 4,        /* the device failed (driver error, lost device, kernel build error) */
  SL_ERR_IO = 5,            /* reading or writing a file failed */
  SL_ERR_INTERNAL = 6       /* a bug in the plugin; the message says what */
} sl_status;

#define SL_ERROR_MESSAGE_SIZE 1024
typedef struct sl_error {
  char message[SL_ERROR_MESSAGE_SIZE];
} sl_error;

typedef enum sl_plugin_kind {
  SL_PLUGIN_BACKEND = 1,
  SL_PLUGIN_KVCODEC = 2,
  SL_PLUGIN_EXPERTSTORE = 3
} sl_plugin_kind;

typedef struct sl_plugin_descriptor {
  uint32_t struct_size; /* sizeof(sl_plugin_descriptor) as the plugin was compiled */
  /* SL_ABI_VERSION the plugin was built with; its major must equal the host's. ABI 1 plugins kept
   * their major alone here (1), which reads as version 0.1: refused, named as ABI 1. */
  uint32_t abi_version;
  uint32_t kind;        /* sl_plugin_kind */
  const char* name;     /* short, unique per kind: "cpu", "opencl", "q8", "uring" */
  const char* version;  /* the plugin's own version, e.g. "0.1.0" */
  const char* description;
  /* Can this plugin run on this machine? SL_OK, or a status and the reason (e.g. "no OpenCL
   * platform"). May be NULL: always runnable. */
  sl_status (*probe)(sl_error* err);
  /* The kind's function table: const sl_backend_api*, const sl_kvcodec_api* or
   * const sl_expertstore_api*. Each starts with its own struct_size. */
  const void* api;
} sl_plugin_descriptor;

typedef const sl_plugin_descriptor* (*sl_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_PLUGIN_H */
