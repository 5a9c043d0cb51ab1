// The paged KV cache: its layout, creation and page copies, the program built with its codecs'
// source (kv_write and the attention kernels, one per query heads per KV head) and kv_write, with
// its deferral. The attention launches over the cache are in cl_attention.cpp.
//
// Layout per layer (as the CPU backend's): a FULL layer's n_pages pages, a WINDOW layer's
// n_window_pages (the batch's window table maps its positions); a page holds page_tokens positions:
// the K rows of every KV head ([head][slot]), then the V rows, in the layer's codecs and widths.
// Layers are grouped by widths and codecs into geometries (cl_kv_geometry.h), each with its programs.
// When every geometry's codecs give OpenCL source, the pages live on the device and kv_write/attention are
// kernels built with that source (kernels_cl/attention.cl; kv_write_rope also runs the rope pair of q
// and k before it, in its launch: kRopeKvWrite, cl_fusion.h). Otherwise the host keeps the layer's
// pages and runs the codec's encode/decode and the attention itself: slow, but correct for any codec.
//
// A launch costs 5-7 µs on the H100 even when it does almost nothing, so in decode (every token of
// another sequence) where the attention of the layer right after takes attention_short,
// attention_short_join runs the kv_write (with its rope pair) in the attention's launch
// (kernels_cl/attention_short.cl; kKvAttention and kRopeKvAttention, cl_fusion.h; cl_attention.cpp
// checks the batch). The backend option "no-attention-join" keeps the two launches.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "cl_kv_cache.h"
#include "util/batch_pages.h"
#include "util/kv_shape.h"
#include "util/vec.h"  // f16 conversions of the recent window on the host path

