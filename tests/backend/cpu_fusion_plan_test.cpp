// The CPU backend's fusion pass (backends/cpu/cpu_fusion.h) without a device: graphs in, the launches
// it plans out. Only neighbours join, and only when no output overlaps what the run still reads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../backends/cpu/cpu_fusion.h"
#include "fusion_plan_support.h"
#include "graph/step_graph.h"
#include "model/families/llama.h"
#include "model/families/qwen3_5.h"

namespace sluice::cpu {
namespace {

using test::fake_buffer;
using test::f32_weight;

std::string text(const std::vector<Launch>& plan) {
  std::string out;
  for (const Launch& l : plan) {
    out += out.empty() ? "" : " ";
    out += l.kind == LaunchKind::kNode ? "1" : l.kind == LaunchKind::kProducts ? "M" + std::to_string(l.count) : "AN";
  }
  return out;
}

TEST(CpuFusionPlan, ProductsOfOneInputJoinUpToFour) {
  StepGraph g;
  const auto x = g.buffer(fake_buffer(0), 2, 16);
  const sl_weight w = f32_weight(8, 16);
  for (int i = 0; i < 5; ++i) g.matmul(x, g.weight(w), StepGraph::kNone, g.buffer(fake_buffer(1 + i), 2, 8), "p");
  EXPECT_EQ(text(plan_launches(g.view())), "M4 1");
}

TEST(CpuFusionPlan, ProductsOfDifferentInputsOrOverlappingOutputsRunAlone) {
  const sl_weight w = f32_weight(8, 16);
  {
    StepGraph g;
    g.matmul(g.buffer(fake_buffer(0), 2, 16), g.weight(w), StepGraph::kNone, g.buffer(fake_buffer(1), 2, 8), "a");
    g.matmul(g.buffer(fake_buffer(2), 2, 16), g.weight(w), StepGraph::kNone, g.buffer(fake_buffer(3), 2, 8), "b");
    EXPECT_EQ(text(plan_launches(g.view())), "1 1") << "two inputs";
  }
  {
    StepGraph g;
    const auto x = g.buffer(fake_buffer(0), 2, 16);
    g.matmul(x, g.weight(w), StepGraph::kNone, g.buffer(fake_buffer(1), 2, 8), "a");
    g.matmul(x, g.weight(w), StepGraph::kNone, g.buffer(fake_buffer(1), 2, 8), "b");
    EXPECT_EQ(text(plan_launches(g.view())), "1 1") << "both write one tensor: the second must win, in order";
  }
  {
    StepGraph g;
    const auto x = g.buffer(fake_buffer(0), 2, 16);
    g.matmul(x, g.weight(w), StepGraph::kNone, g.buffer(fake_buffer(1), 2, 8), "a");
    g.matmul(x, g.weight(w), StepGraph::kNone, g.buffer(fake_buffer(0), 2, 8, SL_DTYPE_F32, 16), "b");
    EXPECT_EQ(text(plan_launches(g.view())), "1 1") << "the second writes into its own input";
  }
}

TEST(CpuFusionPlan, AddInPlaceThenNormOfTheSumJoins) {
  const sl_weight norm = f32_weight(1, 16);
  {
    StepGraph g;
    const auto x = g.buffer(fake_buffer(0), 2, 16), o = g.buffer(fake_buffer(1), 2, 16), h = g.buffer(fake_buffer(2), 2, 16);
    g.add(x, o, x, "residual");
    g.rms_norm(x, g.weight(norm), 1e-6f, 0.0f, h, "norm");
    EXPECT_EQ(text(plan_launches(g.view())), "AN");
  }
  {
    StepGraph g;  // the sum into a third tensor: the norm may not read x in place
    const auto x = g.buffer(fake_buffer(0), 2, 16), o = g.buffer(fake_buffer(1), 2, 16), s = g.buffer(fake_buffer(3), 2, 16);
    g.add(x, o, s, "sum");
    g.rms_norm(s, g.weight(norm), 1e-6f, 0.0f, g.buffer(fake_buffer(2), 2, 16), "norm");
    EXPECT_EQ(text(plan_launches(g.view())), "1 1");
  }
  {
    StepGraph g;  // a norm of something else
    const auto x = g.buffer(fake_buffer(0), 2, 16), o = g.buffer(fake_buffer(1), 2, 16);
    g.add(x, o, x, "residual");
    g.rms_norm(o, g.weight(norm), 1e-6f, 0.0f, g.buffer(fake_buffer(2), 2, 16), "norm");
    EXPECT_EQ(text(plan_launches(g.view())), "1 1");
  }
  {
    StepGraph g;  // the norm writes over the delta it was given
    const auto x = g.buffer(fake_buffer(0), 2, 16), o = g.buffer(fake_buffer(1), 2, 16);
    g.add(x, o, x, "residual");
    g.rms_norm(x, g.weight(norm), 1e-6f, 0.0f, o, "norm");
    EXPECT_EQ(text(plan_launches(g.view())), "1 1");
  }
}

// Two llama-family layers as the builder writes them: the residual add joins the next norm, q/k/v
// and gate/up are joined products.
TEST(CpuFusionPlan, LlamaLayersJoinTheirProductsAndResidualNorms) {
  ModelConfig c;
  c.hidden_size = 16;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 8;
  c.intermediate_size = 32;
  c.norm_eps = 1e-6f;
  LayerWeights w;
  w.attn_norm = w.ffn_norm = f32_weight(1, 16);
  w.q = f32_weight(16, 16);
  w.k = w.v = f32_weight(8, 16);
  w.o = f32_weight(16, 16);
  w.gate = w.up = f32_weight(32, 16);
  w.down = f32_weight(16, 32);
  StepGraph g;
  blocks::Activations a;
  const uint32_t n = 3;
  a.x = g.buffer(fake_buffer(0), n, 16);
  a.h = g.buffer(fake_buffer(1), n, 16);
  a.q = g.buffer(fake_buffer(2), n, 16);
  a.k = g.buffer(fake_buffer(3), n, 8);
  a.v = g.buffer(fake_buffer(4), n, 8);
  a.q_heads = g.buffer(fake_buffer(2), n * 2, 8);
  a.k_heads = g.buffer(fake_buffer(3), n, 8);
  a.attn = g.buffer(fake_buffer(5), n, 16);
  a.o = g.buffer(fake_buffer(6), n, 16);
  a.gate = g.buffer(fake_buffer(7), n, 32);
  a.up = g.buffer(fake_buffer(8), n, 32);
  a.act = g.buffer(fake_buffer(9), n, 32);
  const float inv_freq[4] = {1, 1, 1, 1};
  families::LayerContext ctx;
  ctx.config = &c;
  ctx.act = &a;
  ctx.rope.rotary_dim = 8;
  ctx.rope.inv_freq = inv_freq;
  ctx.rope.attention_factor = 1.0f;
  for (uint32_t layer = 0; layer < 2; ++layer) {
    ctx.cache_layer = layer;
    const families::Llama family;
    family.before_ffn(g, ctx, w);
    family.dense_ffn(g, ctx, w);
    family.after_ffn(g, ctx, w);
  }
  // attn_norm, q/k/v, rope q, rope k, kv_write, attention, o, residual+ffn_norm, gate/up, glu, down;
  // the second layer's attn_norm joins the first one's last residual add.
  EXPECT_EQ(text(plan_launches(g.view())), "1 M3 1 1 1 1 1 AN M2 1 1 AN M3 1 1 1 1 1 AN M2 1 1 1");
}

// A Qwen3.5 Gated DeltaNet layer then a gated full-attention layer: the four products of the linear
// layer's input join, and so do the full layer's q-and-gate, k and v products (before the GET_ROWS
// that part queries from gates); the residual adds join the next norms.
TEST(CpuFusionPlan, Qwen3_5LayersJoinTheirProductsAndResidualNorms) {
  ModelConfig c;
  c.architecture = "qwen3_5_text";
  c.hidden_size = 16;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 8;
  c.intermediate_size = 32;
  c.norm_eps = 1e-6f;
  c.norm_weight_offset = 1.0f;
  c.attention_output_gate = true;
  c.linear = {4, 1, 2, 8, 4};  // 4 taps, 1 key head, 2 value heads of 8 / 4
  const uint32_t CD = static_cast<uint32_t>(c.linear.conv_dim());
  LayerWeights lin, full;
  for (LayerWeights* w : {&lin, &full}) {
    w->attn_norm = w->ffn_norm = f32_weight(1, 16);
    w->gate = w->up = f32_weight(32, 16);
    w->down = f32_weight(16, 32);
  }
  lin.linear = true;
  lin.lin_qkv = f32_weight(CD, 16);
  lin.lin_z = f32_weight(8, 16);
  lin.lin_a = lin.lin_b = f32_weight(2, 16);
  lin.lin_dt_bias = lin.lin_a_log = f32_weight(1, 2);
  lin.lin_conv = f32_weight(CD, 4);
  lin.lin_norm = f32_weight(1, 4);
  lin.lin_out = f32_weight(16, 8);
  full.q = f32_weight(32, 16);
  full.k = full.v = f32_weight(8, 16);
  full.o = f32_weight(16, 16);
  full.q_norm = full.k_norm = f32_weight(1, 8);
  full.has_qk_norm = true;
  StepGraph g;
  blocks::Activations a;
  const uint32_t n = 3;
  a.x = g.buffer(fake_buffer(0), n, 16);
  a.h = g.buffer(fake_buffer(1), n, 16);
  a.q = g.buffer(fake_buffer(2), n, 16);
  a.k = g.buffer(fake_buffer(3), n, 8);
  a.v = g.buffer(fake_buffer(4), n, 8);
  a.q_heads = g.buffer(fake_buffer(2), n * 2, 8);
  a.k_heads = g.buffer(fake_buffer(3), n, 8);
  a.attn = g.buffer(fake_buffer(5), n, 16);
  a.o = g.buffer(fake_buffer(6), n, 16);
  a.gate = g.buffer(fake_buffer(7), n, 32);
  a.up = g.buffer(fake_buffer(8), n, 32);
  a.act = g.buffer(fake_buffer(9), n, 32);
  a.q_gate = g.buffer(fake_buffer(10), n, 32);
  a.q_gate_rows = g.buffer(fake_buffer(10), n * 4, 8);
  a.attn_gate = g.buffer(fake_buffer(11), n, 16);
  a.attn_gate_heads = g.buffer(fake_buffer(11), n * 2, 8);
  a.lin_qkv = g.buffer(fake_buffer(12), n, CD);
  a.lin_conv = g.buffer(fake_buffer(13), n, CD);
  a.lin_z = g.buffer(fake_buffer(14), n, 8);
  a.lin_a = g.buffer(fake_buffer(15), n, 2);
  a.lin_b = g.buffer(fake_buffer(16), n, 2);
  a.lin_core = g.buffer(fake_buffer(17), n, 8);
  a.lin_core_heads = g.buffer(fake_buffer(17), n * 2, 4);
  const float inv_freq[1] = {1};
  families::LayerContext ctx;
  ctx.config = &c;
  ctx.act = &a;
  ctx.rope.rotary_dim = 2;
  ctx.rope.inv_freq = inv_freq;
  ctx.rope.attention_factor = 1.0f;
  const families::Qwen3_5 family;
  for (const LayerWeights* w : {&lin, &full}) {
    ctx.cache_layer = w == &lin ? 0 : 1;
    family.before_ffn(g, ctx, *w);
    family.dense_ffn(g, ctx, *w);
    family.after_ffn(g, ctx, *w);
  }
  // Linear: attn_norm, the 4 products, conv, delta, gated norm, norm gate, out_proj, residual+ffn_norm,
  // gate/up, glu, down. Full: residual+attn_norm, q-and-gate/k/v, 2 get_rows, q/k norms, 2 ropes,
  // kv_write, attention, output gate, o, residual+ffn_norm, gate/up, glu, down, residual.
  EXPECT_EQ(text(plan_launches(g.view())), "1 M4 1 1 1 1 1 AN M2 1 1 AN M3 1 1 1 1 1 1 1 1 1 1 AN M2 1 1 1");
}

}  // namespace
}  // namespace sluice::cpu
