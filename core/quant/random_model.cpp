#include "quant/random_model.h"

#include <functional>
#include <thread>

#include <cmath>

#include "quant/affine.h"
#include "quant/quantizer.h"

namespace sluice::quant {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The generated value distribution of a tensor: uniform on [-a, a] (a = sqrt(3) * std), or a constant.
struct Init {
  float half_width = 0.0f;
  float constant = 0.0f;
};

Init init_for(const ModelPreset& p, const TensorPlan& t) {
  const std::string& n = t.name;
  if (t.shape.size() == 1 && n.ends_with("norm.weight")) return {0.0f, 1.0f};
  // Gemma 4's scales: the layer's output, the router's input and its per-expert weights.
  if (n.ends_with("layer_scalar") || n.ends_with("router.scale") || n.ends_with("router.per_expert_scale")) return {0.0f, 1.0f};
  auto uniform = [](double std) { return Init{static_cast<float>(std * std::sqrt(3.0)), 0.0f}; };
  if (t.shape.size() == 1 || n.ends_with("_bias")) return uniform(0.02);  // linear biases (gpt-oss's experts': [E, out]), sinks
  if (n.find("embed_tokens") != std::string::npos) return uniform(0.02);
  // gpt-oss's fused experts are stored input-major ([E, in, out]).
  const bool input_major = n.ends_with("mlp.experts.gate_up_proj") || n.ends_with("mlp.experts.down_proj");
  const double fan_in = static_cast<double>(input_major ? t.shape[t.shape.size() - 2] : t.shape.back());
  double std = 1.0 / std::sqrt(fan_in);
  if (n.find("o_proj") != std::string::npos || n.find("down_proj") != std::string::npos)
    std /= std::sqrt(2.0 * p.layers);
  return uniform(std);
}

// fn(begin, end) over [0, n) split across the machine's cores.
void parallel_rows(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn) {
  const std::size_t threads = std::max(1u, std::thread::hardware_concurrency());
  if (threads == 1 || n < 2 * threads) {
    fn(0, n);
    return;
  }
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t) {
    const std::size_t b = n * t / threads, e = n * (t + 1) / threads;
    if (b < e) pool.emplace_back(fn, b, e);
  }
  for (auto& th : pool) th.join();
}

// Values [begin, begin + n) of a tensor's stream.
void generate(uint64_t key, Init init, uint64_t begin, std::size_t n, float* out) {
  if (init.half_width == 0.0f) {
    std::fill(out, out + n, init.constant);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const uint64_t r = splitmix64(key + begin + i);
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
    out[i] = (2.0f * u - 1.0f) * init.half_width;
  }
}

