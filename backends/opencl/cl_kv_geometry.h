#pragma once
// Which attention program runs each layer of an OpenCL KV cache (header-only, no OpenCL in it: the
// choices are tested without a device, tests/opencl/cl_kv_geometry_test.cpp).
//
// The kv_write and attention kernels are built with a layer's widths as constants (HEAD_DIM for
// queries and keys, V_DIM for values and outputs) and its codecs' source pasted in, so the layers
// are grouped by (K width, V width, codecs) — a geometry — and each geometry has its own programs
// (one per query heads per KV head). Geometry 0 is the layout's own: every layer of a uniform model,
// built from exactly the source and options it was built from before per-layer caches, with the
// fused, short and tensor-core paths where they apply. A layer whose K and V are as wide as each
// other takes those paths too, at its own width (Gemma 4's head_dim 512 beside 256: each kernel's
// own limits still decide — local memory for the fused one, head_dim ≤ 128 for the short and the
// tensor-core ones); a layer whose K is wider than its V (MLA) runs the generic kernels (kv_write,
// kv_write_rope, attention, attention_merge), which take any widths. Those read a compressed row
// element by element (SL_KV_FN(load)): for turbo, a sum over its rotation block per element —
// Gemma 4's full layers over turbo3 on them decoded at 8 tokens/s against 94 on f16 (perf/NOTES.md
// 2026-11-29). Whether a layer is FULL or WINDOW changes only the page table its kernels are given,
// not its program.
#include <cstdint>
#include <string>
#include <vector>

#include "util/kv_shape.h"

namespace sluice::ocl {

struct KvGeometry {
  const sl_kvcodec_api* k_api = nullptr;
  const sl_kvcodec* k_codec = nullptr;
  const sl_kvcodec_api* v_api = nullptr;
  const sl_kvcodec* v_codec = nullptr;
  sl_kv_format k_format{}, v_format{};
  uint32_t k_dim = 0, v_dim = 0;
  bool fast_paths = false;  // K as wide as V: fused, short and tensor-core attention may serve

  bool same_as(const KvLayerShape& l) const {
    return l.k_api == k_api && l.k_codec == k_codec && l.v_api == v_api && l.v_codec == v_codec && l.k_dim == k_dim && l.v_dim == v_dim;
  }
};

struct KvGeometries {
  std::vector<KvGeometry> list;      // [0]: the layout's own
  std::vector<uint32_t> of_layer;    // per layer: its geometry (a STATE layer: 0, never run)
};

// The geometries of a cache read by read_kv_layout (with the layout's own geometry: page_bytes != 0).
inline KvGeometries kv_geometries(const KvShape& shape) {
  const sl_kv_layout& L = shape.layout;
  KvGeometries g;
  KvGeometry own;
  own.k_api = L.k_api;
  own.k_codec = L.k_codec;
  own.v_api = L.v_api;
  own.v_codec = L.v_codec;
  own.k_format = shape.k_format;
  own.v_format = shape.v_format;
  own.k_dim = own.v_dim = L.head_dim;
  own.fast_paths = true;
  g.list.push_back(own);
  for (const KvLayerShape& l : shape.layers) {
    uint32_t at = 0;
    if (l.has_kv()) {
      while (at < g.list.size() && !g.list[at].same_as(l)) ++at;
      if (at == g.list.size()) {
        KvGeometry other;
        other.k_api = l.k_api;
        other.k_codec = l.k_codec;
        other.v_api = l.v_api;
        other.v_codec = l.v_codec;
        other.k_format = l.k_format;
        other.v_format = l.v_format;
        other.k_dim = l.k_dim;
        other.v_dim = l.v_dim;
        other.fast_paths = l.k_dim == l.v_dim;
        g.list.push_back(other);
      }
    }
    g.of_layer.push_back(at);
  }
  return g;
}

// The kernel files (kernels_cl/, after common, warp and the codecs' source) a geometry's program
// is built from: the fast paths' kernels only where they may serve.
inline std::vector<std::string> geometry_kernel_files(const KvGeometry& g) {
  if (g.fast_paths) return {"rope", "attention", "attention_fused", "attention_short"};
  return {"rope", "attention"};
}

// The build options a geometry adds to those every attention program takes: V_DIM where V is not
// as wide as K (none for the layout's own: its program is built as it always was).
inline std::string geometry_options(const KvGeometry& g) {
  return g.v_dim != g.k_dim ? " -DV_DIM=" + std::to_string(g.v_dim) : std::string();
}

// The attention work-group of a geometry's program with the fused kernel: the fused one (tuning
// att_wg_fused; 0 none) where the device allows it and the fused kernel keeps as many query heads a
// work-group at it as at the common one (heads_at(wg): the fused kernel's heads a work-group fitting
// local memory at wg, 0 none) — a wider group with fewer heads reads every key row more often — else
// the common one (att_wg).
template <class HeadsAt>
uint32_t fused_program_wg(uint32_t att_wg, uint32_t att_wg_fused, uint32_t max_wg, HeadsAt heads_at) {
  if (att_wg_fused == 0 || att_wg_fused == att_wg || att_wg_fused > max_wg) return att_wg;
  const uint32_t heads = heads_at(att_wg);
  return heads && heads_at(att_wg_fused) == heads ? att_wg_fused : att_wg;
}

}  // namespace sluice::ocl
