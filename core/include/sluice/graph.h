/* Step graphs (Backend ABI 2): what a backend runs. The host builds one graph per step from the
 * model's description — a list of nodes in an order that respects their data dependencies — and a
 * backend runs it with graph_compute (sluice/backend.h). Ops are data: a node names its op, its
 * input and output tensors and a parameter struct, so a new op is a new enum value and parameter
 * struct, never a new table member. How a backend runs a graph (one kernel per node, or several
 * nodes joined into one launch) is its own business; the results must be those of the nodes run
 * one by one in order.
 *
 * Versioning (sluice/plugin.h): structs grow only at the end and start with struct_size; the
 * reader treats members beyond struct_size as absent. Each member added after 2.0 says which minor
 * added it. A backend answers supports_node for a node it has never heard of with 0.
 */
#ifndef SLUICE_GRAPH_H
#define SLUICE_GRAPH_H

#include "sluice/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_buffer sl_buffer;     /* device memory, owned by the backend */
typedef struct sl_kv_cache sl_kv_cache; /* paged KV storage, owned by the backend */

typedef enum sl_dtype {
  SL_DTYPE_F32 = 0,
  SL_DTYPE_F16 = 1,
  SL_DTYPE_BF16 = 2,
  SL_DTYPE_I32 = 3,
  SL_DTYPE_U32 = 4, /* packed quantized words */
  /* 2.3: MXFP4 codes (OCP Microscaling FP4): 4-bit e2m1 floats (sign, 2 exponent bits, 1 mantissa
   * bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives), two a byte, low nibble first */
  SL_DTYPE_E2M1 = 5,
  /* 2.3: MXFP4 scales: one byte s a power of two, 2^(s - 127) (s = 0 is 2^-127; 255, the format's NaN,
   * has no defined product) */
  SL_DTYPE_E8M0 = 6
} sl_dtype;

/* A weight matrix [rows, cols] row-major, stored in a buffer. A vector (norm weight, bias) has rows 1.
 * Affine quantization (bits > 0, dtype SL_DTYPE_U32): `data` holds uint32 words, each packing 32/bits
 * values along cols, low bits first; value = scale * q + bias per group of group_size consecutive cols.
 * MXFP4 (2.3; dtype SL_DTYPE_E2M1, bits 4, group_size 32, scale_dtype SL_DTYPE_E8M0, no biases):
 * `data` holds each row's cols / 2 bytes of e2m1 codes (column c in byte c / 2, the low nibble for
 * even c), `scales` each row's cols / 32 bytes; value = e2m1(code) * 2^(scale - 127) per block of 32
 * consecutive cols, taken as float32 (so e.g. 6 * 2^127, past float32's range, is infinite). A backend
 * built before 2.3 does not know these dtypes and refuses such a weight with a status (its
 * supports_node and MATMUL); the host sends it only to backends of 2.3 or later whose supports_node
 * accepts it, and decodes the values to bf16 for the others. Only MATMUL takes it. */
typedef struct sl_weight {
  uint32_t struct_size;
  sl_buffer* data;
  uint64_t offset;       /* bytes */
  uint32_t dtype;        /* sl_dtype of the values (unquantized) or SL_DTYPE_U32 (quantized) */
  uint32_t rows;
  uint32_t cols;
  uint32_t bits;         /* 0 = not quantized */
  uint32_t group_size;
  uint32_t scale_dtype;  /* sl_dtype of scales and biases */
  sl_buffer* scales;
  uint64_t scales_offset;
  sl_buffer* biases;
  uint64_t biases_offset;
} sl_weight;

/* Where a tensor's values live. */
typedef enum sl_tensor_kind {
  SL_TENSOR_BUFFER = 0, /* rows × cols values of dtype at buffer + offset (bytes), row-major, dense */
  SL_TENSOR_WEIGHT = 1, /* the weight `weight` (its own form; rows and cols repeat its shape) */
  SL_TENSOR_HOST = 2,   /* rows × cols values of dtype in host memory at `host`, read during graph_compute */
  /* 2.0: the states of the step's sequences in the STATE layer `state_layer` of the step's cache:
   * row i is sequence i's state (in slot sl_batch.state_slots[i]), cols values of dtype from byte
   * `offset` of it (a state may hold several arrays); rows = the step's n_seqs. Read and written by
   * the ops that say so (COPY; 2.2: CAUSAL_CONV and GATED_DELTA). */
  SL_TENSOR_STATE = 3
} sl_tensor_kind;

