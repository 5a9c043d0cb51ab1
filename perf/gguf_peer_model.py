# The llama.cpp peer's GGUF for a Sluice model folder (`llama`, `qwen3_moe`, `gemma4_text`, `qwen3_5_text`,
# `qwen3_5_moe_text`): the same shape (read from the folder's config.json) and tokenizer (its
# tokenizer.json), random weights, in the types llama-quantize's Q4_0 gives each tensor. Writing the
# quantized blocks directly, rather than converting a bf16 folder and quantizing it, is what makes a 30B
# shape fit the GPU machine's disk (61 GB of bf16 + its GGUF would not) and saves a sitting the minutes of
# transformers, conversion and quantization. Speed does not depend on the values; the blocks' scales are
# ordinary numbers (no NaN, no subnormals) so neither side meets slow arithmetic. Token ids past the
# tokenizer's are "[PADn]" of type UNUSED, as llama.cpp's converter writes them.
#
#   PYTHONPATH=PEER/lcpp/gguf-py /usr/bin/python3 perf/gguf_peer_model.py MODEL_DIR OUT.gguf [--weights q4_0|f16|real]
#
# --weights f16 writes every matrix in f16 instead: quantized by llama-quantize it must list the same
# tensor types as --weights q4_0 (how the type choices below are checked on a small config).
# --weights real writes the folder's own safetensors weights in f32, mapped as the peer's converter maps
# them (names, V-head order, norm offsets, A_log): the peer's greedy ids on such a file against the
# folder's golden.json prove the mapping (perf/gguf_peer_check.sh).
import argparse, json, os, struct
import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as Q, TokenType

ap = argparse.ArgumentParser()
ap.add_argument("model"); ap.add_argument("out")
ap.add_argument("--weights", choices=["q4_0", "f16", "real"], default="q4_0")
args = ap.parse_args()
cfg = json.load(open(os.path.join(args.model, "config.json")))
ARCH = {"qwen3_moe": "qwen3moe", "llama": "llama", "gemma4_text": "gemma4", "qwen3_5_text": "qwen35",
        "qwen3_5_moe_text": "qwen35moe"}
family = cfg.get("model_type")
if family not in ARCH:
    raise SystemExit(f"{args.model}: model_type {family!r}; this writer knows {', '.join(ARCH)}")
real = args.weights == "real"
H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
hd = cfg.get("head_dim") or H // nh
V = cfg["vocab_size"]
rng = np.random.default_rng(1)


def safetensors(folder):
    """name -> float32 array of every tensor in the folder's *.safetensors (bf16, f16 or f32)."""
    out = {}
    for fn in sorted(f for f in os.listdir(folder) if f.endswith(".safetensors")):
        blob = open(os.path.join(folder, fn), "rb").read()
        n = struct.unpack("<Q", blob[:8])[0]
        header = json.loads(blob[8:8 + n])
        for name, t in header.items():
            if name == "__metadata__":
                continue
            a, b = t["data_offsets"]
            raw = np.frombuffer(blob, dtype=np.uint8, count=b - a, offset=8 + n + a)
            if t["dtype"] == "BF16":
                x = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                x = raw.view({"F16": np.float16, "F32": np.float32}[t["dtype"]]).astype(np.float32)
            out[name] = x.reshape(t["shape"])
    return out
st = safetensors(args.model) if real else None

# One pool of blocks per type, sliced for every tensor: only the bytes' count and layout matter.
BLOCK = {Q.Q4_0: (32, 18), Q.Q6_K: (256, 210)}
def pool(qtype, nbytes):
    elems, size = BLOCK[qtype]
    b = np.frombuffer(rng.bytes(nbytes - nbytes % size), dtype=np.uint8).copy().reshape(-1, size)
    # The f16 scale: the first two bytes of a Q4_0 block, the last two of a Q6_K one; a weight's
    # magnitude near a 0.02-std initialisation.
    scale = np.array([0.004 if qtype == Q.Q4_0 else 0.0005], dtype=np.float16).view(np.uint8)
    at = 0 if qtype == Q.Q4_0 else size - 2
    b[:, at:at + 2] = scale
    return b.reshape(-1)
E = cfg.get("num_experts") or cfg.get("num_local_experts") or 1
F_exp = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size")
largest = max(V * H, E * 2 * F_exp * H, V * L * (cfg.get("hidden_size_per_layer_input") or 0),
              cfg.get("intermediate_size", 0) * H * 2)
