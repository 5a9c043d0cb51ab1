// Which program runs each layer of an OpenCL KV cache (backends/opencl/cl_kv_geometry.h), without a
// device: a uniform model's every layer takes the layout's own geometry, built from the same kernel
// files with no added option (the program, and so the kernels and launches, it always had); a
// sliding-window layer of the layout's widths shares it; layers of other widths get programs of their
// own — with the fast paths where K and V are as wide (a wider head_dim), on the generic kernels where
// K is wider than V (MLA), V_DIM set only there.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../../backends/opencl/cl_kv_geometry.h"
#include "plugin/builtin_codecs.h"

namespace sluice::ocl {
namespace {

using Files = std::vector<std::string>;
const Files kAllFiles = {"rope", "attention", "attention_fused", "attention_short"};
const Files kGenericFiles = {"rope", "attention"};

// A codec of the given width and role, destroyed with the test.
struct Codec {
  Codec(const sl_kvcodec_api* a, uint32_t dim, sl_kv_role role) : api(a) {
    sl_error err{};
    EXPECT_EQ(api->create(dim, role, "", &codec, &err), SL_OK) << err.message;
  }
  ~Codec() {
    if (codec) api->destroy(codec);
  }
  const sl_kvcodec_api* api;
  sl_kvcodec* codec = nullptr;
};

// A layout whose own geometry is 2 KV heads of 16 (f16), with the layers added.
struct Layout {
  Layout() : k16(builtin_f16_codec(), 16, SL_KV_KEYS), v16(builtin_f16_codec(), 16, SL_KV_VALUES) {
    layout.struct_size = sizeof(layout);
    layout.n_kv_heads = 2;
    layout.head_dim = 16;
    layout.page_tokens = 16;
    layout.n_pages = 4;
    layout.n_window_pages = 2;
    layout.n_state_slots = 2;
    layout.k_api = layout.v_api = builtin_f16_codec();
    layout.k_codec = k16.codec;
    layout.v_codec = v16.codec;
  }
  // A layer with the layout's codecs where its widths are the layout's, else codecs of its own.
  void attention(uint32_t kind, uint32_t heads, uint32_t k_dim, uint32_t v_dim, bool own_codecs = false) {
    sl_kv_layer l{};
    l.struct_size = sizeof(l);
    l.kind = kind;
    l.n_kv_heads = heads;
    l.k_head_dim = k_dim;
    l.v_head_dim = v_dim;
    l.window = kind == SL_KV_WINDOW ? 8 : 0;
    l.k_api = l.v_api = builtin_f16_codec();
    if (k_dim == 16 && v_dim == 16 && !own_codecs) {
      l.k_codec = k16.codec;
      l.v_codec = v16.codec;
    } else {
      l.k_codec = codecs.emplace_back(std::make_unique<Codec>(builtin_f16_codec(), k_dim, SL_KV_KEYS))->codec;
      l.v_codec = codecs.emplace_back(std::make_unique<Codec>(builtin_f16_codec(), v_dim, SL_KV_VALUES))->codec;
    }
    layers.push_back(l);
  }
  void state() {
    sl_kv_layer l{};
    l.struct_size = sizeof(l);
    l.kind = SL_KV_STATE;
    l.state_bytes = 64;
    layers.push_back(l);
  }
  KvGeometries read(bool per_layer = true) {
    layout.n_layers = per_layer ? static_cast<uint32_t>(layers.size()) : 3;
    layout.layers = per_layer ? layers.data() : nullptr;
    KvShape shape;
    sl_error err{};
    EXPECT_EQ(read_kv_layout(&layout, shape, &err), SL_OK) << err.message;
    return kv_geometries(shape);
  }
  sl_kv_layout layout{};
  Codec k16, v16;
  std::vector<std::unique_ptr<Codec>> codecs;
  std::vector<sl_kv_layer> layers;
};

TEST(ClKvGeometry, AUniformModelRunsOneGeometryBuiltAsItAlwaysWas) {
  for (const bool per_layer : {false, true}) {
    Layout l;
    for (int i = 0; i < 3; ++i) l.attention(SL_KV_FULL, 2, 16, 16);
    const KvGeometries g = l.read(per_layer);
    ASSERT_EQ(g.list.size(), 1u) << per_layer;
    EXPECT_EQ(g.of_layer, (std::vector<uint32_t>{0, 0, 0}));
    EXPECT_TRUE(g.list[0].fast_paths);
    EXPECT_EQ(g.list[0].k_dim, 16u);
    EXPECT_EQ(g.list[0].v_dim, 16u);
    EXPECT_EQ(geometry_kernel_files(g.list[0]), kAllFiles);
    EXPECT_EQ(geometry_options(g.list[0]), "");
  }
}

TEST(ClKvGeometry, WindowLayersOfTheLayoutsWidthsShareItsProgram) {
  Layout l;
  l.attention(SL_KV_WINDOW, 2, 16, 16);
  l.attention(SL_KV_FULL, 2, 16, 16);
  l.state();
  const KvGeometries g = l.read();
  ASSERT_EQ(g.list.size(), 1u);
  EXPECT_EQ(g.of_layer, (std::vector<uint32_t>{0, 0, 0}));
}

TEST(ClKvGeometry, LayersOfOtherWidthsGetProgramsOfTheirOwnGenericOnlyWhereKIsWiderThanV) {
  Layout l;
  l.attention(SL_KV_FULL, 2, 16, 16);
  l.attention(SL_KV_FULL, 1, 64, 64);   // Gemma 4's wider head beside the usual ones
  l.attention(SL_KV_WINDOW, 2, 24, 16); // MLA's K wider than V
  l.attention(SL_KV_FULL, 2, 16, 16);
  const KvGeometries g = l.read();
  ASSERT_EQ(g.list.size(), 3u);
  EXPECT_EQ(g.of_layer, (std::vector<uint32_t>{0, 1, 2, 0}));
  const KvGeometry& wide = g.list[1];
  // Its compressed rows read by the fused kernel, not element by element (cl_kv_geometry.h).
  EXPECT_TRUE(wide.fast_paths);
  EXPECT_EQ(wide.k_dim, 64u);
  EXPECT_EQ(wide.k_format.head_dim, 64u);
  EXPECT_EQ(geometry_kernel_files(wide), kAllFiles);
  EXPECT_EQ(geometry_options(wide), "");  // V as wide as K: HEAD_DIM alone
  const KvGeometry& mla = g.list[2];
  EXPECT_FALSE(mla.fast_paths);
  EXPECT_EQ(mla.k_dim, 24u);
  EXPECT_EQ(mla.v_dim, 16u);
  EXPECT_EQ(mla.v_format.head_dim, 16u);
  EXPECT_EQ(geometry_kernel_files(mla), kGenericFiles);
  EXPECT_EQ(geometry_options(mla), " -DV_DIM=16");
  // The layout's own is untouched by its neighbours.
  EXPECT_TRUE(g.list[0].fast_paths);
  EXPECT_EQ(geometry_kernel_files(g.list[0]), kAllFiles);
  EXPECT_EQ(geometry_options(g.list[0]), "");
}

TEST(ClKvGeometry, LayersOfOneShapeAndCodecsShareAGeometryOtherCodecsGetTheirOwn) {
  Layout l;
  l.attention(SL_KV_FULL, 1, 32, 32);
  l.layers.push_back(l.layers.back());  // the same widths and codecs (the engine's one codec per width)
  l.layers.back().kind = SL_KV_WINDOW;
  l.layers.back().window = 8;
  l.attention(SL_KV_FULL, 1, 32, 32);   // the same widths, codecs of its own
  l.attention(SL_KV_FULL, 2, 16, 16, /*own_codecs=*/true);
  const KvGeometries g = l.read();
  ASSERT_EQ(g.list.size(), 4u);
  EXPECT_EQ(g.of_layer, (std::vector<uint32_t>{1, 1, 2, 3}));
  EXPECT_TRUE(g.list[1].fast_paths);
  EXPECT_TRUE(g.list[2].fast_paths);
  // Codecs of its own at the layout's widths: a program of its own, with the fast paths.
  EXPECT_TRUE(g.list[3].fast_paths);
  EXPECT_EQ(geometry_kernel_files(g.list[3]), kAllFiles);
  EXPECT_EQ(geometry_options(g.list[3]), "");
}

}  // namespace
}  // namespace sluice::ocl

TEST(ClKvGeometry, TheFusedProgramTakesItsOwnWorkGroupOnlyWhereItKeepsItsHeads) {
  using sluice::ocl::fused_program_wg;
  // A 16-rotation turbo3 query area of 4 heads fits 48 KB at 64 and 128 work-items, not at 256.
  auto heads_at = [](uint32_t wg) { return wg <= 128 ? 4u : 2u; };
  EXPECT_EQ(fused_program_wg(64, 128, 1024, heads_at), 128u);
  EXPECT_EQ(fused_program_wg(64, 256, 1024, heads_at), 64u) << "fewer heads a work-group at 256";
  EXPECT_EQ(fused_program_wg(64, 0, 1024, heads_at), 64u) << "0: the common work-group";
  EXPECT_EQ(fused_program_wg(64, 128, 64, heads_at), 64u) << "beyond the device's largest work-group";
  EXPECT_EQ(fused_program_wg(128, 64, 1024, heads_at), 64u);
  EXPECT_EQ(fused_program_wg(64, 128, 1024, [](uint32_t) { return 0u; }), 64u) << "no fused kernel fits";
}