typedef struct sl_tensor {
  uint32_t struct_size;
  uint32_t kind;   /* sl_tensor_kind */
  uint32_t dtype;  /* sl_dtype (BUFFER, HOST) */
  uint32_t rows;
  uint32_t cols;
  sl_buffer* buffer;
  uint64_t offset;
  const sl_weight* weight;
  const void* host;
  uint32_t state_layer;  /* 2.0: STATE: the cache's layer */
} sl_tensor;

/* Ops. Shapes: x [n, cols] means a tensor of n rows of cols values; "tokens" is the step's batch
 * (sl_step.batch). Inputs and outputs are tensor indices into sl_graph.tensors; SL_NO_TENSOR marks an
 * optional one left out. An output may be one of the inputs only where the op says so. */
typedef enum sl_op {
  SL_OP_NONE = 0,
  /* out [n, H] = table[ids[i]]; in: table (WEIGHT [V, H]), ids (I32 [1, n], host or device; an id
   * outside the table gives a row of zeros). */
  SL_OP_EMBED = 1,
  /* out = x / rms(x) * (weight + weight_offset) per row; in: x [r, c], weight (WEIGHT [1, c]).
   * sl_norm_params. out may be x. */
  SL_OP_RMS_NORM = 2,
  /* out[t, r] = sum_c x[t, c] * w[r, c] (+ bias[r]); in: x [n, w.cols], w (WEIGHT), bias (optional,
   * WEIGHT [1, w.rows]); out [n, w.rows], distinct from x. */
  SL_OP_MATMUL = 3,
  /* Rotary embedding in place at the tokens' positions; in: x [tokens, n_heads * head_dim]; out: x.
   * sl_rope_params. */
  SL_OP_ROPE = 4,
  /* Stores the tokens' K ([tokens, n_kv_heads * k_head_dim]) and V ([tokens, n_kv_heads * v_head_dim])
   * of one layer at their positions, in the layer's widths; in: k, v; no output. sl_kv_params. */
  SL_OP_KV_WRITE = 5,
  /* Causal attention of the tokens' queries [tokens, n_heads * head_dim] over their sequences' cached
   * positions (within the window), after every KV_WRITE of the layer before it in the graph; in: q,
   * sinks (optional, F32 [1, n_heads]); out [tokens, n_heads * v_head_dim]. sl_attention_params. */
  SL_OP_ATTENTION = 6,
  /* out = act(gate) * up, elementwise; in: gate, up; out may be gate. sl_glu_params. */
  SL_OP_GLU = 7,
  /* out = a + b, elementwise (same shapes); out may be a. */
  SL_OP_ADD = 8,
  /* out = x (same number of values). x or out may be a STATE tensor (2.0): a sequence's state read
   * into an activation, or written from one. */
  SL_OP_COPY = 9,
  /* out[i, :] = x[rows[i], :]; in: x [r, c], rows (I32 [1, n], host); out [n, c]. */
  SL_OP_GET_ROWS = 10,
  /* out[rows[i], :] += weights[i] * x[i, :] in order of i; in: x [n, c], rows (I32 [1, n], host),
   * weights (F32 [1, n], host); out: the tensor added into (read too). */
  SL_OP_SCATTER_ADD_ROWS = 11,
  /* out (I32 [1, r]) = the first index of each row's largest value, NaN passed over (a row of
   * nothing but NaN gives 0); in: x [r, c]. */
  SL_OP_ARGMAX = 12,
  /* 2.1: out = x * scale, or with softcap > 0: tanh(x * scale / softcap) * softcap, elementwise (same
   * shapes); out may be x. sl_scale_params. Gemma's embedding scale and final-logit soft-capping. */
  SL_OP_SCALE = 13,
  /* 2.2: a causal depthwise convolution over each sequence's inputs, K = w.cols taps:
   * out[t, c] = act(sum_k w[c, k] * x[t - K + 1 + k, c]), where the K - 1 inputs before a sequence's
   * first token of the step come from its state (zeros for a new sequence) and its newest K - 1 are
   * written back. in: x [tokens, C], w (WEIGHT [C, K]); out0 [tokens, C], distinct from x; out1 the
   * window, read and written (STATE [n_seqs, (K - 1) * C]: K - 1 rows of C, oldest first). A sequence's
   * tokens lie in the batch in order of position. sl_conv_params. Gated DeltaNet's short convolution. */
  SL_OP_CAUSAL_CONV = 14,
  /* 2.2: the gated delta rule (Gated DeltaNet, Qwen3-Next / Qwen3.5 linear attention), token by token
   * in order within each sequence. in0 qkv [tokens, 2 * n_k_heads * k_head_dim + n_v_heads * v_head_dim]:
   * q of every key head, k of every key head, v of every value head; in1 a [tokens, n_v_heads] (the
   * decay's input, dt_bias added); in2 b [tokens, n_v_heads]; in3 A_log (WEIGHT [1, n_v_heads]).
   * Value head h reads key head h / (n_v_heads / n_k_heads). Per token and value head, with q and k
   * L2-normalised (x / sqrt(sum x^2 + l2_eps)) and q multiplied by scale:
   *   S *= exp(-exp(A_log[h]) * softplus(a[h]));  beta = sigmoid(b[h])
   *   S += k (beta * (v - S^T k))^T;               out[h] = S^T q
   * with S the head's [k_head_dim, v_head_dim] state. out0 [tokens, n_v_heads * v_head_dim]; out1 the
   * states, read and written (STATE [n_seqs, n_v_heads * k_head_dim * v_head_dim], [head][k][v]).
   * sl_gated_delta_params. */
  SL_OP_GATED_DELTA = 15,
  /* 2.2: out[r, dst_col + c] = x[r / repeat, src_col + c] for every row r of out and c < width; out's
   * other columns keep their values (out is read too). in: x [r, cx]; out [r * repeat, co], distinct
   * from x. sl_copy_columns_params. Moves per-head column ranges between per-head row views
   * ([tokens * heads, head width]): MLA's split of K and V and its rotary part shared by all heads. */
  SL_OP_COPY_COLUMNS = 16,
  /* 2.4: a product per head with that head's slice of one weight. w (WEIGHT [n_heads * head_rows, cols])
   * holds n_heads groups of head_rows rows; head h's slice is rows s(h, r) = h * head_rows + row_offset + r,
   * r < slice_rows. in: x, w; out distinct from x. sl_head_matmul_params.
   *   transpose 0: x [tokens, n_heads * cols], out [tokens, n_heads * slice_rows],
   *                out[t, h * slice_rows + r] = sum_c x[t, h * cols + c] * w[s(h, r), c]
   *   transpose 1: x [tokens, n_heads * slice_rows], out [tokens, n_heads * cols],
   *                out[t, h * cols + c] = sum_r x[t, h * slice_rows + r] * w[s(h, r), c]
   * MLA's absorbed products with kv_b_proj: each head's query into the latent (transpose 1, the key
   * rows) and its attention output out of it (transpose 0, the value rows). A backend of 2.3 or
   * earlier does not know it (supports_node answers 0); the host then runs MLA expanded. */
  SL_OP_HEAD_MATMUL = 17,
  /* 2.5: Mixture-of-Experts routing on the device, so that a step's experts are chosen without the
   * host reading the router's logits. in0 logits [n, E] (F32); in1 optional per-expert factors (WEIGHT
   * F32 [1, E]); out0 ids (I32 [n, k]), out1 weights (F32 [n, k]), both BUFFER. Per row, by
   * sl_moe_route_params.kind:
   *   SL_ROUTE_SOFTMAX_TOPK: p = softmax(logits); the k largest p (ties to the lower index); weight p,
   *     or p / (sum of the k's p) with normalize;
   *   SL_ROUTE_TOPK_SOFTMAX: the k largest logits (ties to the lower index); weight = softmax over the k;
   * then weight *= factor[e] where in1 is given. A row's k (id, weight) pairs are written in increasing
   * id order (the order MOE_COMBINE adds them in). A row holding NaN routes to some k distinct ids. */
  SL_OP_MOE_ROUTE = 18,
  /* 2.5: products with each row's experts, chosen on the device. in0 x; in1 w (WEIGHT [E * R, cols]):
   * E experts' [R, cols] matrices stacked, expert e's rows e * R … e * R + R - 1; in2 ids (I32 [n, k],
   * BUFFER, as MOE_ROUTE writes them). out [n * k, R], distinct from x:
   *   out[i * k + j, r] = sum_c x[xi, c] * w[ids[i, j] * R + r, c]
   * with xi = i when x has n rows (each row's input shared by its k experts) or i * k + j when it has
   * n * k. An id outside [0, E) gives a row of zeros. sl_matmul_id_params. */
  SL_OP_MATMUL_ID = 19,
  /* 2.5: out[i, :] += sum_j weights[i, j] * x[i * k + j, :], j = 0 … k - 1 in order; in: x [n * k, c],
   * weights (F32 [n, k], BUFFER); out [n, c], read too, distinct from x. The weighted sum of each
   * row's experts (MOE_ROUTE's weights) into the block's output. */
  SL_OP_MOE_COMBINE = 20,
  SL_OP_COUNT /* grows with every minor; not part of the ABI */
} sl_op;