rapidjson::Document preset_config(const ModelPreset& p) {
  rapidjson::Document d(rapidjson::kObjectType);
  auto& a = d.GetAllocator();
  rapidjson::Value archs(rapidjson::kArrayType);
  archs.PushBack(rapidjson::Value(p.architecture.c_str(), a), a);
  d.AddMember("architectures", archs, a);
  d.AddMember("model_type", rapidjson::Value(p.model_type.c_str(), a), a);
  d.AddMember("hidden_size", p.hidden, a);
  d.AddMember("intermediate_size", p.ffn, a);
  d.AddMember("num_hidden_layers", p.layers, a);
  d.AddMember("num_attention_heads", p.heads, a);
  d.AddMember("num_key_value_heads", p.kv_heads, a);
  d.AddMember("head_dim", p.head_dim, a);
  d.AddMember("vocab_size", p.vocab, a);
  d.AddMember("max_position_embeddings", p.max_positions, a);
  const bool gpt_oss = p.model_type == "gpt_oss";
  d.AddMember("rms_norm_eps", gpt_oss ? 1e-5 : 1e-6, a);
  d.AddMember("rope_theta", p.rope_theta, a);
  d.AddMember("tie_word_embeddings", p.tied, a);
  if (p.gemma4()) {
    d.AddMember("hidden_activation", "gelu_pytorch_tanh", a);
    rapidjson::Value types(rapidjson::kArrayType);
    for (int i = 0; i < p.layers; ++i)
      types.PushBack(rapidjson::Value((i + 1) % p.full_every == 0 || i + 1 == p.layers ? "full_attention" : "sliding_attention", a), a);
    d.AddMember("layer_types", types, a);
    d.AddMember("sliding_window", p.sliding_window, a);
    d.AddMember("global_head_dim", p.global_head_dim, a);
    d.AddMember("attention_k_eq_v", p.k_eq_v, a);
    if (p.k_eq_v) d.AddMember("num_global_key_value_heads", p.global_kv_heads, a);
    d.AddMember("num_kv_shared_layers", p.kv_shared, a);
    d.AddMember("use_double_wide_mlp", p.double_wide, a);
    d.AddMember("hidden_size_per_layer_input", p.per_layer_input, a);
    d.AddMember("vocab_size_per_layer_input", p.vocab, a);
    d.AddMember("final_logit_softcapping", 30.0, a);
    rapidjson::Value rope(rapidjson::kObjectType), full(rapidjson::kObjectType), sliding(rapidjson::kObjectType);
    full.AddMember("rope_type", "proportional", a);
    full.AddMember("partial_rotary_factor", 0.25, a);
    full.AddMember("rope_theta", 1000000.0, a);
    sliding.AddMember("rope_type", "default", a);
    sliding.AddMember("rope_theta", 10000.0, a);
    rope.AddMember("full_attention", full, a);
    rope.AddMember("sliding_attention", sliding, a);
    d.AddMember("rope_parameters", rope, a);
    d.AddMember("enable_moe_block", p.experts > 0, a);
    if (p.experts > 0) {
      d.AddMember("num_experts", p.experts, a);
      d.AddMember("top_k_experts", p.experts_per_token, a);
      d.AddMember("moe_intermediate_size", p.expert_ffn, a);
    }
  } else {
    d.AddMember("hidden_act", "silu", a);
  }
  if (p.qkv_bias && p.model_type != "qwen2") d.AddMember("attention_bias", true, a);  // qwen2 implies it
  d.AddMember("torch_dtype", "bfloat16", a);
  d.AddMember("bos_token_id", rapidjson::Value(rapidjson::kNullType), a);
  d.AddMember("eos_token_id", 2, a);  // the bundled tokenizer's <|im_end|>
  if (gpt_oss) {  // GptOssConfig's fields as gpt-oss-20b's config.json has them
    d.AddMember("attention_bias", true, a);
    d.AddMember("num_local_experts", p.experts, a);
    d.AddMember("num_experts_per_tok", p.experts_per_token, a);
    d.AddMember("sliding_window", p.sliding_window, a);
    rapidjson::Value types(rapidjson::kArrayType);
    for (int i = 0; i < p.layers; ++i) types.PushBack(rapidjson::StringRef(i % 2 == 0 ? "sliding_attention" : "full_attention"), a);
    d.AddMember("layer_types", types, a);
    rapidjson::Value rope(rapidjson::kObjectType);
    rope.AddMember("rope_type", "yarn", a);
    rope.AddMember("rope_theta", p.rope_theta, a);
    rope.AddMember("factor", 32.0, a);
    rope.AddMember("beta_fast", 32.0, a);
    rope.AddMember("beta_slow", 1.0, a);
    rope.AddMember("truncate", false, a);
    rope.AddMember("original_max_position_embeddings", 4096, a);
    d.AddMember("rope_parameters", rope, a);
    d.AddMember("swiglu_limit", 7.0, a);
  } else if (p.qwen35()) {  // Qwen3_5MoeTextConfig's fields as Qwen3.5-35B-A3B's text_config has them
    rapidjson::Value types(rapidjson::kArrayType);
    for (int i = 0; i < p.layers; ++i)
      types.PushBack(rapidjson::StringRef((i + 1) % p.full_every == 0 ? "full_attention" : "linear_attention"), a);
    d.AddMember("layer_types", types, a);
    d.AddMember("full_attention_interval", p.full_every, a);
    d.AddMember("linear_num_key_heads", p.linear_key_heads, a);
    d.AddMember("linear_num_value_heads", p.linear_value_heads, a);
    d.AddMember("linear_key_head_dim", p.linear_head_dim, a);
    d.AddMember("linear_value_head_dim", p.linear_head_dim, a);
    d.AddMember("linear_conv_kernel_dim", p.conv_kernel, a);
    d.AddMember("attn_output_gate", true, a);
    d.AddMember("partial_rotary_factor", p.partial_rotary, a);
    rapidjson::Value rope(rapidjson::kObjectType);
    rope.AddMember("rope_type", "default", a);
    rope.AddMember("rope_theta", p.rope_theta, a);
    rope.AddMember("partial_rotary_factor", p.partial_rotary, a);
    d.AddMember("rope_parameters", rope, a);
    d.AddMember("num_experts", p.experts, a);
    d.AddMember("num_experts_per_tok", p.experts_per_token, a);
    d.AddMember("moe_intermediate_size", p.expert_ffn, a);
    d.AddMember("shared_expert_intermediate_size", p.shared_expert_ffn, a);
    d.AddMember("norm_topk_prob", true, a);
  } else if (p.experts > 0 && !p.gemma4()) {
    d.AddMember("num_experts", p.experts, a);
    d.AddMember("num_experts_per_tok", p.experts_per_token, a);
    d.AddMember("moe_intermediate_size", p.expert_ffn, a);
    d.AddMember("norm_topk_prob", true, a);
    d.AddMember("decoder_sparse_step", 1, a);
    d.AddMember("mlp_only_layers", rapidjson::Value(rapidjson::kArrayType), a);
  }
  if (p.deepseek()) {  // DeepseekV3Config's attention fields; no routed experts, so every layer is dense
    d.AddMember("q_lora_rank", p.q_lora_rank, a);
    d.AddMember("kv_lora_rank", p.kv_lora_rank, a);
    d.AddMember("qk_nope_head_dim", p.qk_nope_head_dim, a);
    d.AddMember("qk_rope_head_dim", p.qk_rope_head_dim, a);
    d.AddMember("v_head_dim", p.v_head_dim, a);
    d.AddMember("rope_interleave", true, a);
    d.AddMember("attention_bias", false, a);
  }
  rapidjson::Value made(rapidjson::kObjectType);
  made.AddMember("preset", rapidjson::Value(p.name.c_str(), a), a);
  made.AddMember("note", "random weights; token ids past the bundled tokenizer's 8192 have no text", a);
  d.AddMember("sluice_make_model", made, a);
  return d;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = [] {
    std::vector<ModelPreset> v;
    ModelPreset p;
    // Tiny shapes for tests: seconds to write and run.
    p = {};
    p.name = "tiny-qwen2"; p.model_type = "qwen2"; p.architecture = "Qwen2ForCausalLM";
    p.description = "test size: hidden 64, 2 layers, 4/2 heads, FFN 128, vocab 8192, tied";
    p.hidden = 64; p.layers = 2; p.heads = 4; p.kv_heads = 2; p.head_dim = 16; p.ffn = 128; p.vocab = 8192;
    p.tied = true; p.qkv_bias = true; p.max_positions = 4096;
    v.push_back(p);
    p = {};
    p.name = "tiny-qwen3-moe"; p.model_type = "qwen3_moe"; p.architecture = "Qwen3MoeForCausalLM";
    p.description = "test size MoE: hidden 64, 2 layers, 4/2 heads, 16 experts top-4, expert FFN 32";
    p.hidden = 64; p.layers = 2; p.heads = 4; p.kv_heads = 2; p.head_dim = 16; p.ffn = 128; p.vocab = 8192;
    p.qk_norm = true; p.experts = 16; p.experts_per_token = 4; p.expert_ffn = 32; p.max_positions = 2048;
    v.push_back(p);
    p = {};
    p.name = "qwen2-0.5b"; p.model_type = "qwen2"; p.architecture = "Qwen2ForCausalLM";
    p.description = "Qwen2-0.5B shape: hidden 896, 24 layers, 14/2 heads, FFN 4864, vocab 151936, tied";
    p.hidden = 896; p.layers = 24; p.heads = 14; p.kv_heads = 2; p.head_dim = 64; p.ffn = 4864; p.vocab = 151936;
    p.tied = true; p.qkv_bias = true; p.rope_theta = 1000000.0;
    v.push_back(p);
    p = {};
    p.name = "llama3-8b"; p.model_type = "llama"; p.architecture = "LlamaForCausalLM";
    p.description = "Llama-3-8B shape: hidden 4096, 32 layers, 32/8 heads, FFN 14336, vocab 128256";
    p.hidden = 4096; p.layers = 32; p.heads = 32; p.kv_heads = 8; p.head_dim = 128; p.ffn = 14336; p.vocab = 128256;
    p.rope_theta = 500000.0; p.max_positions = 8192;
    v.push_back(p);
    p = {};  // llama3-8b's vocabulary: a draft model for it (speculative decoding)
    p.name = "llama3.2-1b"; p.model_type = "llama"; p.architecture = "LlamaForCausalLM";
    p.description = "Llama-3.2-1B shape: hidden 2048, 16 layers, 32/8 heads, head_dim 64, FFN 8192, vocab 128256, tied";
    p.hidden = 2048; p.layers = 16; p.heads = 32; p.kv_heads = 8; p.head_dim = 64; p.ffn = 8192; p.vocab = 128256; p.tied = true;
    p.rope_theta = 500000.0; p.max_positions = 8192;
    v.push_back(p);
    p = {};
    p.name = "qwen3-30b-a3b"; p.model_type = "qwen3_moe"; p.architecture = "Qwen3MoeForCausalLM";
    p.description = "Qwen3-30B-A3B shape: 48 layers, hidden 2048, 32/4 heads, head_dim 128, 128 experts top-8, expert FFN 768";
    p.hidden = 2048; p.layers = 48; p.heads = 32; p.kv_heads = 4; p.head_dim = 128; p.ffn = 6144; p.vocab = 151936;
    p.qk_norm = true; p.experts = 128; p.experts_per_token = 8; p.expert_ffn = 768; p.rope_theta = 1000000.0;
    p.max_positions = 40960;
    v.push_back(p);
    // Gemma 4 (google/gemma-4-* config.json shapes, text decoder only).
    p = {};
    p.name = "tiny-gemma4"; p.model_type = "gemma4_text"; p.architecture = "Gemma4ForCausalLM";
    p.description = "test size Gemma 4: hidden 64, 6 layers (5 sliding, 1 full of head 32, K as V), 4/2 heads, per-layer inputs 16, 2 KV-sharing";
    p.hidden = 64; p.layers = 6; p.heads = 4; p.kv_heads = 2; p.head_dim = 16; p.ffn = 128; p.vocab = 8192; p.tied = true;
    p.global_head_dim = 32; p.global_kv_heads = 2; p.full_every = 3; p.sliding_window = 8; p.per_layer_input = 16;
    p.kv_shared = 2; p.double_wide = true; p.k_eq_v = true; p.max_positions = 4096;
    v.push_back(p);
    p = {};
    p.name = "gemma-4-e4b"; p.model_type = "gemma4_text"; p.architecture = "Gemma4ForCausalLM";
    p.description = "Gemma-4-E4B shape: hidden 2560, 42 layers (every 6th full), 8/2 heads, head_dim 256/512, FFN 10240, "
                    "per-layer inputs 256, 18 KV-sharing layers, vocab 262144, tied";
    p.hidden = 2560; p.layers = 42; p.heads = 8; p.kv_heads = 2; p.head_dim = 256; p.ffn = 10240; p.vocab = 262144; p.tied = true;
    p.global_head_dim = 512; p.global_kv_heads = 2; p.full_every = 6; p.sliding_window = 512; p.per_layer_input = 256;
    p.kv_shared = 18; p.double_wide = true; p.max_positions = 131072;
    v.push_back(p);
    p = {};
    p.name = "gemma-4-26b-a4b"; p.model_type = "gemma4_text"; p.architecture = "Gemma4ForCausalLM";
    p.description = "Gemma-4-26B-A4B shape: hidden 2816, 30 layers (every 6th full, K as V), 16/8 heads (2 on full layers), "
                    "head_dim 256/512, MLP 2112 beside 128 experts top-8 of 704, vocab 262144, tied";
    p.hidden = 2816; p.layers = 30; p.heads = 16; p.kv_heads = 8; p.head_dim = 256; p.ffn = 2112; p.vocab = 262144; p.tied = true;
    p.global_head_dim = 512; p.global_kv_heads = 2; p.full_every = 6; p.sliding_window = 1024; p.k_eq_v = true;
    p.experts = 128; p.experts_per_token = 8; p.expert_ffn = 704; p.max_positions = 262144;
    v.push_back(p);
    p = {};
    p.name = "tiny-qwen3.5-moe"; p.model_type = "qwen3_5_moe_text"; p.architecture = "Qwen3_5MoeForCausalLM";
    p.description = "test size Qwen3.5 MoE: hidden 64, 4 layers (3 Gated DeltaNet, 1 gated full attention), 4/2 heads, "
                    "16 experts top-4 of 64 and a shared expert of 64 (every width a multiple of 64: quantizable)";
    p.hidden = 64; p.layers = 4; p.heads = 4; p.kv_heads = 2; p.head_dim = 16; p.ffn = 128; p.vocab = 8192; p.max_positions = 4096;
    p.full_every = 4; p.linear_key_heads = 2; p.linear_value_heads = 4; p.linear_head_dim = 16; p.conv_kernel = 4;
    p.experts = 16; p.experts_per_token = 4; p.expert_ffn = 64; p.shared_expert_ffn = 64; p.partial_rotary = 0.25;
    v.push_back(p);
    p = {};
    p.name = "qwen3.5-35b-a3b"; p.model_type = "qwen3_5_moe_text"; p.architecture = "Qwen3_5MoeForCausalLM";
    p.description = "Qwen3.5-35B-A3B shape (text): hidden 2048, 40 layers (every 4th gated full attention, 16/2 heads of 256; "
                    "the rest Gated DeltaNet 16/32 heads of 128), 256 experts top-8 of 512 and a shared expert of 512, vocab 248320";
    p.hidden = 2048; p.layers = 40; p.heads = 16; p.kv_heads = 2; p.head_dim = 256; p.ffn = 512; p.vocab = 248320;
    p.max_positions = 262144; p.rope_theta = 10000000.0; p.partial_rotary = 0.25;
    p.full_every = 4; p.linear_key_heads = 16; p.linear_value_heads = 32; p.linear_head_dim = 128; p.conv_kernel = 4;
    p.experts = 256; p.experts_per_token = 8; p.expert_ffn = 512; p.shared_expert_ffn = 512;
    v.push_back(p);
    p = {};
    p.name = "tiny-deepseek-v3"; p.model_type = "deepseek_v3"; p.architecture = "DeepseekV3ForCausalLM";
    p.description = "test size DeepSeek-V3 attention (MLA): hidden 64, 2 dense layers, 4 heads, q/kv latents 64, nope 16, rope 16, "
                    "v 32, FFN 128 (every width a multiple of 32: quantizable)";
    p.hidden = 64; p.layers = 2; p.heads = 4; p.kv_heads = 4; p.head_dim = 32; p.ffn = 128; p.vocab = 8192; p.max_positions = 2048;
    p.q_lora_rank = 64; p.kv_lora_rank = 64; p.qk_nope_head_dim = 16; p.qk_rope_head_dim = 16; p.v_head_dim = 32;
    v.push_back(p);
    p = {};
    p.name = "tiny-gpt-oss"; p.model_type = "gpt_oss"; p.architecture = "GptOssForCausalLM";
    p.description = "test size gpt-oss: hidden 64, 2 layers, 4/2 heads, 8 experts top-2, expert FFN 64, window 8";
    p.hidden = 64; p.layers = 2; p.heads = 4; p.kv_heads = 2; p.head_dim = 16; p.ffn = 64; p.vocab = 8192;
    p.qkv_bias = true; p.experts = 8; p.experts_per_token = 2; p.expert_ffn = 64; p.rope_theta = 150000.0;
    p.max_positions = 2048; p.sliding_window = 8;
    v.push_back(p);
    p = {};
    p.name = "gpt-oss-20b"; p.model_type = "gpt_oss"; p.architecture = "GptOssForCausalLM";
    p.description = "gpt-oss-20b shape (bf16, not MXFP4): 24 layers, hidden 2880, 64/8 heads, head_dim 64, 32 experts top-4, expert FFN 2880";
    p.hidden = 2880; p.layers = 24; p.heads = 64; p.kv_heads = 8; p.head_dim = 64; p.ffn = 2880; p.vocab = 201088;
    p.qkv_bias = true; p.experts = 32; p.experts_per_token = 4; p.expert_ffn = 2880; p.rope_theta = 150000.0;
    p.max_positions = 131072; p.sliding_window = 128;
    v.push_back(p);
    return v;
  }();
  return presets;
}

