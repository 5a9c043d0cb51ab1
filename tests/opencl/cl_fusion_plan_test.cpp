// The OpenCL backend's fusion pass (backends/opencl/cl_fusion.h) without a device: graphs in, the
// launches it plans out. Runs in CI on any machine; what each launch then does on a device (joined,
// or node by node where memory or the batch do not allow the join) is checked against the unjoined
// path by opencl_backend_ops_test (PoCL) and opencl_vendor_paths_test (NVIDIA).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../backends/opencl/cl_fusion.h"
#include "fusion_plan_support.h"
#include "graph/step_graph.h"
#include "model/families/llama.h"

namespace sluice::ocl {
namespace {

using test::fake_buffer;
using test::f32_weight;

sl_weight quantized(uint32_t rows, uint32_t cols, uint32_t bits = 4) {
  sl_weight w = f32_weight(rows, cols);
  w.dtype = SL_DTYPE_U32;
  w.bits = bits;
  w.group_size = 64;
  w.scale_dtype = SL_DTYPE_F16;
  return w;
}

std::string text(const std::vector<Launch>& plan) {
  std::string out;
  for (const Launch& l : plan) {
    out += out.empty() ? "" : " ";
    switch (l.kind) {
      case LaunchKind::kNode: out += "1"; break;
      case LaunchKind::kProducts: out += "M" + std::to_string(l.count); break;
      case LaunchKind::kAddNorm: out += "AN"; break;
      case LaunchKind::kRopePair: out += "RR"; break;
      case LaunchKind::kRopeKvWrite: out += "RRW"; break;
      case LaunchKind::kKvAttention: out += "WA"; break;
      case LaunchKind::kRopeKvAttention: out += "RRWA"; break;
      case LaunchKind::kGlu: out += "GLU"; break;
      case LaunchKind::kResidual: out += "RES"; break;
      case LaunchKind::kEmbedNorm: out += "EN"; break;
    }
    if (l.norm_step >= 0) out += "+n" + std::to_string(l.norm_step);
  }
  return out;
}

FusionOptions nvidia() {
  FusionOptions o;
  o.dp4a = true;
  return o;
}

// A llama-family model's decode (or prefill of n rows) as the host builds it: the embedding, two
// layers, the final norm, the head and the greedy argmax.
struct LlamaStep {
  ModelConfig c;
  LayerWeights w;
  sl_weight embed_table, final_norm, lm_head;
  std::vector<float> inv_freq = std::vector<float>(16, 1.0f);
  StepGraph g;