namespace sluice::ocl {
namespace {

// Tuning att_vu (1..64) overrides how many keys' values a work-item loads before using them
// (ATT_VU in kernels_cl/attention.cl).
std::string value_unroll_option(const sl_backend* be) {
  const uint32_t knob = be->tuning.att_vu;
  return knob ? " -DATT_VU=" + std::to_string(knob) : "";
}

// The generic kernel's key scoring (kernels_cl/attention.cl): tuning att_team (8, 16, 32) overrides
// how many work-items read a key row together (ATT_TEAM), att_kpt (1, 2, 4, 8) how many keys a team
// loads before summing (ATT_KPT); att_shfl_local = 1 runs the shuffle path's reduction through local
// memory, to check it on devices without PTX.
std::string key_scoring_options(const sl_backend* be) {
  const uint32_t team = be->tuning.att_team, kpt = be->tuning.att_kpt, shfl_local = be->tuning.att_shfl_local;
  std::string options;
  if (team) options += " -DATT_TEAM=" + std::to_string(team);
  if (kpt) options += " -DATT_KPT=" + std::to_string(kpt);
  if (shfl_local) options += " -DATT_SHFL_LOCAL=1";
  return options;
}

// The work-group of kv_write, attention_fused_queries and attention_merge: a turbo key tries 16
// rotations, each with its own transform and search, so a row is encoded by up to 256 work-items (16
// a rotation) where the device allows; a query is rotated 16 ways for every head of a work-group, by
// as many; a merge sums its splits in several lanes.
uint32_t wide_group_size(const sl_backend* be) {
  uint32_t wg = 256;
  while (wg > attention_wg(be) && wg > be->caps.max_wg) wg /= 2;
  return wg;
}

const char* codec_source(const sl_kvcodec_api* api, const sl_kvcodec* codec) {
  if (!api || api->struct_size < offsetof(sl_kvcodec_api, opencl_source) + sizeof(void*) || !api->opencl_source) return nullptr;
  return api->opencl_source(codec);
}

// The fused device functions (docs/PLUGINS.md) a codec's source may define, by role.
bool source_has(const char* source, std::initializer_list<const char*> names) {
  if (!source) return false;
  for (const char* n : names)
    if (!std::strstr(source, n)) return false;
  return true;
}
bool has_fused_keys(const char* source) { return source_has(source, {"SL_KV_FN(fused_prepare_query)", "SL_KV_FN(fused_score)"}); }
bool has_fused_values(const char* source) {
  return source_has(source, {"SL_KV_FN(fused_prepare_values)", "SL_KV_FN(fused_value)", "SL_KV_FN(fused_finish)"});
}
bool has_group_encode(const char* source) { return source_has(source, {"SL_KV_FN(encode_row_group)"}); }
bool has_group_decode(const char* source) { return source_has(source, {"SL_KV_FN(decode_rows_group)"}); }

// The V codec's accumulator slots in the fused kernel (domain_dim / head_dim; 1 = one domain).
uint32_t v_slots(const sl_kv_cache::Geometry& g) { return g.v_fused ? g.shape.v_format.domain_dim / g.shape.v_dim : 1; }

// Query heads per fused work-group: the largest divisor of the group whose local memory fits
// (per head: the query area, the value accumulators, the original query, p and red; per group: the
// value rows' offsets and the V codec's tables).
// wg: the fused kernel's work-group.
uint32_t fused_heads_per_group(const sl_backend* be, const sl_kv_cache::Geometry& g, uint32_t group, uint64_t wg) {
  const uint64_t k_area = k_query_area(g), v_area = v_acc_area(g);
  const uint64_t budget = be->caps.local_mem ? be->caps.local_mem * 7 / 8 : 32768;
  for (uint32_t hpw = group; hpw >= 1; --hpw) {
    if (group % hpw) continue;
    const uint64_t bytes = 4 * (hpw * (k_area + v_area + g.shape.k_dim + 2 * wg) + 2 * wg + 64);
    if (bytes <= budget) return hpw;
  }
  return 0;
}

}  // namespace

uint32_t attention_wg(const sl_backend* be) { return be->tuning.att_wg; }

int32_t short_passes_max_keys(const sl_backend* be) {
  const int32_t limit = static_cast<int32_t>(be->tuning.att_short);  // at most INT32_MAX (cl_tuning.cpp)
  return be->options.find("generic-attention") != std::string::npos ? 0 : limit;
}

uint64_t k_query_area(const sl_kv_cache::Geometry& g) {
  return g.k_fused ? g.shape.k_format.domain_dim + g.shape.k_format.domain_dim / g.shape.k_dim + 64 : 1;
}

uint64_t v_acc_area(const sl_kv_cache::Geometry& g) {
  if (!g.v_fused || (g.k_fused && v_slots(g) == 1)) return 1;
  return g.shape.v_format.domain_dim;
}

bool keeps_recent(const sl_backend* be, const sl_kv_cache* c) { return c->layout.recent_window > 0 && !be->recent_table.empty(); }

const std::vector<int32_t>& table_of(const sl_backend* be, const sl_kv_cache* c, uint32_t layer) {
  return c->layers[layer].kind == SL_KV_WINDOW ? be->window_table : be->page_table;
}
const cl::Buffer& device_table_of(const sl_backend* be, const sl_kv_cache* c, uint32_t layer) {
  return c->layers[layer].kind == SL_KV_WINDOW ? be->d_window_table : be->d_page_table;
}

sl_status check_pages(const sl_backend* be, const sl_kv_cache* c, uint32_t layer, sl_error* err) {
  return check_batch_pages(be->positions, be->seq_slots, table_of(be, c, layer), be->recent_table, be->max_pages, c->layout,
                           c->layers[layer], keeps_recent(be, c), err);
}

bool runs_layer(const sl_kv_cache* c, uint32_t layer) { return layer < c->layers.size() && c->layers[layer].has_kv(); }

sl_kv_cache::Kernels& cache_kernels(sl_backend* be, sl_kv_cache::Geometry& geo, uint32_t group) {
  auto it = geo.kernels.find(group);
  if (it != geo.kernels.end()) return it->second;
  const KvGeometry& G = geo.shape;
  const char* k_source = codec_source(G.k_api, G.k_codec);
  const char* v_source = codec_source(G.v_api, G.v_codec);
  std::string source = kernel_source("common") + kernel_source("warp");  // warp: the output's 15-bit form (att_write)
  source += "\n#define SL_KV_FN(name) sl_k_##name\n";
  source += k_source;
  source += "\n#undef SL_KV_FN\n#define SL_KV_FN(name) sl_v_##name\n";
  source += v_source;
  source += "\n#undef SL_KV_FN\n";
  // rope: kv_write_rope's rotation, the rope kernel's own; then attention and, for the layout's
  // widths, the fused and short kernels (geometry_kernel_files).
  for (const std::string& file : geometry_kernel_files(G)) source += kernel_source(file.c_str());
  const bool query_parts = source_has(k_source, {"SL_KV_FN(fused_prepare_queries_part)"});
  // A program with the fused kernel may take a work-group of its own (tuning att_wg_fused).
  uint32_t hpw = 0, wg = attention_wg(be);
  if (geo.k_fused || geo.v_fused) {
    wg = fused_program_wg(wg, be->tuning.att_wg_fused, static_cast<uint32_t>(be->caps.max_wg),
                          [&](uint32_t w) { return fused_heads_per_group(be, geo, group, w); });
    hpw = fused_heads_per_group(be, geo, group, wg);
  }
  const uint32_t wide_wg = wide_group_size(be);
  const std::string options = "-cl-std=CL1.2 -DHEAD_DIM=" + std::to_string(G.k_dim) + geometry_options(G) + " -DGROUP=" + std::to_string(group) +
                              " -DWG=" + std::to_string(wg) + " -DK_FUSED=" + std::to_string(hpw && geo.k_fused) +
                              " -DV_FUSED=" + std::to_string(hpw && geo.v_fused) + " -DHPW=" + std::to_string(std::max(hpw, 1u)) +
                              " -DV_SLOTS=" + std::to_string(v_slots(geo)) +
                              " -DK_ENCODE_GROUP=" + std::to_string(has_group_encode(k_source)) +
                              " -DV_ENCODE_GROUP=" + std::to_string(has_group_encode(v_source)) +
                              " -DK_DECODE_GROUP=" + std::to_string(has_group_decode(k_source)) +
                              " -DV_DECODE_GROUP=" + std::to_string(has_group_decode(v_source)) +
                              " -DWIDE_WG=" + std::to_string(wide_wg) + value_unroll_option(be) +
                              " -DK_HEADS=" + std::to_string(source_has(k_source, {"SL_KV_FN(fused_prepare_queries)", "SL_KV_FN(fused_score_heads)"})) +
                              " -DV_FINISH_HEADS=" + std::to_string(source_has(v_source, {"SL_KV_FN(fused_finish_heads)"})) +
                              " -DV_VALUES8=" + std::to_string(source_has(v_source, {"SL_KV_FN(fused_values8)"})) +
                              " -DK_QUERY_PARTS=" + std::to_string(query_parts) +
                              key_scoring_options(be) + nv_register_cap(be, be->tuning.maxrreg_att);
  // On NVIDIA the key scoring's teams sum with warp shuffles (inline PTX); a program that fails to
  // build with them is reported once and built with the local-memory sums instead.
  cl::Program program;
  bool built = false;
  if (be->use_ptx) {
    try {
      program = build_program(be, source, options + " -DSLUICE_PTX_SHFL");
      built = true;
    } catch (const std::exception& e) {
      static bool reported = false;
      if (!reported) std::fprintf(stderr, "opencl: attention without warp shuffles: %s\n", e.what());
      reported = true;
    }
  }
  if (!built) program = build_program(be, source, options);
  sl_kv_cache::Kernels k{cl::Kernel(program, "kv_write"),
                         cl::Kernel(program, "attention"),
                         cl::Kernel(program, "attention_merge"),
                         hpw ? cl::Kernel(program, "attention_fused") : cl::Kernel(),
                         hpw && geo.k_fused ? cl::Kernel(program, "attention_fused_queries") : cl::Kernel(),
                         hpw,
                         wide_wg,
                         cl::Kernel(program, "kv_gather_f16"),
                         cl::Kernel(program, "kv_write_rope"),
                         built,  // ptx: set above only by the build with SLUICE_PTX_SHFL
                         // attention_short exists where the program has warp exchanges and the shape fits (attention_short.cl).
                         program_has_kernel(program, "attention_short") ? cl::Kernel(program, "attention_short") : cl::Kernel(),
                         // attention_short_join encodes in a branch of one key split, where a barrier of the
                         // codec's encoder would be one under a work-group-uniform if: PoCL miscompiles those.
                         program_has_kernel(program, "attention_short_join") && !source_has(k_source, {"barrier("}) &&
                                 !source_has(v_source, {"barrier("})
                             ? cl::Kernel(program, "attention_short_join")
                             : cl::Kernel(),
                         program_has_kernel(program, "kv_gather_f16_rows") ? cl::Kernel(program, "kv_gather_f16_rows") : cl::Kernel(),
                         cl::Kernel(program, "attention_recent_partial"),
                         wg,
                         query_parts};
  return geo.kernels.emplace(group, std::move(k)).first->second;
}

std::byte* host_k_row(sl_kv_cache* c, uint32_t layer, uint32_t page, uint32_t head, uint32_t slot) {
  const KvLayerShape& Ly = c->layers[layer];
  return c->host_layers[layer].data() + page * Ly.page_bytes +
         (static_cast<uint64_t>(head) * c->layout.page_tokens + slot) * Ly.k_format.row_bytes;
}
std::byte* host_v_row(sl_kv_cache* c, uint32_t layer, uint32_t page, uint32_t head, uint32_t slot) {
  const KvLayerShape& Ly = c->layers[layer];
  const uint64_t pt = c->layout.page_tokens;
  return c->host_layers[layer].data() + page * Ly.page_bytes + uint64_t(Ly.n_kv_heads) * pt * Ly.k_format.row_bytes +
         (static_cast<uint64_t>(head) * pt + slot) * Ly.v_format.row_bytes;
}
uint16_t* host_recent_row(sl_kv_cache* c, uint32_t layer, int32_t rpage, int kv, uint32_t head, uint32_t slot) {
  const KvLayerShape& Ly = c->layers[layer];
  const std::size_t pt = c->layout.page_tokens, row = head * pt + slot;
  uint16_t* page = c->host_recent[layer].data() + static_cast<std::size_t>(rpage) * Ly.recent_values;
  return kv == 0 ? page + row * Ly.k_dim : page + std::size_t(Ly.n_kv_heads) * pt * Ly.k_dim + row * Ly.v_dim;
}

void set_layer_args(cl::Kernel& kn, cl_uint first, const sl_kv_cache* c, uint32_t layer) {
  const KvLayerShape& Ly = c->layers[layer];
  kn.setArg(first, c->device_layers[layer]);
  kn.setArg(first + 1, static_cast<cl_ulong>(Ly.page_bytes));
  kn.setArg(first + 2, static_cast<cl_uint>(c->layout.page_tokens));
  kn.setArg(first + 3, static_cast<cl_uint>(Ly.n_kv_heads));
  kn.setArg(first + 4, static_cast<cl_uint>(Ly.k_format.row_bytes));
  kn.setArg(first + 5, static_cast<cl_uint>(Ly.v_format.row_bytes));
}

void set_page_args(cl::Kernel& kn, const sl_backend* be, const sl_kv_cache* c, uint32_t layer) {
  set_layer_args(kn, 2, c, layer);
  kn.setArg(8, be->d_positions);
  kn.setArg(9, be->d_seq_slots);
  kn.setArg(10, device_table_of(be, c, layer));
  kn.setArg(11, static_cast<cl_uint>(be->max_pages));
}

bool codec_has_opencl(const sl_kvcodec_api* api, const sl_kvcodec* codec) { return codec_source(api, codec) != nullptr; }

sl_status kv_create(sl_backend* be, const sl_kv_layout* layout, sl_kv_cache** out, sl_error* err) {
  KvShape shape;
  if (auto s = read_kv_layout(layout, shape, err); s != SL_OK) return s;
  if (shape.page_bytes == 0)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_create: the OpenCL backend needs the layout's own geometry and codecs (its kernels' shape)");
  return guarded(err, "kv_create", [&] {
    auto c = std::make_unique<sl_kv_cache>();
    c->layout = shape.layout;
    KvGeometries geometries = kv_geometries(shape);
    for (KvGeometry& g : geometries.list) c->geometries.push_back({g, false, false, {}});
    c->geometry_of = std::move(geometries.of_layer);
    c->layers = std::move(shape.layers);
    const auto& L = c->layout;
    // Each layer's pages (and recent pages) in its own widths: the layout's geometry for a uniform model, as always.
    uint64_t largest = 0;
    for (const KvLayerShape& l : c->layers)
      largest = std::max({largest, l.has_kv() ? l.bytes() : l.state_bytes * L.n_state_slots, l.recent_values * 2 * L.n_recent_pages});
    const bool allow_device = be->options.find("host-kv") == std::string::npos;
    c->on_device = allow_device && largest <= be->caps.max_alloc;
    for (const auto& g : c->geometries)
      c->on_device = c->on_device && codec_has_opencl(g.shape.k_api, g.shape.k_codec) && codec_has_opencl(g.shape.v_api, g.shape.v_codec);
    // The fused path unless the options ask for the generic kernel (tests compare the two), for the
    // layout's widths (cl_kv_geometry.h).
    const bool allow_fused = be->options.find("generic-attention") == std::string::npos && be->tuning.fused_attention;
    for (auto& g : c->geometries) {
      g.k_fused = allow_fused && g.shape.fast_paths && has_fused_keys(codec_source(g.shape.k_api, g.shape.k_codec));
      g.v_fused = allow_fused && g.shape.fast_paths && has_fused_values(codec_source(g.shape.v_api, g.shape.v_codec));
    }
    if (c->on_device) {
      // The codecs' device functions must follow docs/PLUGINS.md (SL_KV_FN(encode_row), SL_KV_FN(load)):
      // source that does not build with ours sends this cache to the host path instead of failing later.
      try {
        for (auto& g : c->geometries) cache_kernels(be, g, 1);
      } catch (const std::exception& e) {
        c->on_device = false;
        for (auto& g : c->geometries) g.kernels.clear();
        c->fallback_reason = e.what();
        std::fprintf(stderr, "opencl: the KV cache stays on the host (slow): %s\n", e.what());
      }
    }
    auto zeroed = [&](uint64_t bytes) {
      cl::Buffer b(be->context, CL_MEM_READ_WRITE, std::max<uint64_t>(bytes, 4));
      const cl_uchar zero = 0;
      be->queue.enqueueFillBuffer(b, zero, 0, std::max<uint64_t>(bytes, 4));
      return b;
    };
    for (const KvLayerShape& l : c->layers) {
      const uint64_t recent_values = L.recent_window && l.has_kv() ? l.recent_values * L.n_recent_pages : 0;
      if (c->on_device) {
        c->device_layers.push_back(zeroed(l.has_kv() ? l.bytes() : 0));
        if (L.recent_window) c->recent_layers.emplace_back(be->context, CL_MEM_READ_WRITE, std::max<uint64_t>(recent_values * 2, 4));
      } else {
        c->host_layers.emplace_back(l.has_kv() ? l.bytes() : 0);
        c->host_recent.emplace_back(recent_values);
      }
      c->state_layers.push_back(l.kind == SL_KV_STATE ? zeroed(l.state_bytes * L.n_state_slots) : cl::Buffer());
    }
    be->queue.finish();  // out of device memory shows here
    *out = c.release();
    return SL_OK;
  });
}