const ModelPreset* find_preset(const std::string& name) {
  for (const auto& p : model_presets())
    if (p.name == name) return &p;
  return nullptr;
}

namespace {

// Gemma 4's tensors (transformers' names; the experts as stacked `.weight` tensors, which `quantize` packs).
std::vector<TensorPlan> gemma4_tensors(const ModelPreset& p) {
  const int64_t H = p.hidden, L = p.layers, P = p.per_layer_input;
  std::vector<TensorPlan> t;
  auto add = [&](std::string name, std::vector<int64_t> shape) { t.push_back({std::move(name), DType::kBF16, std::move(shape)}); };
  add("model.embed_tokens.weight", {p.vocab, H});
  if (P > 0) {
    add("model.embed_tokens_per_layer.weight", {p.vocab, L * P});
    add("model.per_layer_model_projection.weight", {L * P, H});
    add("model.per_layer_projection_norm.weight", {P});
  }
  const int first_shared = p.kv_shared > 0 ? p.layers - p.kv_shared : p.layers;
  for (int i = 0; i < p.layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    const bool full = (i + 1) % p.full_every == 0 || i + 1 == p.layers;
    const int64_t D = full ? p.global_head_dim : p.head_dim;
    const int64_t KV = full && p.k_eq_v ? p.global_kv_heads : p.kv_heads;
    const int64_t F = int64_t(p.ffn) * (p.double_wide && i >= first_shared ? 2 : 1);
    add(l + "input_layernorm.weight", {H});
    add(l + "self_attn.q_proj.weight", {int64_t(p.heads) * D, H});
    add(l + "self_attn.q_norm.weight", {D});
    if (i < first_shared) {
      add(l + "self_attn.k_proj.weight", {KV * D, H});
      if (!(full && p.k_eq_v)) add(l + "self_attn.v_proj.weight", {KV * D, H});
      add(l + "self_attn.k_norm.weight", {D});
    }
    add(l + "self_attn.o_proj.weight", {H, int64_t(p.heads) * D});
    add(l + "post_attention_layernorm.weight", {H});
    add(l + "pre_feedforward_layernorm.weight", {H});
    add(l + "post_feedforward_layernorm.weight", {H});
    add(l + "mlp.gate_proj.weight", {F, H});
    add(l + "mlp.up_proj.weight", {F, H});
    add(l + "mlp.down_proj.weight", {H, F});
    if (p.experts > 0) {
      const int64_t E = p.experts, EF = p.expert_ffn;
      add(l + "router.proj.weight", {E, H});
      add(l + "router.scale", {H});
      add(l + "router.per_expert_scale", {E});
      add(l + "experts.gate_up_proj.weight", {E, 2 * EF, H});
      add(l + "experts.down_proj.weight", {E, H, EF});
      add(l + "post_feedforward_layernorm_1.weight", {H});
      add(l + "post_feedforward_layernorm_2.weight", {H});
      add(l + "pre_feedforward_layernorm_2.weight", {H});
    }
    if (P > 0) {
      add(l + "per_layer_input_gate.weight", {P, H});
      add(l + "per_layer_projection.weight", {H, P});
      add(l + "post_per_layer_input_norm.weight", {H});
    }
    add(l + "layer_scalar", {1});
  }
  add("model.norm.weight", {H});
  if (!p.tied) add("lm_head.weight", {p.vocab, H});
  return t;
}

// DeepSeek-V3's dense layers (transformers' names): attention through the q and kv latents.
std::vector<TensorPlan> deepseek_tensors(const ModelPreset& p) {
  const int64_t H = p.hidden, NH = p.heads, QL = p.q_lora_rank, KL = p.kv_lora_rank, R = p.qk_rope_head_dim;
  const int64_t NOPE = p.qk_nope_head_dim, V = p.v_head_dim;
  std::vector<TensorPlan> t;
  auto add = [&](std::string name, std::vector<int64_t> shape) { t.push_back({std::move(name), DType::kBF16, std::move(shape)}); };
  add("model.embed_tokens.weight", {p.vocab, H});
  for (int i = 0; i < p.layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    add(l + "input_layernorm.weight", {H});
    add(l + "self_attn.q_a_proj.weight", {QL, H});
    add(l + "self_attn.q_a_layernorm.weight", {QL});
    add(l + "self_attn.q_b_proj.weight", {NH * (NOPE + R), QL});
    add(l + "self_attn.kv_a_proj_with_mqa.weight", {KL + R, H});
    add(l + "self_attn.kv_a_layernorm.weight", {KL});
    add(l + "self_attn.kv_b_proj.weight", {NH * (NOPE + V), KL});
    add(l + "self_attn.o_proj.weight", {H, NH * V});
    add(l + "post_attention_layernorm.weight", {H});
    add(l + "mlp.gate_proj.weight", {p.ffn, H});
    add(l + "mlp.up_proj.weight", {p.ffn, H});
    add(l + "mlp.down_proj.weight", {H, p.ffn});
  }
  add("model.norm.weight", {H});
  if (!p.tied) add("lm_head.weight", {p.vocab, H});
  return t;
}

// Qwen3.5 MoE's tensors (transformers' names for the text model; the routed experts stacked in MLX's
// switch_mlp form, as the qwen3_moe presets write them).
std::vector<TensorPlan> qwen35_tensors(const ModelPreset& p) {
  const int64_t H = p.hidden, D = p.head_dim, E = p.experts, F = p.expert_ffn, SF = p.shared_expert_ffn;
  const int64_t KEYS = int64_t(p.linear_key_heads) * p.linear_head_dim, VALUES = int64_t(p.linear_value_heads) * p.linear_head_dim;
  const int64_t CONV = 2 * KEYS + VALUES;  // q, k and v through the causal conv
  std::vector<TensorPlan> t;
  auto add = [&](std::string name, std::vector<int64_t> shape) { t.push_back({std::move(name), DType::kBF16, std::move(shape)}); };
  add("model.embed_tokens.weight", {p.vocab, H});
  for (int i = 0; i < p.layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    add(l + "input_layernorm.weight", {H});
    if ((i + 1) % p.full_every == 0) {
      add(l + "self_attn.q_proj.weight", {2 * p.heads * D, H});
      add(l + "self_attn.k_proj.weight", {p.kv_heads * D, H});
      add(l + "self_attn.v_proj.weight", {p.kv_heads * D, H});
      add(l + "self_attn.o_proj.weight", {H, p.heads * D});
      add(l + "self_attn.q_norm.weight", {D});
      add(l + "self_attn.k_norm.weight", {D});
    } else {
      add(l + "linear_attn.in_proj_qkv.weight", {CONV, H});
      add(l + "linear_attn.in_proj_z.weight", {VALUES, H});
      add(l + "linear_attn.in_proj_a.weight", {p.linear_value_heads, H});
      add(l + "linear_attn.in_proj_b.weight", {p.linear_value_heads, H});
      add(l + "linear_attn.conv1d.weight", {CONV, 1, p.conv_kernel});
      add(l + "linear_attn.A_log", {p.linear_value_heads});
      add(l + "linear_attn.dt_bias", {p.linear_value_heads});
      add(l + "linear_attn.norm.weight", {p.linear_head_dim});
      add(l + "linear_attn.out_proj.weight", {H, VALUES});
    }
    add(l + "post_attention_layernorm.weight", {H});
    add(l + "mlp.gate.weight", {E, H});
    add(l + "mlp.switch_mlp.gate_proj.weight", {E, F, H});
    add(l + "mlp.switch_mlp.up_proj.weight", {E, F, H});
    add(l + "mlp.switch_mlp.down_proj.weight", {E, H, F});
    add(l + "mlp.shared_expert.gate_proj.weight", {SF, H});
    add(l + "mlp.shared_expert.up_proj.weight", {SF, H});
    add(l + "mlp.shared_expert.down_proj.weight", {H, SF});
    add(l + "mlp.shared_expert_gate.weight", {1, H});
  }
  add("model.norm.weight", {H});
  if (!p.tied) add("lm_head.weight", {p.vocab, H});
  return t;
}

}  // namespace

