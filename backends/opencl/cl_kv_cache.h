#pragma once
// What the KV cache (cl_kv_cache.cpp) shares with the attention launches (cl_attention.cpp): the
// attention kernels' shapes, the program built with the codecs' source, the checks of a batch's
// pages, where the host path's rows lie and the kernels' page arguments.
#include <cstddef>
#include <cstdint>

#include "cl_backend.h"

namespace sluice::ocl {

// The attention kernels' work-group: a tile of WG keys is scored in parallel (one key a work-item in
// the fused kernel; teams of ATT_TEAM work-items a key in the generic one), one key's softmax weight a work-item.
// Tuning att_wg: 64, 128 or 256.
uint32_t attention_wg(const sl_backend* be);

// attention_short (kernels_cl/attention_short.cl) serves queries of at most this many keys where the
// program has it; longer ones go to the generic kernel. On the H100 at depth 0 (≤ 80 keys) it took
// 13.0 µs a launch against the generic kernel's 18.1 (profiled); at depth 8192, with key splits, it
// was no faster (perf/NOTES.md) — 512 keys is where the generic kernel starts to split.
// Tuning att_short sets N (0: never), and a backend created with the option "generic-attention"
// never uses it (the tests compare the two).
int32_t short_passes_max_keys(const sl_backend* be);

// Local floats of one head's K query area in attention_fused (docs/PLUGINS.md): the domain, one
// padding float per head_dim slot, 64 for the codec's tables.
uint64_t k_query_area(const sl_kv_cache::Geometry& g);
// Floats of local memory the fused kernel's `acc` argument takes per head: the V codec's slots,
// except with one slot beside fused keys, where the accumulators live in registers and the final
// rotation back reuses the query area (kernels_cl/attention_fused.cl, V_IN_REGISTERS).
uint64_t v_acc_area(const sl_kv_cache::Geometry& g);

// Whether the batch keeps the cache's recent window (the cache has one and the batch recent pages).
bool keeps_recent(const sl_backend* be, const sl_kv_cache* c);
// The batch's table of a layer's pages: the window table for a WINDOW layer, else the page table
// (on the host; device_table_of: its copy on the device).
const std::vector<int32_t>& table_of(const sl_backend* be, const sl_kv_cache* c, uint32_t layer);
const cl::Buffer& device_table_of(const sl_backend* be, const sl_kv_cache* c, uint32_t layer);
// The batch's positions and the layer's table entries (and recent table entries) against the
// layer's pages: every page a query reads (its window's, in a WINDOW layer) names one of them.
sl_status check_pages(const sl_backend* be, const sl_kv_cache* c, uint32_t layer, sl_error* err);

// A geometry's program for `group` query heads per KV head (sl_kv_cache::Kernels), built on first
// use; throws where the codecs' source does not build with ours.
sl_kv_cache::Kernels& cache_kernels(sl_backend* be, sl_kv_cache::Geometry& g, uint32_t group);

// Whether kv_write_rope and attention_short_join can rotate the rope pair r in their launch: k is its
// second tensor, with the layer's KV heads and K width, and v neither of its tensors.
inline bool rope_pair_fits(const RopeLaunch& r, const sl_buffer* k, const sl_buffer* v, uint32_t n_kv_heads, uint32_t head_dim) {
  return r.x && r.x2 && r.x2 == k && r.n_heads2 == n_kv_heads && r.head_dim == head_dim && v != r.x && v != r.x2;
}

// The host path's rows of (layer, page, head, slot) in the layer's widths: K, V, and the recent
// window's f16 copies (rpage: a recent page; kv: 0 K, 1 V).
std::byte* host_k_row(sl_kv_cache* c, uint32_t layer, uint32_t page, uint32_t head, uint32_t slot);
std::byte* host_v_row(sl_kv_cache* c, uint32_t layer, uint32_t page, uint32_t head, uint32_t slot);
uint16_t* host_recent_row(sl_kv_cache* c, uint32_t layer, int32_t rpage, int kv, uint32_t head, uint32_t slot);

// Arguments first..first+5 of the kernels that read a layer's pages (kv_write, attention,
// kv_gather_f16): the layer's buffer, page size, positions a page, KV heads, K and V row bytes.
void set_layer_args(cl::Kernel& kn, cl_uint first, const sl_kv_cache* c, uint32_t layer);
// Arguments 2-11 of kv_write and attention (kernels_cl/attention.cl): where the layer's pages are and
// how they are laid out, and the batch's positions, sequence slots and the layer's table.
void set_page_args(cl::Kernel& kn, const sl_backend* be, const sl_kv_cache* c, uint32_t layer);

}  // namespace sluice::ocl
