#pragma once
// The blocks decoder layers are made of, as graph nodes (core/graph/step_graph.h): attention with its
// projections, norms and rotary embedding; the gated MLP; the routed experts of a Mixture-of-Experts
// block; the head. A family's builder (core/model/families/) strings them together in its order.
#include <cstdint>
#include <string>
#include <vector>

#include "graph/step_graph.h"
#include "sluice/graph.h"

namespace sluice::blocks {

using Id = StepGraph::Id;

// The activations of one stage, as tensors of the step's graph: [n, width] each.
struct Activations {
  Id x = StepGraph::kNone;      // the residual stream [n, H]
  Id h = StepGraph::kNone;      // a norm's output, a block's input [n, H]
  Id q = StepGraph::kNone, k = StepGraph::kNone, v = StepGraph::kNone;  // [n, heads·D] (v: heads·DV)
  Id attn = StepGraph::kNone;   // attention's output [n, NH·DV]
  Id o = StepGraph::kNone;      // a block's output [n, H]
  Id gate = StepGraph::kNone, up = StepGraph::kNone, act = StepGraph::kNone;  // [n, F]
  // Per-head views of q, k and v ([n·heads, D]), for per-head norms.
  Id q_heads = StepGraph::kNone, k_heads = StepGraph::kNone, v_heads = StepGraph::kNone;
  // Gemma 4's per-layer inputs: every layer's [n, L·P] (and the same memory as [n·L, P] rows), the
  // token-identity half while it is built, one layer's [n, P] and its gate.
  Id per_layer_all = StepGraph::kNone, per_layer_rows = StepGraph::kNone, per_layer_tokens = StepGraph::kNone;
  Id per_layer = StepGraph::kNone, per_layer_gate = StepGraph::kNone;
  // An MoE block beside a dense MLP (Gemma 4): the MLP's output kept while the experts run, the router's input.
  Id dense_out = StepGraph::kNone, router_in = StepGraph::kNone;
  // Gated attention (Qwen3.5): q_proj's output, each head's query then its gate ([n, heads·2D], and
  // as [n·heads·2, D] rows), and the gates parted from it ([n, heads·D]; [n·heads, D]).
  Id q_gate = StepGraph::kNone, q_gate_rows = StepGraph::kNone, attn_gate = StepGraph::kNone, attn_gate_heads = StepGraph::kNone;
  // Gated DeltaNet: q, k and v before and after the convolution [n, conv_dim]; z [n, NV·DV]; a and b
  // [n, NV]; the delta rule's output [n, NV·DV] and per head [n·NV, DV] for the gated norm.
  Id lin_qkv = StepGraph::kNone, lin_conv = StepGraph::kNone, lin_z = StepGraph::kNone, lin_a = StepGraph::kNone,
     lin_b = StepGraph::kNone, lin_core = StepGraph::kNone, lin_core_heads = StepGraph::kNone;
  // MLA: q's latent [n, q_lora_rank], q as q_b makes it [n·heads, nope + rope] (and [n, heads·(nope + rope)]),
  // the K/V latent with the shared rotary key [n, kv_lora_rank + rope], the latent alone [n, kv_lora_rank],
  // its expansion [n, heads·(nope + v)] (and [n·heads, nope + v]).
  Id mla_q_latent = StepGraph::kNone, mla_q = StepGraph::kNone, mla_q_heads = StepGraph::kNone;
  Id mla_kv_latent = StepGraph::kNone, mla_kv_normed = StepGraph::kNone, mla_kv = StepGraph::kNone, mla_kv_heads = StepGraph::kNone;
  // MLA's latent form: q_nope [n, heads·nope], q_pe [n, heads·rope] and the absorbed q_lat [n, heads·kv_lora]
  // (each also per head, [n·heads, width]); the query [n, heads·(kv_lora + rope)] (and per head); k_pe
  // [n, rope]; the cached K [n, kv_lora + rope]; attention's output in the latent [n, heads·kv_lora].
  Id mla_q_nope = StepGraph::kNone, mla_q_nope_heads = StepGraph::kNone, mla_q_pe = StepGraph::kNone, mla_q_pe_heads = StepGraph::kNone;
  Id mla_q_lat = StepGraph::kNone, mla_q_lat_heads = StepGraph::kNone, mla_query = StepGraph::kNone, mla_query_heads = StepGraph::kNone;
  Id mla_k_pe = StepGraph::kNone, mla_k = StepGraph::kNone, mla_o_lat = StepGraph::kNone;
};

struct AttentionWeights {
  Id q = StepGraph::kNone, k = StepGraph::kNone, v = StepGraph::kNone, o = StepGraph::kNone;
  Id q_bias = StepGraph::kNone, k_bias = StepGraph::kNone, v_bias = StepGraph::kNone, o_bias = StepGraph::kNone;
  Id q_norm = StepGraph::kNone, k_norm = StepGraph::kNone;  // none: no q/k norm
  Id v_norm = StepGraph::kNone;  // per head, Gemma 4 (a weight of ones: the norm has no scale)
  bool norm_per_head = true;  // q/k norms over each head (Qwen3), else over the whole projection (OLMoE)
  Id sinks = StepGraph::kNone;
};

struct AttentionShape {
  uint32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  uint32_t v_head_dim = 0;  // V's and the output's width per head where it differs from head_dim (MLA); 0 = head_dim
  float norm_eps = 1e-6f;
  float norm_offset = 0.0f;  // the q/k norms multiply by weight + this (Gemma stores weight - 1)
  sl_rope_params rope{};  // n_heads is set per use
  uint32_t window = 0;    // sliding window; 0 = full
  float softcap = 0.0f;
  float scale = 0.0f;     // 0: 1/sqrt(head_dim)
  bool value_from_key = false;  // V is the K projection before its norm and rotation (Gemma 4's attention_k_eq_v)
  bool writes_kv = true;        // false: attend `layer`'s K/V as another layer wrote them (Gemma 4's KV sharing)
};

// h → o: the q/k/v products (with biases), q/k(/v) norms, rotary embedding, the KV write of `layer` and
// attention over the cache, then the output product. Without writes_kv only q is made and the layer
// attends what `layer` holds.
void attention(StepGraph& g, const Activations& a, const AttentionWeights& w, const AttentionShape& s, uint32_t layer,
               const std::string& prefix);

// h → o, Qwen3.5's gated attention: q_proj gives each head's query and an output gate side by side;
// GET_ROWS parts them, the query goes through attention as above, and the attention output is
// multiplied by sigmoid(gate) (a GLU node) before the output product.
void gated_attention(StepGraph& g, const Activations& a, const AttentionWeights& w, const AttentionShape& s, uint32_t layer,
                     const std::string& prefix);
// Multi-head latent attention (DeepSeek-V3), h → o (blocks_mla.cpp). Q heads come as [nope | rope]
// from q (or q_b after q_a and its norm); kv_a gives [latent | k_pe]; kv_b holds per head the rows
// that turn the normed latent into [k_nope | v] (W_UK: nope rows, W_UV: v rows, each [·, kv_lora_rank]).
// Two forms, the same scores and outputs:
// - latent (MlaShape::latent): the cache keeps one KV head, K = [latent | rotated k_pe] and V = the
//   latent; each query is absorbed into it (q_lat = q_nope · W_UK, HEAD_MATMUL), attention runs with
//   n_kv_heads 1 over kv_lora_rank + rope wide keys, and each head's output leaves the latent through
//   W_UV (HEAD_MATMUL) before o_proj. q·k = q_lat·latent + q_pe·k_pe is q_nope·k_nope + q_pe·k_pe.
// - expanded: kv_b gives every head's k_nope and v; K (nope + rope, laid out [rope | nope] so the ROPE
//   op turns the first rope_dims values — a dot product does not see the same permutation of both)
//   and V (v_head_dim) go to the cache per head. For a backend without HEAD_MATMUL.
struct MlaWeights {
  Id q_a = StepGraph::kNone, q_a_norm = StepGraph::kNone;  // none: q is a plain projection of h
  Id q = StepGraph::kNone, kv_a = StepGraph::kNone, kv_a_norm = StepGraph::kNone, kv_b = StepGraph::kNone, o = StepGraph::kNone;
};
struct MlaShape {
  uint32_t n_heads = 0, nope_dim = 0, rope_dim = 0, v_head_dim = 0, kv_lora_rank = 0;
  float norm_eps = 1e-6f;
  sl_rope_params rope{};  // rotary_dim = rope_dim; n_heads and head_dim set per use
  float scale = 0.0f;     // 0: 1/sqrt(nope_dim + rope_dim), in either form
  bool latent = false;    // the latent cache (ModelConfig::Mla::latent_cache)
};
void mla_attention(StepGraph& g, const Activations& a, const MlaWeights& w, const MlaShape& s, uint32_t layer, const std::string& prefix);

// h → o: act(h·gateᵀ) * (h·upᵀ), then ·downᵀ.
void gated_mlp(StepGraph& g, const Activations& a, Id gate, Id up, Id down, uint32_t activation, const std::string& prefix);

}  // namespace sluice::blocks