std::vector<TensorPlan> preset_tensors(const ModelPreset& p) {
  if (p.gemma4()) return gemma4_tensors(p);
  if (p.qwen35()) return qwen35_tensors(p);
  if (p.deepseek()) return deepseek_tensors(p);
  const int64_t H = p.hidden, D = p.head_dim, QD = int64_t(p.heads) * D, KD = int64_t(p.kv_heads) * D;
  std::vector<TensorPlan> t;
  auto add = [&](std::string name, std::vector<int64_t> shape) { t.push_back({std::move(name), DType::kBF16, std::move(shape)}); };
  add("model.embed_tokens.weight", {p.vocab, H});
  for (int i = 0; i < p.layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    add(l + "input_layernorm.weight", {H});
    add(l + "self_attn.q_proj.weight", {QD, H});
    add(l + "self_attn.k_proj.weight", {KD, H});
    add(l + "self_attn.v_proj.weight", {KD, H});
    add(l + "self_attn.o_proj.weight", {H, QD});
    if (p.qkv_bias) {
      add(l + "self_attn.q_proj.bias", {QD});
      add(l + "self_attn.k_proj.bias", {KD});
      add(l + "self_attn.v_proj.bias", {KD});
    }
    if (p.qk_norm) {
      add(l + "self_attn.q_norm.weight", {D});
      add(l + "self_attn.k_norm.weight", {D});
    }
    add(l + "post_attention_layernorm.weight", {H});
    if (p.model_type == "gpt_oss") {
      const int64_t E = p.experts, F = p.expert_ffn;
      add(l + "self_attn.o_proj.bias", {H});
      add(l + "self_attn.sinks", {p.heads});
      add(l + "mlp.router.weight", {E, H});
      add(l + "mlp.router.bias", {E});
      add(l + "mlp.experts.gate_up_proj", {E, H, 2 * F});  // input-major, gate and up interleaved
      add(l + "mlp.experts.gate_up_proj_bias", {E, 2 * F});
      add(l + "mlp.experts.down_proj", {E, F, H});
      add(l + "mlp.experts.down_proj_bias", {E, H});
    } else if (p.experts > 0) {
      const int64_t E = p.experts, F = p.expert_ffn;
      add(l + "mlp.gate.weight", {E, H});
      add(l + "mlp.switch_mlp.gate_proj.weight", {E, F, H});
      add(l + "mlp.switch_mlp.up_proj.weight", {E, F, H});
      add(l + "mlp.switch_mlp.down_proj.weight", {E, H, F});
    } else {
      add(l + "mlp.gate_proj.weight", {p.ffn, H});
      add(l + "mlp.up_proj.weight", {p.ffn, H});
      add(l + "mlp.down_proj.weight", {H, p.ffn});
    }
  }
  add("model.norm.weight", {H});
  if (!p.tied) add("lm_head.weight", {p.vocab, H});
  return t;
}