void kv_destroy(sl_backend* be, sl_kv_cache* cache) {
  if (!cache) return;
  try {
    be->queue.finish();
  } catch (...) {
  }
  delete cache;
}

sl_status kv_copy_page(sl_backend* be, sl_kv_cache* c, uint32_t src, uint32_t dst, sl_error* err) {
  if (src >= c->layout.n_pages || dst >= c->layout.n_pages)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_copy_page: page out of range");
  if (src == dst) return SL_OK;
  return guarded(err, "kv_copy_page", [&] {
    for (uint32_t l = 0; l < c->layout.n_layers; ++l) {
      const KvLayerShape& Ly = c->layers[l];
      if (Ly.kind != SL_KV_FULL) continue;
      if (c->on_device)
        be->queue.enqueueCopyBuffer(c->device_layers[l], c->device_layers[l], src * Ly.page_bytes, dst * Ly.page_bytes, Ly.page_bytes);
      else
        std::memcpy(c->host_layers[l].data() + dst * Ly.page_bytes, c->host_layers[l].data() + src * Ly.page_bytes, Ly.page_bytes);
    }
    return SL_OK;
  });
}

sl_status kv_copy_state(sl_backend* be, sl_kv_cache* c, uint32_t src, uint32_t dst, sl_error* err) {
  if (src >= c->layout.n_state_slots || dst >= c->layout.n_state_slots)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_copy_state: slot out of range");
  bool any = false;
  for (const KvLayerShape& l : c->layers) any |= l.kind == SL_KV_STATE;
  if (!any) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_copy_state: the cache has no recurrent layer");
  if (src == dst) return SL_OK;
  return guarded(err, "kv_copy_state", [&] {
    for (uint32_t l = 0; l < c->layout.n_layers; ++l) {
      const KvLayerShape& Ly = c->layers[l];
      if (Ly.kind == SL_KV_STATE)
        be->queue.enqueueCopyBuffer(c->state_layers[l], c->state_layers[l], src * Ly.state_bytes, dst * Ly.state_bytes, Ly.state_bytes);
    }
    return SL_OK;
  });
}

