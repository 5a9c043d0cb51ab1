// Greedy decoding through the llama.cpp peer's libllama, for checking a GGUF written by
// perf/gguf_peer_model.py --weights real against a model folder's golden.json (perf/gguf_peer_check.sh).
//   gguf_peer_check MODEL.gguf N ID,ID,...   prints "logits v0 v1 ..." (the prompt's last position) and
//   "greedy id ..." (N plain-argmax tokens, no EOS stop).
#include <llama.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) { std::fprintf(stderr, "usage: %s MODEL.gguf N ID,ID,...\n", argv[0]); return 2; }
  std::vector<llama_token> ids;
  std::stringstream in(argv[3]);
  for (std::string s; std::getline(in, s, ',');) ids.push_back(std::stoi(s));
  const int n_new = std::atoi(argv[2]);
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) { std::fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256; cp.n_batch = 256; cp.n_threads = 1; cp.n_threads_batch = 1;
  cp.type_k = GGML_TYPE_F32;  // the goldens are float32 throughout: an f16 cache alone errs ~1e-3 on wide weights
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;  // the CPU flash attention rounds Q·K to f16
  llama_context* ctx = llama_init_from_model(model, cp);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  auto argmax = [&](const float* v) { int b = 0; for (int i = 1; i < n_vocab; ++i) if (v[i] > v[b]) b = i; return b; };
  if (llama_decode(ctx, llama_batch_get_one(ids.data(), int(ids.size())))) return 1;
  const float* last = llama_get_logits_ith(ctx, -1);
  std::printf("logits");
  for (int i = 0; i < n_vocab; ++i) std::printf(" %.7g", last[i]);
  std::printf("\ngreedy");
  llama_token t = argmax(last);
  for (int k = 0; k < n_new; ++k) {
    std::printf(" %d", t);
    if (k + 1 == n_new || llama_decode(ctx, llama_batch_get_one(&t, 1))) break;
    t = argmax(llama_get_logits_ith(ctx, -1));
  }
  std::printf("\n");
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