Result<uint64_t> make_model(const MakeModelOptions& o) {
  const ModelPreset* p = find_preset(o.preset);
  if (!p) {
    std::string names;
    for (const auto& q : model_presets()) names += (names.empty() ? "" : ", ") + q.name;
    return make_error("unknown preset '" + o.preset + "' (presets: " + names + ")");
  }
  if (o.bits && !supported_bits(o.bits)) return make_error("--bits must be one of 2, 3, 4, 5, 6, 8");
  if (o.bits && p->model_type == "gpt_oss")
    return make_error("preset '" + p->name + "' is written in bf16 only: gpt-oss's fused experts have no quantized form here yet");
  if (o.bits && !supported_group(o.group_size)) return make_error("--group-size must be 32, 64 or 128");
  if (!std::filesystem::is_regular_file(o.tokenizer_from / "tokenizer.json"))
    return make_error("no tokenizer.json in " + o.tokenizer_from.string() + " (--tokenizer-from)");

  struct Job {
    TensorPlan source;
    bool quantize = false;
    QuantForm form;
  };
  std::vector<Job> jobs;
  std::vector<TensorPlan> plan;
  std::map<std::string, QuantForm> overrides;
  for (auto& t : preset_tensors(*p)) {
    Job j;
    j.source = t;
    j.quantize = o.bits > 0 && t.shape.size() >= 2 && t.shape.back() % o.group_size == 0;
    j.form = {o.bits, o.group_size};
    if (j.quantize && router_weight(t.name)) {
      j.form.bits = 8;
      overrides[t.name.substr(0, t.name.size() - 7)] = j.form;
    }
    if (j.quantize) {
      const std::string module = t.name.substr(0, t.name.size() - 7);
      std::vector<int64_t> packed = t.shape, params = t.shape;
      packed.back() = t.shape.back() * j.form.bits / 32;
      params.back() = t.shape.back() / j.form.group_size;
      plan.push_back({module + ".weight", DType::kU32, packed});
      plan.push_back({module + ".scales", DType::kBF16, params});
      plan.push_back({module + ".biases", DType::kBF16, params});
    } else {
      plan.push_back(t);
    }
    jobs.push_back(std::move(j));
  }
  uint64_t total = 0;
  for (const auto& t : plan) total += t.bytes();
  auto writer = SafetensorsWriter::create(o.output, std::move(plan), o.max_shard_bytes);
  if (!writer) return writer.error();

  ProgressBar progress(total, o.quiet);
  uint64_t done = 0;
  constexpr std::size_t kRowsValues = 1u << 22;  // values generated per step
  std::vector<float> vals, scales, biases;
  std::vector<uint32_t> words;
  std::vector<std::byte> out;
  for (const Job& j : jobs) {
    const TensorPlan& t = j.source;
    const uint64_t key = splitmix64(o.seed ^ name_hash(t.name));
    const Init init = init_for(*p, t);
    const std::size_t cols = static_cast<std::size_t>(t.shape.back());
    std::size_t rows = 1;
    for (std::size_t d = 0; d + 1 < t.shape.size(); ++d) rows *= static_cast<std::size_t>(t.shape[d]);
    const std::size_t step = std::max<std::size_t>(1, kRowsValues / cols);
    if (!j.quantize) {
      for (std::size_t r0 = 0; r0 < rows; r0 += step) {
        const std::size_t nr = std::min(step, rows - r0);
        vals.resize(nr * cols);
        out.resize(vals.size() * 2);
        parallel_rows(nr, [&](std::size_t b, std::size_t e) {
          generate(key, init, uint64_t(r0 + b) * cols, (e - b) * cols, vals.data() + b * cols);
          store_as(DType::kBF16, vals.data() + b * cols, (e - b) * cols, out.data() + b * cols * 2);
        });
        if (auto s = writer->append(out); !s) return s.error();
        progress.update(done += out.size(), t.name);
      }
      continue;
    }
    const std::size_t groups = cols / j.form.group_size, wpr = cols * j.form.bits / 32;
    scales.resize(rows * groups);
    biases.resize(rows * groups);
    for (std::size_t r0 = 0; r0 < rows; r0 += step) {
      const std::size_t nr = std::min(step, rows - r0);
      vals.resize(nr * cols);
      words.resize(nr * wpr);
      // Rows are independent (each value is a function of its index): generate and quantize them on
      // every core; the bytes are the same whatever the thread count.
      parallel_rows(nr, [&](std::size_t b, std::size_t e) {
        generate(key, init, uint64_t(r0 + b) * cols, (e - b) * cols, vals.data() + b * cols);
        // Values as bf16 would hold them, so a quantized model equals `quantize` of the bf16 one.
        for (std::size_t i = b * cols; i < e * cols; ++i) vals[i] = round_to(DType::kBF16, vals[i]);
        for (std::size_t r = b; r < e; ++r)
          quantize_row(vals.data() + r * cols, cols, j.form.bits, j.form.group_size, DType::kBF16, words.data() + r * wpr,
                       scales.data() + (r0 + r) * groups, biases.data() + (r0 + r) * groups);
      });
      if (auto s = writer->append(std::as_bytes(std::span(words))); !s) return s.error();
      progress.update(done += words.size() * 4, t.name);
    }
    for (const auto* v : {&scales, &biases}) {
      out.resize(v->size() * 2);
      store_as(DType::kBF16, v->data(), v->size(), out.data());
      if (auto s = writer->append(out); !s) return s.error();
      progress.update(done += out.size(), t.name);
    }
  }
  if (auto s = writer->finish(); !s) return s.error();
  auto config = preset_config(*p);
  if (o.bits) set_quantization(config, {o.bits, o.group_size}, overrides);
  if (auto s = write_json(config, o.output / "config.json"); !s) return s.error();
  if (auto c = copy_tokenizer_files(o.tokenizer_from, o.output, false); !c) return c.error();
  char line[160];
  std::snprintf(line, sizeof(line), "%s: %.3f GB written to %s", p->name.c_str(), total / 1e9, o.output.string().c_str());
  progress.finish(line);
  return total;
}

}  // namespace sluice::quant