sl_status kv_clear_state(sl_backend* be, sl_kv_cache* c, uint32_t slot, sl_error* err) {
  if (slot >= c->layout.n_state_slots) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_clear_state: slot out of range");
  bool any = false;
  for (const KvLayerShape& l : c->layers) any |= l.kind == SL_KV_STATE;
  if (!any) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_clear_state: the cache has no recurrent layer");
  return guarded(err, "kv_clear_state", [&] {
    for (uint32_t l = 0; l < c->layout.n_layers; ++l) {
      const KvLayerShape& Ly = c->layers[l];
      const cl_uchar zero = 0;
      if (Ly.kind == SL_KV_STATE) be->queue.enqueueFillBuffer(c->state_layers[l], zero, slot * Ly.state_bytes, Ly.state_bytes);
    }
    return SL_OK;
  });
}

sl_status copy_state(sl_backend* be, sl_kv_cache* c, const sl_tensor* x, const sl_tensor* out, sl_error* err) {
  const sl_tensor* st = x->kind == SL_TENSOR_STATE ? x : out;
  const sl_tensor* act = x->kind == SL_TENSOR_STATE ? out : x;
  if (act->kind != SL_TENSOR_BUFFER) return set_error(err, SL_ERR_UNSUPPORTED, "copy: from one state to another (use kv_copy_state)");
  if (st->rows != be->n_seqs) return set_error(err, SL_ERR_INVALID_ARGUMENT, "copy: a state tensor has a row for each sequence of the step");
  if (st->state_layer >= c->layers.size() || c->layers[st->state_layer].kind != SL_KV_STATE)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "copy: layer " + std::to_string(st->state_layer) + " keeps no state");
  const KvLayerShape& Ly = c->layers[st->state_layer];
  const uint64_t row_bytes = uint64_t(st->cols) * 4;
  if (!fits(Ly.state_bytes, st->offset, row_bytes)) return set_error(err, SL_ERR_INVALID_ARGUMENT, "copy: the state tensor lies past the layer's state");
  if (auto s = check_state_slots(be->state_slots, be->n_seqs, c->layout, err); s != SL_OK) return s;
  return guarded(err, "copy (state)", [&] {
    cl::Buffer& state = c->state_layers[st->state_layer];
    cl::Buffer& buffer = single(act->buffer);
    for (uint32_t i = 0; i < st->rows; ++i) {
      const uint64_t at = uint64_t(be->state_slots[i]) * Ly.state_bytes + st->offset, row = act->offset + i * row_bytes;
      if (x->kind == SL_TENSOR_STATE)
        be->queue.enqueueCopyBuffer(state, buffer, at, row, row_bytes);
      else
        be->queue.enqueueCopyBuffer(buffer, state, row, at, row_bytes);
    }
    return SL_OK;
  });
}