#define SL_NO_TENSOR 0xFFFFFFFFu
#define SL_NODE_MAX_INPUTS 4u
#define SL_NODE_MAX_OUTPUTS 2u

typedef struct sl_norm_params {
  uint32_t struct_size;
  float eps;
  float weight_offset; /* Gemma stores weight - 1 */
} sl_norm_params;

typedef enum sl_rope_style {
  SL_ROPE_NEOX = 0,        /* rotate the two halves of the rotary dims (HF rotate_half) */
  SL_ROPE_INTERLEAVED = 1  /* rotate adjacent pairs */
} sl_rope_style;

/* angle = position * inv_freq[i] for i < rotary_dim / 2; cos and sin multiplied by attention_factor. */
typedef struct sl_rope_params {
  uint32_t struct_size;
  uint32_t n_heads;
  uint32_t head_dim;
  uint32_t rotary_dim;
  uint32_t style;           /* sl_rope_style */
  float attention_factor;
  const float* inv_freq;    /* [rotary_dim / 2], host memory that stays valid while the graph (or plan) lives */
} sl_rope_params;

typedef struct sl_kv_params {
  uint32_t struct_size;
  uint32_t layer;  /* the cache's layer */
} sl_kv_params;

typedef struct sl_attention_params {
  uint32_t struct_size;
  uint32_t layer;         /* the cache's layer */
  uint32_t n_heads;
  uint32_t n_kv_heads;
  uint32_t head_dim;      /* of q and K */
  float scale;            /* usually 1/sqrt(head_dim) */
  uint32_t window;        /* sliding window in tokens; 0 = full causal. A SL_KV_WINDOW layer needs one, at
                             most the layer's */
  float softcap;          /* tanh soft-capping of scores; 0 = none */
  uint32_t v_head_dim;    /* 2.0: of V and the output; 0 = head_dim */
} sl_attention_params;