  explicit LlamaStep(uint32_t n, uint32_t bits = 4) {
    c.hidden_size = 64;
    c.num_heads = 2;
    c.num_kv_heads = 1;
    c.head_dim = 32;
    c.intermediate_size = 128;
    c.norm_eps = 1e-6f;
    w.attn_norm = w.ffn_norm = final_norm = f32_weight(1, 64);
    w.q = quantized(64, 64, bits);
    w.k = w.v = quantized(32, 64, bits);
    w.o = quantized(64, 64, bits);
    w.gate = w.up = quantized(128, 64, bits);
    w.down = quantized(64, 128, bits);
    embed_table = quantized(1000, 64, bits);
    lm_head = quantized(1024, 64, bits);
    blocks::Activations a;
    a.x = g.buffer(fake_buffer(0), n, 64);
    a.h = g.buffer(fake_buffer(1), n, 64);
    a.q = g.buffer(fake_buffer(2), n, 64);
    a.k = g.buffer(fake_buffer(3), n, 32);
    a.v = g.buffer(fake_buffer(4), n, 32);
    a.q_heads = g.buffer(fake_buffer(2), n * 2, 32);
    a.k_heads = g.buffer(fake_buffer(3), n, 32);
    a.attn = g.buffer(fake_buffer(5), n, 64);
    a.o = g.buffer(fake_buffer(6), n, 64);
    a.gate = g.buffer(fake_buffer(7), n, 128);
    a.up = g.buffer(fake_buffer(8), n, 128);
    a.act = g.buffer(fake_buffer(9), n, 128);
    g.embed(g.weight(embed_table), g.buffer(fake_buffer(10), 1, n, SL_DTYPE_I32), a.x);
    families::LayerContext ctx;
    ctx.config = &c;
    ctx.act = &a;
    ctx.rope.struct_size = sizeof(ctx.rope);
    ctx.rope.rotary_dim = 32;
    ctx.rope.inv_freq = inv_freq.data();
    ctx.rope.attention_factor = 1.0f;
    const families::Llama family;
    for (uint32_t layer = 0; layer < 2; ++layer) {
      ctx.cache_layer = layer;
      family.before_ffn(g, ctx, w);
      family.dense_ffn(g, ctx, w);
      family.after_ffn(g, ctx, w);
    }
    const auto normed = g.buffer(fake_buffer(11), n, 64), logits = g.buffer(fake_buffer(12), n, 1024);
    g.rms_norm(a.x, g.weight(final_norm), 1e-6f, 0.0f, normed, "final norm");
    g.matmul(normed, g.weight(lm_head), StepGraph::kNone, logits, "lm_head");
    g.argmax(logits, g.buffer(fake_buffer(13), 1, n, SL_DTYPE_I32), "argmax");
  }
};

// Decode on NVIDIA: the embedding with the first norm, q/k/v finishing it; rope, KV write and
// attention in one launch; the o projection with the residual add and the next norm, gate/up/GLU
// finishing that norm; down with the next residual and norm — five launches a layer; the head's
// product finishes the final norm.
TEST(ClFusionPlan, LlamaDecodeOnNvidiaRunsFiveLaunchesALayer) {
  LlamaStep s(1);
  EXPECT_EQ(text(plan_launches(s.g.view(), nvidia())),
            "EN M3+n1 RRWA RES GLU+n11 RES M3+n17 RRWA RES GLU+n27 RES 1+n33 1");
}

// Elsewhere (no dp4a; PoCL in CI) and in prefill the products are joined by input, the residual add
// with the norm after it, and rope/KV write/attention as one launch (the attention checks at run time
// whether the batch is decode).
TEST(ClFusionPlan, LlamaWithoutDp4aJoinsProductsResidualNormsAndAttention) {
  LlamaStep decode(1), prefill(7);
  const std::string want = "1 1 M3 RRWA 1 AN M2 1 1 AN M3 RRWA 1 AN M2 1 1 AN 1 1";
  EXPECT_EQ(text(plan_launches(decode.g.view(), FusionOptions{})), want);
  EXPECT_EQ(text(plan_launches(prefill.g.view(), nvidia())), want) << "several rows: no dp4a joins";
}

// 8-bit weights: the dp4a kernels take 4-bit ones only.
TEST(ClFusionPlan, EightBitWeightsTakeNoDp4aJoin) {
  LlamaStep s(1, 8);
  EXPECT_EQ(text(plan_launches(s.g.view(), nvidia())), "1 1 M3 RRWA 1 AN M2 1 1 AN M3 RRWA 1 AN M2 1 1 AN 1 1");
}

// Each join can be turned off by a backend option (measuring; the device tests compare the paths).
TEST(ClFusionPlan, OptionsTurnJoinsOff) {
  LlamaStep s(1);
  FusionOptions o = nvidia();
  o.residual_join = false;
  EXPECT_EQ(text(plan_launches(s.g.view(), o)), "EN M3+n1 RRWA 1 AN GLU 1 AN M3 RRWA 1 AN GLU 1 AN 1 1");
  o = nvidia();
  o.glu_join = false;
  EXPECT_EQ(text(plan_launches(s.g.view(), o)), "EN M3+n1 RRWA RES M2+n11 1 RES M3+n17 RRWA RES M2+n27 1 RES 1+n33 1");
  o = nvidia();
  o.attention_join = false;
  EXPECT_EQ(text(plan_launches(s.g.view(), o)).substr(0, 18), "EN M3+n1 RRW 1 RES");
  o.rope_into_kv_write = false;
  EXPECT_EQ(text(plan_launches(s.g.view(), o)).substr(0, 19), "EN M3+n1 RR 1 1 RES");
  o = nvidia();
  o.rope_into_kv_write = false;  // the attention still takes the KV write (its rope pair launched first)
  EXPECT_EQ(text(plan_launches(s.g.view(), o)).substr(0, 18), "EN M3+n1 RR WA RES");
}

// The ropes in the other order: k first, so the KV write's k is the pair's first tensor — the pair
// launches alone, and the write still joins the attention.
TEST(ClFusionPlan, RopesInAnotherOrderJoinLess) {
  const float inv_freq[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  sl_rope_params rope{};
  rope.struct_size = sizeof(rope);
  rope.head_dim = 32;
  rope.rotary_dim = 32;
  rope.attention_factor = 1.0f;
  rope.inv_freq = inv_freq;
  sl_attention_params att{};
  att.struct_size = sizeof(att);
  att.n_heads = 2;
  att.n_kv_heads = 1;
  att.head_dim = 32;
  att.scale = 1.0f;
  StepGraph g;
  const auto q = g.buffer(fake_buffer(0), 1, 64), k = g.buffer(fake_buffer(1), 1, 32), v = g.buffer(fake_buffer(2), 1, 32), out = g.buffer(fake_buffer(3), 1, 64);
  rope.n_heads = 1;
  g.rope(k, rope, "rope k");
  rope.n_heads = 2;
  g.rope(q, rope, "rope q");
  g.kv_write(k, v, 0, "kv_write");
  g.attention(q, StepGraph::kNone, att, out, "attention");
  EXPECT_EQ(text(plan_launches(g.view(), nvidia())), "RR WA");
}

// Joins only where no output overlaps what the run still reads.
TEST(ClFusionPlan, AliasingOutputsRunNodeByNode) {
  const sl_weight gate = quantized(128, 64), down = quantized(64, 128), norm = f32_weight(1, 64), q = quantized(64, 64);
  {
    StepGraph g;  // the GLU writes over gate: the joined kernel reads gate's output while it writes act
    const auto h = g.buffer(fake_buffer(0), 1, 64), gt = g.buffer(fake_buffer(1), 1, 128), up = g.buffer(fake_buffer(2), 1, 128);
    g.matmul(h, g.weight(gate), StepGraph::kNone, gt, "gate");
    g.matmul(h, g.weight(gate), StepGraph::kNone, up, "up");
    g.glu(gt, up, SL_ACT_SILU, gt, "activation");
    EXPECT_EQ(text(plan_launches(g.view(), nvidia())), "M2 1");
  }
  {
    StepGraph g;  // the residual sum into the product's own input
    const auto act = g.buffer(fake_buffer(0), 1, 128), o = g.buffer(fake_buffer(1), 1, 64), x = g.buffer(fake_buffer(0), 1, 64), h = g.buffer(fake_buffer(2), 1, 64);
    g.matmul(act, g.weight(down), StepGraph::kNone, o, "down");
    g.add(x, o, x, "residual");
    g.rms_norm(x, g.weight(norm), 1e-6f, 0.0f, h, "norm");
    g.matmul(h, g.weight(q), StepGraph::kNone, g.buffer(fake_buffer(3), 1, 64), "q");
    EXPECT_EQ(text(plan_launches(g.view(), nvidia())), "1 AN 1");
  }
  {
    StepGraph g;  // the attention's output over k: it may not store k in its own pass
    sl_attention_params att{};
    att.struct_size = sizeof(att);
    att.n_heads = 1;
    att.n_kv_heads = 1;
    att.head_dim = 32;
    att.scale = 1.0f;
    const auto qq = g.buffer(fake_buffer(0), 1, 32), k = g.buffer(fake_buffer(1), 1, 32), v = g.buffer(fake_buffer(2), 1, 32);
    g.kv_write(k, v, 0, "kv_write");
    g.attention(qq, StepGraph::kNone, att, k, "attention");
    EXPECT_EQ(text(plan_launches(g.view(), nvidia())), "1 1");
  }
}

// A norm is left to the next launch only where that launch is a dp4a product of its output;
// otherwise the residual step runs as a product and an add-norm.
TEST(ClFusionPlan, ResidualJoinNeedsAProductOfTheNormAfterIt) {
  const sl_weight down = quantized(64, 128), norm = f32_weight(1, 64), head_f32 = f32_weight(1024, 64), head_q4 = quantized(1024, 64);
  for (const bool q4_head : {true, false}) {
    StepGraph g;
    const auto act = g.buffer(fake_buffer(0), 1, 128), o = g.buffer(fake_buffer(1), 1, 64), x = g.buffer(fake_buffer(2), 1, 64), h = g.buffer(fake_buffer(3), 1, 64);
    g.matmul(act, g.weight(down), StepGraph::kNone, o, "down");
    g.add(x, o, x, "residual");
    g.rms_norm(x, g.weight(norm), 1e-6f, 0.0f, h, "final norm");
    g.matmul(h, g.weight(q4_head ? head_q4 : head_f32), StepGraph::kNone, g.buffer(fake_buffer(4), 1, 1024), "lm_head");
    EXPECT_EQ(text(plan_launches(g.view(), nvidia())), q4_head ? "RES 1+n2" : "1 AN 1") << (q4_head ? "4-bit head" : "f32 head");
  }
  {
    StepGraph g;  // the norm's output read by something else first
    const auto act = g.buffer(fake_buffer(0), 1, 128), o = g.buffer(fake_buffer(1), 1, 64), x = g.buffer(fake_buffer(2), 1, 64), h = g.buffer(fake_buffer(3), 1, 64);
    g.matmul(act, g.weight(down), StepGraph::kNone, o, "down");
    g.add(x, o, x, "residual");
    g.rms_norm(x, g.weight(norm), 1e-6f, 0.0f, h, "norm");
    g.argmax(h, g.buffer(fake_buffer(4), 1, 1, SL_DTYPE_I32), "argmax");
    EXPECT_EQ(text(plan_launches(g.view(), nvidia())), "1 AN 1");
  }
}

}  // namespace
}  // namespace sluice::ocl