namespace {

// kv_write's kernel on the device, kv_write_rope with the rope pair `rope` (null: kv_write): the
// program of the layer's geometry.
void launch_kv_write(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* k, const sl_buffer* v,
                     const RopeLaunch* rope) {
  const uint32_t n_tokens = static_cast<uint32_t>(be->positions.size());
  sl_kv_cache::Geometry& geo = c->geometry(layer);
  auto& ks = geo.kernels.empty() ? cache_kernels(be, geo, 1) : geo.kernels.begin()->second;
  auto& kn = rope ? ks.write_rope : ks.kv_write;
  kn.setArg(0, single(k));
  kn.setArg(1, single(v));
  set_page_args(kn, be, c, layer);
  kn.setArg(12, static_cast<cl_uint>(n_tokens));
  const bool recent = keeps_recent(be, c);
  kn.setArg(13, recent ? c->recent_layers[layer] : c->device_layers[layer]);  // unused when !recent
  kn.setArg(14, recent ? be->d_recent_table : be->d_page_table);
  kn.setArg(15, static_cast<cl_uint>(recent ? 1 : 0));
  if (rope) {
    kn.setArg(16, single(rope->x));
    kn.setArg(17, static_cast<cl_uint>(rope->n_heads));
    kn.setArg(18, rope->table);
    kn.setArg(19, static_cast<cl_uint>(rope->half));
    kn.setArg(20, static_cast<cl_uint>(rope->style));
  }
  launch(be, kn, cl::NDRange(size_t(ks.wide_wg) * n_tokens * c->layers[layer].n_kv_heads), cl::NDRange(ks.wide_wg));
}

}  // namespace