typedef enum sl_activation {
  SL_ACT_SILU = 0,
  SL_ACT_GELU_TANH = 1,
  SL_ACT_GELU = 2,
  /* 2.2: gpt-oss's clamped SwiGLU: with g = min(gate, limit) and u = clamp(up, -limit, limit),
   * out = g * sigmoid(alpha * g) * (u + 1). alpha and limit are sl_glu_params' (2.2 members). */
  SL_ACT_SWIGLU_CLAMPED = 3,
  SL_ACT_SIGMOID = 4  /* 2.2: Qwen3.5's gated attention output (out = sigmoid(gate) * attention) */
} sl_activation;

/* 2.2 */
typedef struct sl_conv_params {
  uint32_t struct_size;
  uint32_t activation;  /* SL_ACT_SILU, or SL_CONV_NO_ACTIVATION */
} sl_conv_params;
#define SL_CONV_NO_ACTIVATION 0xFFFFFFFFu

/* 2.2 */
typedef struct sl_gated_delta_params {
  uint32_t struct_size;
  uint32_t n_k_heads;
  uint32_t n_v_heads;   /* a multiple of n_k_heads */
  uint32_t k_head_dim;
  uint32_t v_head_dim;
  float scale;          /* q's factor after normalising; usually 1/sqrt(k_head_dim) */
  float l2_eps;         /* in q's and k's L2 norms */
} sl_gated_delta_params;

/* 2.1 */
typedef struct sl_scale_params {
  uint32_t struct_size;
  float scale;
  float softcap;  /* 0 = none */
} sl_scale_params;