pools = {} if args.weights != "q4_0" else {q: pool(q, largest // BLOCK[q][0] * BLOCK[q][1] + BLOCK[q][1]) for q in BLOCK}
f16_pool = rng.standard_normal(largest, dtype=np.float32).astype(np.float16) * np.float16(0.02) if args.weights == "f16" else None

w = GGUFWriter(args.out, ARCH[family])
def source(src):
    return src() if callable(src) else st[src]
def matrix(name, shape, src=None, qtype=Q.Q4_0):
    """A weight of numpy shape `shape` (rows last-but-one, the reduced width last); `src`: the folder's
    tensor name, or a function giving the array, for --weights real. qtype None: kept as converted (f16)."""
    n = int(np.prod(shape))
    if real:
        x = source(src).astype(np.float32)
        assert x.shape == tuple(shape), (name, x.shape, shape)
        w.add_tensor(name, np.ascontiguousarray(x))
    elif args.weights == "f16" or qtype is None:
        w.add_tensor(name, (f16_pool if f16_pool is not None else pools_f16())[:n].reshape(shape))
    else:
        elems, size = BLOCK[qtype]
        assert shape[-1] % elems == 0, (name, shape)
        data = pools[qtype][: n // elems * size].reshape(*shape[:-1], shape[-1] // elems * size)
        w.add_tensor(name, data, raw_dtype=qtype)
_f16_small = []
def pools_f16():
    if not _f16_small:
        _f16_small.append(rng.standard_normal(largest, dtype=np.float32).astype(np.float16) * np.float16(0.02))
    return _f16_small[0]
def vector(name, shape, value=1.0, src=None):
    """An f32 tensor (norms, scales, biases): `value` everywhere, or the folder's own with --weights real."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if real:
        x = source(src).astype(np.float32)
        assert x.shape == shape, (name, x.shape, shape)
        w.add_tensor(name, np.ascontiguousarray(x))
    else:
        w.add_tensor(name, np.full(shape, value, dtype=np.float32) if np.isscalar(value) else value.astype(np.float32))
def plus1(src):
    """Qwen3-Next/3.5 norms store w and compute x·(1+w); the peer computes x·w."""
    return lambda: st[src] + 1.0


def tokenizer(pre):
    """The folder's tokenizer.json: byte-level BPE as `gpt2` (Qwen2's pre-tokenization), or a
    SentencePiece-style BPE (▁ for spaces, <0xNN> byte fallback; Gemma's) as the peer's `gemma4` model."""
    tok = json.load(open(os.path.join(args.model, "tokenizer.json")))
    ids = dict(tok["model"]["vocab"])
    ids.update({t["content"]: t["id"] for t in tok.get("added_tokens", [])})
    by_id = {i: s for s, i in ids.items()}
    control = {t["id"] for t in tok.get("added_tokens", []) if t.get("special")}
    byte_level = (tok.get("decoder") or {}).get("type") == "ByteLevel"
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(V)]
    def kind(i):
        if i in control: return TokenType.CONTROL
        if i not in by_id: return TokenType.UNUSED
        if not byte_level and len(by_id[i]) == 6 and by_id[i].startswith("<0x") and by_id[i].endswith(">"): return TokenType.BYTE
        return TokenType.NORMAL
    w.add_tokenizer_model("gpt2" if byte_level else "gemma4")
    if byte_level:
        w.add_tokenizer_pre(pre)
    else:
        w.add_token_scores([0.0] * V)
    w.add_token_list(tokens)
    w.add_token_types([kind(i) for i in range(V)])
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    eos = cfg.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    w.add_eos_token_id(eos if eos is not None else (min(control) if control else 0))
    if cfg.get("pad_token_id") is not None:
        w.add_pad_token_id(cfg["pad_token_id"])
    w.add_add_bos_token(False)


def common(rope_theta):
    w.add_name("sluice-peer-" + os.path.basename(os.path.normpath(args.model)))
    w.add_context_length(cfg.get("max_position_embeddings", 40960))
    w.add_embedding_length(H)
    w.add_block_count(L)
    if not (family == "gemma4_text" and cfg.get("use_double_wide_mlp")):  # else per layer, below
        w.add_feed_forward_length(cfg.get("intermediate_size", F_exp))
    w.add_head_count(nh)
    w.add_rope_freq_base(float(rope_theta))
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-6))
    # LLAMA_FTYPE_ALL_F32 / MOSTLY_F16 / MOSTLY_Q4_0
    w.add_file_type({"real": 0, "f16": 1, "q4_0": 2}[args.weights])
    if args.weights == "q4_0":
        w.add_quantization_version(2)  # GGML_QNT_VERSION, as llama-quantize writes it


def embeddings(tied):
    # llama-quantize's Q4_0 gives the output Q6_K; with tied embeddings token_embd is the output.
    matrix("token_embd.weight", (V, H), "model.embed_tokens.weight", Q.Q6_K if tied else Q.Q4_0)
    if not tied:
        matrix("output.weight", (V, H), "lm_head.weight", Q.Q6_K)


def write_llama_qwen3_moe():
    moe = family == "qwen3_moe"
    F = cfg["moe_intermediate_size"] if moe else cfg["intermediate_size"]
    common(cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta", 1000000.0))
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    if moe:
        w.add_expert_count(E)
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        w.add_expert_feed_forward_length(F)
    else:
        w.add_rope_dimension_count(hd)
        w.add_vocab_size(V)
    tokenizer("qwen2")
    embeddings(cfg.get("tie_word_embeddings"))
    vector("output_norm.weight", H, src="model.norm.weight")
    for l in range(L):
        b, m = f"blk.{l}.", f"model.layers.{l}."
        vector(b + "attn_norm.weight", H, src=m + "input_layernorm.weight")
        vector(b + "ffn_norm.weight", H, src=m + "post_attention_layernorm.weight")
        if moe:
            vector(b + "attn_q_norm.weight", hd, src=m + "self_attn.q_norm.weight")
            vector(b + "attn_k_norm.weight", hd, src=m + "self_attn.k_norm.weight")
        # The peer's llama ropes adjacent pairs, HF's the two halves of a head: its rows reordered to match.
        pairs = lambda src, heads: (lambda: st[src] if moe else
                                    st[src].reshape(heads, 2, hd // 2, H).swapaxes(1, 2).reshape(heads * hd, H))
        matrix(b + "attn_q.weight", (nh * hd, H), pairs(m + "self_attn.q_proj.weight", nh))
        matrix(b + "attn_k.weight", (nkv * hd, H), pairs(m + "self_attn.k_proj.weight", nkv))
        matrix(b + "attn_v.weight", (nkv * hd, H), m + "self_attn.v_proj.weight")
        matrix(b + "attn_output.weight", (H, nh * hd), m + "self_attn.o_proj.weight")
        if moe:
            vector(b + "ffn_gate_inp.weight", (E, H), rng.standard_normal((E, H), dtype=np.float32) * np.float32(0.02),
                   src=m + "mlp.gate.weight")
            stack = lambda p: (lambda: np.stack([st[f"{m}mlp.experts.{e}.{p}.weight"] for e in range(E)]))
            matrix(b + "ffn_gate_exps.weight", (E, F, H), stack("gate_proj"))
            matrix(b + "ffn_up_exps.weight", (E, F, H), stack("up_proj"))
            matrix(b + "ffn_down_exps.weight", (E, H, F), stack("down_proj"))
        else:
            matrix(b + "ffn_gate.weight", (F, H), m + "mlp.gate_proj.weight")
            matrix(b + "ffn_up.weight", (F, H), m + "mlp.up_proj.weight")
            matrix(b + "ffn_down.weight", (H, F), m + "mlp.down_proj.weight")


def write_gemma4():
    """Gemma 4: sliding/full layers with their own head dims (full: `global_head_dim`, or a
    `per_layer_config` override), K as V on full layers where `attention_k_eq_v`, proportional partial
    rotary on full layers (as the peer does it: a rope_freqs tensor of 1 for the rotated pairs and 1e30
    for the rest), optional per-layer input embeddings, and with `enable_moe_block` a routed expert block
    beside the dense MLP. Norms are stored as they are (Gemma 4 multiplies by w, not 1+w)."""
    types = cfg["layer_types"]
    full = [t == "full_attention" for t in types]
    per_layer = cfg.get("per_layer_config") or {}
    hd_full = cfg.get("global_head_dim") or next((int(v["head_dim"]) for k, v in per_layer.items()
                                                  if full[int(k)] and "head_dim" in v), hd)
    k_eq_v = bool(cfg.get("attention_k_eq_v"))
    nkv_full = cfg.get("num_global_key_value_heads") or nkv
    P = cfg.get("hidden_size_per_layer_input") or 0
    shared = cfg.get("num_kv_shared_layers") or 0
    moe = bool(cfg.get("enable_moe_block"))
    F = cfg["intermediate_size"]
    rp = cfg["rope_parameters"]
    common(rp["full_attention"].get("rope_theta", 1000000.0))
    w.add_rope_freq_base_swa(float(rp["sliding_attention"].get("rope_theta", 10000.0)))
    w.add_head_count_kv([nkv_full if f else nkv for f in full])
    w.add_key_length(hd_full); w.add_value_length(hd_full)
    w.add_key_length_swa(hd); w.add_value_length_swa(hd)
    w.add_rope_dimension_count(hd_full)
    w.add_rope_dimension_count_swa(int(hd * rp["sliding_attention"].get("partial_rotary_factor", 1.0)))
    w.add_sliding_window(cfg["sliding_window"])
    w.add_sliding_window_pattern([not f for f in full])
    w.add_shared_kv_layers(shared)
    w.add_embedding_length_per_layer_input(P)
    if cfg.get("use_double_wide_mlp"):
        w.add_feed_forward_length([F * (2 if l >= L - shared else 1) for l in range(L)])
    if cfg.get("final_logit_softcapping"):
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
    if moe:
        w.add_expert_count(E)
        w.add_expert_used_count(cfg["top_k_experts"])
        w.add_expert_feed_forward_length(F_exp)
    tokenizer("qwen2")
    tied = cfg.get("tie_word_embeddings", True)
    embeddings(tied)
    if P:
        matrix("per_layer_token_embd.weight", (V, L * P), "model.embed_tokens_per_layer.weight", Q.Q6_K)
        matrix("per_layer_model_proj.weight", (L * P, H), "model.per_layer_model_projection.weight", None)
        vector("per_layer_proj_norm.weight", P, src="model.per_layer_projection_norm.weight")
    vector("output_norm.weight", H, src="model.norm.weight")
    rot = int(hd_full * rp["full_attention"].get("partial_rotary_factor", 1.0) / 2)
    freqs = np.array([1.0] * rot + [1e30] * (hd_full // 2 - rot), dtype=np.float32)
    vector("rope_freqs.weight", hd_full // 2, freqs, src=lambda: freqs)
    for l in range(L):
        b, m = f"blk.{l}.", f"model.layers.{l}."
        D = hd_full if full[l] else hd
        KV = nkv_full if full[l] else nkv
        has_kv = l < L - shared
        Fl = F * (2 if cfg.get("use_double_wide_mlp") and not has_kv else 1)
        vector(b + "attn_norm.weight", H, src=m + "input_layernorm.weight")
        matrix(b + "attn_q.weight", (nh * D, H), m + "self_attn.q_proj.weight")
        vector(b + "attn_q_norm.weight", D, src=m + "self_attn.q_norm.weight")
        if has_kv:
            matrix(b + "attn_k.weight", (KV * D, H), m + "self_attn.k_proj.weight")
            if not (full[l] and k_eq_v):
                matrix(b + "attn_v.weight", (KV * D, H), m + "self_attn.v_proj.weight")
            vector(b + "attn_k_norm.weight", D, src=m + "self_attn.k_norm.weight")
        matrix(b + "attn_output.weight", (H, nh * D), m + "self_attn.o_proj.weight")
        vector(b + "post_attention_norm.weight", H, src=m + "post_attention_layernorm.weight")
        vector(b + "layer_output_scale.weight", 1, src=m + "layer_scalar")
        vector(b + "ffn_norm.weight", H, src=m + "pre_feedforward_layernorm.weight")
        matrix(b + "ffn_gate.weight", (Fl, H), m + "mlp.gate_proj.weight")
        matrix(b + "ffn_up.weight", (Fl, H), m + "mlp.up_proj.weight")
        matrix(b + "ffn_down.weight", (H, Fl), m + "mlp.down_proj.weight")
        vector(b + "post_ffw_norm.weight", H, src=m + "post_feedforward_layernorm.weight")
        if moe:
            vector(b + "ffn_gate_inp.weight", (E, H), rng.standard_normal((E, H), dtype=np.float32) * np.float32(0.02),
                   src=m + "router.proj.weight")
            vector(b + "ffn_gate_inp.scale", H, src=m + "router.scale")
            vector(b + "ffn_down_exps.scale", E, src=m + "router.per_expert_scale")
            vector(b + "pre_ffw_norm_2.weight", H, src=m + "pre_feedforward_layernorm_2.weight")
            vector(b + "post_ffw_norm_1.weight", H, src=m + "post_feedforward_layernorm_1.weight")
            vector(b + "post_ffw_norm_2.weight", H, src=m + "post_feedforward_layernorm_2.weight")
            fused = lambda p: (lambda: st[m + f"experts.{p}"] if m + f"experts.{p}" in st else st[m + f"experts.{p}.weight"])
            matrix(b + "ffn_gate_up_exps.weight", (E, 2 * F_exp, H), fused("gate_up_proj"))
            matrix(b + "ffn_down_exps.weight", (E, H, F_exp), fused("down_proj"))
        if P:
            matrix(b + "inp_gate.weight", (P, H), m + "per_layer_input_gate.weight")
            matrix(b + "proj.weight", (H, P), m + "per_layer_projection.weight")
            vector(b + "post_norm.weight", H, src=m + "post_per_layer_input_norm.weight")


def write_qwen3_5():
    """Qwen3.5: Gated DeltaNet (linear attention) layers and gated full attention every
    `full_attention_interval`-th layer (q_proj gives query and gate), partial rotary; the MoE form has a
    sigmoid-gated shared expert beside the routed ones. The peer wants the V heads of the linear layers
    in tiled order (k-head fastest) rather than grouped by K head, A as -exp(A_log), and norms as 1+w
    (except the DeltaNet output norm)."""
    moe = family == "qwen3_5_moe_text"
    types = cfg["layer_types"]
    interval = cfg.get("full_attention_interval") or (types.index("full_attention") + 1)
    assert all((t == "full_attention") == ((l + 1) % interval == 0) for l, t in enumerate(types)), types
    rp = cfg.get("rope_parameters") or {}
    prf = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25))
    Kd, Vd = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    nK, nV = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    K, Vv = Kd * nK, Vd * nV
    conv = cfg["linear_conv_kernel_dim"]
    common(rp.get("rope_theta", cfg.get("rope_theta", 10000000.0)))
    w.add_head_count_kv(nkv)
    w.add_key_length(hd); w.add_value_length(hd)
    n_rot = int(hd * prf)
    w.add_rope_dimension_count(n_rot)
    # The peer ropes Qwen3.5 as interleaved M-RoPE: rotary pair k takes section k % 3's position while
    # k < 3 * sections[k % 3], else the fourth's (0 for text). Text positions are equal in the first three,
    # so a split that covers every pair (HF's mrope_section, or the pairs dealt three ways) is plain rope.
    pairs = n_rot // 2
    sections = list(rp.get("mrope_section") or [(pairs + 2) // 3, (pairs + 1) // 3, pairs // 3])
    w.add_rope_dimension_sections(sections + [0] * (4 - len(sections)))
    w.add_ssm_conv_kernel(conv)
    w.add_ssm_state_size(Kd)
    w.add_ssm_group_count(nK)
    w.add_ssm_time_step_rank(nV)
    w.add_ssm_inner_size(Vv)
    w.add_full_attention_interval(interval)
    if moe:
        w.add_expert_count(E)
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        w.add_expert_feed_forward_length(F_exp)
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    tokenizer("qwen35")
    embeddings(cfg.get("tie_word_embeddings"))
    vector("output_norm.weight", H, src=plus1("model.norm.weight"))

    def tiled(x, axis, head):
        """V heads grouped by K head ([k0: v0..v{r-1}], [k1: ...]) to tiled order ([k0 v0, k1 v0, ...])."""
        x = np.moveaxis(x, axis, 0)
        r = nV // nK
        y = x.reshape(nK, r, head, *x.shape[1:]).swapaxes(0, 1).reshape(x.shape)
        return np.moveaxis(y, 0, axis)
    for l in range(L):
        b, m = f"blk.{l}.", f"model.layers.{l}."
        a = m + "linear_attn."
        vector(b + "attn_norm.weight", H, src=plus1(m + "input_layernorm.weight"))
        vector(b + "post_attention_norm.weight", H, src=plus1(m + "post_attention_layernorm.weight"))
        if types[l] == "full_attention":
            matrix(b + "attn_q.weight", (2 * nh * hd, H), m + "self_attn.q_proj.weight")
            matrix(b + "attn_k.weight", (nkv * hd, H), m + "self_attn.k_proj.weight")
            matrix(b + "attn_v.weight", (nkv * hd, H), m + "self_attn.v_proj.weight")
            matrix(b + "attn_output.weight", (H, nh * hd), m + "self_attn.o_proj.weight")
            vector(b + "attn_q_norm.weight", hd, src=plus1(m + "self_attn.q_norm.weight"))
            vector(b + "attn_k_norm.weight", hd, src=plus1(m + "self_attn.k_norm.weight"))
        else:
            def qkv():
                x = st[a + "in_proj_qkv.weight"]
                return np.concatenate([x[:2 * K], tiled(x[2 * K:], 0, Vd)])
            def conv1d():
                x = st[a + "conv1d.weight"].reshape(2 * K + Vv, conv)
                return np.concatenate([x[:2 * K], tiled(x[2 * K:], 0, Vd)])
            matrix(b + "attn_qkv.weight", (2 * K + Vv, H), qkv)
            matrix(b + "attn_gate.weight", (Vv, H), lambda: tiled(st[a + "in_proj_z.weight"], 0, Vd))
            vector(b + "ssm_conv1d.weight", (2 * K + Vv, conv), rng.standard_normal((2 * K + Vv, conv), dtype=np.float32) * np.float32(0.1),
                   src=conv1d)
            vector(b + "ssm_dt.bias", nV, 0.0, src=lambda: tiled(st[a + "dt_bias"], 0, 1))
            vector(b + "ssm_a", nV, -1.0, src=lambda: -np.exp(tiled(st[a + "A_log"], 0, 1)))
            matrix(b + "ssm_beta.weight", (nV, H), lambda: tiled(st[a + "in_proj_b.weight"], 0, 1))
            matrix(b + "ssm_alpha.weight", (nV, H), lambda: tiled(st[a + "in_proj_a.weight"], 0, 1))
            vector(b + "ssm_norm.weight", Vd, src=a + "norm.weight")
            matrix(b + "ssm_out.weight", (H, Vv), lambda: tiled(st[a + "out_proj.weight"], 1, Vd))
        if moe:
            Fs = cfg["shared_expert_intermediate_size"]
            vector(b + "ffn_gate_inp.weight", (E, H), rng.standard_normal((E, H), dtype=np.float32) * np.float32(0.02),
                   src=m + "mlp.gate.weight")
            stack = lambda p: (lambda: np.stack([st[f"{m}mlp.experts.{e}.{p}.weight"] for e in range(E)]))
            matrix(b + "ffn_gate_exps.weight", (E, F_exp, H), stack("gate_proj"))
            matrix(b + "ffn_up_exps.weight", (E, F_exp, H), stack("up_proj"))
            matrix(b + "ffn_down_exps.weight", (E, H, F_exp), stack("down_proj"))
            vector(b + "ffn_gate_inp_shexp.weight", H, 0.0, src=lambda: st[m + "mlp.shared_expert_gate.weight"].reshape(H))
            matrix(b + "ffn_gate_shexp.weight", (Fs, H), m + "mlp.shared_expert.gate_proj.weight")
            matrix(b + "ffn_up_shexp.weight", (Fs, H), m + "mlp.shared_expert.up_proj.weight")
            matrix(b + "ffn_down_shexp.weight", (H, Fs), m + "mlp.shared_expert.down_proj.weight")
        else:
            F = cfg["intermediate_size"]
            matrix(b + "ffn_gate.weight", (F, H), m + "mlp.gate_proj.weight")
            matrix(b + "ffn_up.weight", (F, H), m + "mlp.up_proj.weight")
            matrix(b + "ffn_down.weight", (H, F), m + "mlp.down_proj.weight")


{"llama": write_llama_qwen3_moe, "qwen3_moe": write_llama_qwen3_moe, "gemma4_text": write_gemma4,
 "qwen3_5_text": write_qwen3_5, "qwen3_5_moe_text": write_qwen3_5}[family]()
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", args.out, os.path.getsize(args.out), "bytes")