sl_status kv_write(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* k, const sl_buffer* v, const RopeLaunch* rope,
                   sl_error* err) {
  if (layer >= c->layout.n_layers) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_write: layer out of range");
  const KvLayerShape& Ly = c->layers[layer];
  if (!Ly.has_kv()) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_write: layer " + std::to_string(layer) + " keeps no K/V");
  if (auto s = check_pages(be, c, layer, err); s != SL_OK) return s;
  const uint32_t n_tokens = static_cast<uint32_t>(be->positions.size());
  const uint64_t k_floats = uint64_t(n_tokens) * Ly.n_kv_heads * Ly.k_dim, v_floats = uint64_t(n_tokens) * Ly.n_kv_heads * Ly.v_dim;
  if (k->bytes < k_floats * 4 || v->bytes < v_floats * 4) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_write: K/V buffers too small");
  return guarded(err, "kv_write", [&] {
    // The rope pair of q and k runs in this launch where k is its second tensor with the layer's
    // head shape and the cache is on the device; otherwise first, on its own.
    const bool has_rope = rope && rope->x;
    const bool joined = has_rope && c->on_device && rope_pair_fits(*rope, k, v, Ly.n_kv_heads, Ly.k_dim);
    if (has_rope && !joined) launch_rope(be, *rope);
    if (c->on_device) {
      launch_kv_write(be, c, layer, k, v, joined ? rope : nullptr);
      return SL_OK;
    }
    std::vector<float> kh(k_floats), vh(v_floats);
    be->queue.enqueueReadBuffer(single(k), CL_TRUE, 0, k_floats * 4, kh.data());
    be->queue.enqueueReadBuffer(single(v), CL_TRUE, 0, v_floats * 4, vh.data());
    const std::vector<int32_t>& table = table_of(be, c, layer);
    const uint32_t pt = c->layout.page_tokens;
    for (uint32_t t = 0; t < n_tokens; ++t) {
      const uint32_t pos = static_cast<uint32_t>(be->positions[t]);
      const std::size_t entry = static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages + pos / pt;
      const uint32_t page = static_cast<uint32_t>(table[entry]), slot = pos % pt;
      for (uint32_t h = 0; h < Ly.n_kv_heads; ++h) {
        const float* ks = kh.data() + (std::size_t(t) * Ly.n_kv_heads + h) * Ly.k_dim;
        const float* vs = vh.data() + (std::size_t(t) * Ly.n_kv_heads + h) * Ly.v_dim;
        if (auto s = Ly.k_api->encode(Ly.k_codec, ks, 1, host_k_row(c, layer, page, h, slot), err); s != SL_OK) return s;
        if (auto s = Ly.v_api->encode(Ly.v_codec, vs, 1, host_v_row(c, layer, page, h, slot), err); s != SL_OK) return s;
      }
      const int32_t rpage = keeps_recent(be, c) ? be->recent_table[entry] : -1;
      for (uint32_t h = 0; rpage >= 0 && h < Ly.n_kv_heads; ++h) {
        const float* ks = kh.data() + (std::size_t(t) * Ly.n_kv_heads + h) * Ly.k_dim;
        const float* vs = vh.data() + (std::size_t(t) * Ly.n_kv_heads + h) * Ly.v_dim;
        uint16_t* kd = host_recent_row(c, layer, rpage, 0, h, slot);
        uint16_t* vd = host_recent_row(c, layer, rpage, 1, h, slot);
        for (uint32_t d = 0; d < Ly.k_dim; ++d) kd[d] = sluice::cpu::f32_to_f16(ks[d]);
        for (uint32_t d = 0; d < Ly.v_dim; ++d) vd[d] = sluice::cpu::f32_to_f16(vs[d]);
      }
    }
    return SL_OK;
  });
}

}  // namespace sluice::ocl