/* 2.2 */
typedef struct sl_copy_columns_params {
  uint32_t struct_size;
  uint32_t src_col;  /* first column read in each row of x */
  uint32_t dst_col;  /* first column written in each row of out */
  uint32_t width;    /* columns moved, >= 1 */
  uint32_t repeat;   /* rows of out per row of x, >= 1 (a row of x copied to `repeat` consecutive rows) */
} sl_copy_columns_params;

/* 2.4 */
typedef struct sl_head_matmul_params {
  uint32_t struct_size;
  uint32_t n_heads;
  uint32_t head_rows;   /* rows of w per head: n_heads * head_rows = w.rows */
  uint32_t row_offset;  /* first row of each head's slice within its group */
  uint32_t slice_rows;  /* rows of each head's slice, >= 1; row_offset + slice_rows <= head_rows */
  uint32_t transpose;   /* 0: x times the slice transposed (as MATMUL); 1: x times the slice */
} sl_head_matmul_params;

/* 2.5 */
typedef enum sl_route_kind {
  SL_ROUTE_SOFTMAX_TOPK = 0, /* softmax over the experts, then the top k (Mixtral, Qwen-MoE, OLMoE, Gemma 4) */
  SL_ROUTE_TOPK_SOFTMAX = 1  /* the top k logits, then softmax over those k (gpt-oss) */
} sl_route_kind;

/* 2.5 */
typedef struct sl_moe_route_params {
  uint32_t struct_size;
  uint32_t k;          /* experts a row, 1 <= k <= E */
  uint32_t kind;       /* sl_route_kind */
  uint32_t normalize;  /* SOFTMAX_TOPK: 1 = the k weights divided by their sum */
} sl_moe_route_params;

/* 2.5 */
typedef struct sl_matmul_id_params {
  uint32_t struct_size;
  uint32_t n_experts;  /* E: w.rows = E * R */
} sl_matmul_id_params;

typedef struct sl_glu_params {
  uint32_t struct_size;
  uint32_t activation;  /* sl_activation */
  /* 2.2: SL_ACT_SWIGLU_CLAMPED's parameters (a struct_size without them: that activation is refused) */
  float alpha;          /* the sigmoid's slope (gpt-oss: 1.702) */
  float limit;          /* the clamp (gpt-oss: 7.0) */
} sl_glu_params;

typedef struct sl_node {
  uint32_t struct_size;
  uint32_t op;                              /* sl_op */
  uint32_t inputs[SL_NODE_MAX_INPUTS];      /* tensor indices, SL_NO_TENSOR where absent */
  uint32_t outputs[SL_NODE_MAX_OUTPUTS];
  const void* params;                       /* the op's parameter struct (starts with struct_size), or NULL */
  const char* name;                         /* for messages and profiles, e.g. "layer 3 q" */
} sl_node;

/* The tokens of a step. Host pointers, valid during graph_compute. */
typedef struct sl_batch {
  uint32_t struct_size;
  uint32_t n_tokens;
  const int32_t* positions;  /* [n_tokens] position of each token in its sequence */
  const int32_t* seq_slots;  /* [n_tokens] which of the step's sequences it belongs to */
  uint32_t n_seqs;
  uint32_t max_pages;        /* columns of page_table */
  const int32_t* page_table; /* [n_seqs][max_pages]: KV page of each run of page_tokens positions */
  /* [n_seqs][max_pages]: the recent page holding exact (f16) K/V rows for each page of positions, or
   * -1. Attention reads key j of a query at position p exactly when j > p - recent_window and
   * recent_table has a page for j; KV_WRITE stores the exact rows wherever it has one. NULL = none. */
  const int32_t* recent_table;
  /* 2.0: [n_seqs][max_pages]: the page of each run of page_tokens positions in the SL_KV_WINDOW
   * layers, -1 where released (out of every query's window) — pages of their own, apart from
   * page_table's. NULL when the cache has no WINDOW layer. */
  const int32_t* window_table;
  /* 2.0: [n_seqs]: each sequence's state slot in the SL_KV_STATE layers (and STATE tensors), -1 none.
   * NULL when the cache has no STATE layer. */
  const int32_t* state_slots;
} sl_batch;

typedef struct sl_graph {
  uint32_t struct_size;
  uint32_t n_tensors;
  const sl_tensor* tensors;
  uint32_t n_nodes;
  const sl_node* nodes;  /* in an order where every input is written before it is read */
} sl_graph;

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_GRAPH_H */
