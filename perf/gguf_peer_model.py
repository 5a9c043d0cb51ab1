# The llama.cpp peer's GGUF for a Sluice preset (`llama` or `qwen3_moe`): the same shape (read from the
# preset's config.json) and tokenizer (its tokenizer.json), random weights, in the types llama-quantize's
# Q4_0 gives each tensor. Writing the quantized blocks directly, rather than converting a bf16 folder and
# quantizing it, is what makes a 30B shape fit the GPU machine's disk (61 GB of bf16 + its GGUF would
# not) and saves an 8B sitting the minutes of transformers, conversion and quantization. Speed does not
# depend on the values; the blocks' scales are ordinary numbers (no NaN, no subnormals) so neither side
# meets slow arithmetic. Token ids past the tokenizer's are "[PADn]" of type UNUSED, as llama.cpp's
# converter writes them.
#
#   PYTHONPATH=PEER/lcpp/gguf-py python3 perf/gguf_peer_model.py MODEL_DIR OUT.gguf [--weights q4_0|f16]
#
# --weights f16 writes every matrix in f16 instead: quantized by llama-quantize it must list the same
# tensor types as --weights q4_0 (how the type choices below are checked on a small config).
import argparse, json, os
import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as Q, TokenType

ap = argparse.ArgumentParser()
ap.add_argument("model"); ap.add_argument("out")
ap.add_argument("--weights", choices=["q4_0", "f16"], default="q4_0")
args = ap.parse_args()
cfg = json.load(open(os.path.join(args.model, "config.json")))
ARCH = {"qwen3_moe": "qwen3moe", "llama": "llama"}
if cfg.get("model_type") not in ARCH:
    raise SystemExit(f"{args.model}: model_type {cfg.get('model_type')!r}; this writer knows {', '.join(ARCH)}")
moe = cfg["model_type"] == "qwen3_moe"
H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
hd = cfg.get("head_dim") or H // nh
E, F = (cfg["num_experts"], cfg["moe_intermediate_size"]) if moe else (1, cfg["intermediate_size"])
V = cfg["vocab_size"]
rng = np.random.default_rng(1)

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
largest = max(V * H, E * F * H)
pools = {} if args.weights == "f16" else {q: pool(q, largest // BLOCK[q][0] * BLOCK[q][1] + BLOCK[q][1]) for q in BLOCK}
f16_pool = rng.standard_normal(largest, dtype=np.float32).astype(np.float16) * np.float16(0.02) if args.weights == "f16" else None

w = GGUFWriter(args.out, ARCH[cfg["model_type"]])
def matrix(name, shape, qtype=Q.Q4_0):
    """A weight of numpy shape `shape` (rows last-but-one, the reduced width last)."""
    n = int(np.prod(shape))
    if args.weights == "f16":
        w.add_tensor(name, f16_pool[:n].reshape(shape))
        return
    elems, size = BLOCK[qtype]
    assert shape[-1] % elems == 0, (name, shape)
    data = pools[qtype][: n // elems * size].reshape(*shape[:-1], shape[-1] // elems * size)
    w.add_tensor(name, data, raw_dtype=qtype)
def vector(name, n, value=1.0):
    w.add_tensor(name, np.full(n, value, dtype=np.float32))

w.add_name("sluice-peer-" + os.path.basename(os.path.normpath(args.model)))
w.add_context_length(cfg.get("max_position_embeddings", 40960))
w.add_embedding_length(H)
w.add_block_count(L)
w.add_feed_forward_length(cfg.get("intermediate_size", F))
w.add_head_count(nh)
w.add_head_count_kv(nkv)
w.add_key_length(hd)
w.add_value_length(hd)
w.add_rope_freq_base(float(cfg.get("rope_theta", 1000000.0)))
w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-6))
if moe:
    w.add_expert_count(E)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(F)
else:
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(V)
w.add_file_type(1 if args.weights == "f16" else 2)  # LLAMA_FTYPE_MOSTLY_F16 / MOSTLY_Q4_0
if args.weights != "f16":
    w.add_quantization_version(2)  # GGML_QNT_VERSION, as llama-quantize writes it

# The tokenizer: byte-level BPE with Qwen2's pre-tokenization, ids as in tokenizer.json.
tok = json.load(open(os.path.join(args.model, "tokenizer.json")))
ids = dict(tok["model"]["vocab"])
ids.update({t["content"]: t["id"] for t in tok.get("added_tokens", [])})
by_id = {i: s for s, i in ids.items()}
control = {t["id"] for t in tok.get("added_tokens", []) if t.get("special")}
tokens = [by_id.get(i, f"[PAD{i}]") for i in range(V)]
kinds = [TokenType.CONTROL if i in control else TokenType.NORMAL if i in by_id else TokenType.UNUSED for i in range(V)]
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("qwen2")
w.add_token_list(tokens)
w.add_token_types(kinds)
w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
w.add_eos_token_id(min(control) if control else 0)
w.add_add_bos_token(False)

# llama-quantize's Q4_0: every matrix Q4_0 except the output (Q6_K) and a MoE router (kept as
# converted, f32); norms f32.
matrix("token_embd.weight", (V, H))
vector("output_norm.weight", H)
if not cfg.get("tie_word_embeddings"):
    matrix("output.weight", (V, H), Q.Q6_K)
for l in range(L):
    b = f"blk.{l}."
    vector(b + "attn_norm.weight", H)
    vector(b + "ffn_norm.weight", H)
    if moe:
        vector(b + "attn_q_norm.weight", hd)
        vector(b + "attn_k_norm.weight", hd)
    matrix(b + "attn_q.weight", (nh * hd, H))
    matrix(b + "attn_k.weight", (nkv * hd, H))
    matrix(b + "attn_v.weight", (nkv * hd, H))
    matrix(b + "attn_output.weight", (H, nh * hd))
    if moe:
        w.add_tensor(b + "ffn_gate_inp.weight", rng.standard_normal((E, H), dtype=np.float32) * np.float32(0.02))
        matrix(b + "ffn_gate_exps.weight", (E, F, H))
        matrix(b + "ffn_up_exps.weight", (E, F, H))
        matrix(b + "ffn_down_exps.weight", (E, H, F))
    else:
        matrix(b + "ffn_gate.weight", (F, H))
        matrix(b + "ffn_up.weight", (F, H))
        matrix(b + "ffn_down.weight", (H, F))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", args.out, os.path.getsize(args.out), "bytes")
