// Fuzzes ModelConfig::load: the input is config.json, or config.json, a NUL byte and
// generation_config.json. Checks that an accepted config is self-consistent and that what the model
// builds from it first (the rope frequency table) comes out finite.
#include <cmath>

#include "fuzz_support.h"
#include "model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  bool has_generation = false;
  auto [config, generation] = fuzz::split_at_nul(input, &has_generation);
  const auto dir = fuzz::scratch_dir() / "model";
  std::filesystem::create_directories(dir);
  fuzz::write_file(dir / "config.json", config);
  if (has_generation) fuzz::write_file(dir / "generation_config.json", generation);
  else std::filesystem::remove(dir / "generation_config.json");

  auto c = ModelConfig::load(dir);
  if (!c) {
    FUZZ_CHECK(!c.message().empty());
    return 0;
  }
  FUZZ_CHECK(c->vocab_size > 0 && c->hidden_size > 0 && c->intermediate_size >= 0 && c->num_layers > 0);
  FUZZ_CHECK(c->num_heads > 0 && c->num_kv_heads > 0 && c->num_heads % c->num_kv_heads == 0);
  FUZZ_CHECK(c->head_dim > 0 && c->head_dim % 2 == 0);
  FUZZ_CHECK(c->max_position_embeddings > 0);
  FUZZ_CHECK(c->norm_eps > 0);
  FUZZ_CHECK(static_cast<int>(c->layer_window.size()) == c->num_layers);
  for (int w : c->layer_window) FUZZ_CHECK(w >= 0);
  if (c->moe.enabled()) {
    FUZZ_CHECK(c->moe.top_k > 0 && c->moe.top_k <= c->moe.n_experts && c->moe.expert_intermediate > 0);
    FUZZ_CHECK(static_cast<int>(c->moe.sparse_layer.size()) == c->num_layers);
  }
  // A config may leave the dense MLP's width out only where no layer has a dense MLP (Qwen3.5-MoE).
  for (int l = 0; l < c->num_layers; ++l) {
    const bool dense_mlp = !c->moe.enabled() || !c->moe.sparse_layer[l] || c->moe.dense_beside;
    if (dense_mlp) FUZZ_CHECK(c->intermediate_size > 0, "layer %d has a dense MLP of width %d", l, c->intermediate_size);
  }
  // The tables the forward pass builds at load, one a layer: a config the reader accepts must not make
  // them absurd. A proportional rope (Gemma 4's full layers) keeps its trailing angles at 0 by design.
  for (int l = 0; l < c->num_layers; ++l) {
    const RopeConfig& r = c->rope_of(l);
    const int rotary = c->rotary_dim_of(l);
    FUZZ_CHECK(rotary > 0 && rotary % 2 == 0 && rotary <= c->head_dim_of(l));
    const bool zeros_allowed = r.scaling == RopeScaling::kProportional;
    for (float f : r.inverse_frequencies(rotary))
      FUZZ_CHECK(std::isfinite(f) && (f > 0 || (zeros_allowed && f == 0)), "inverse frequency %g", f);
    FUZZ_CHECK(std::isfinite(r.attention_scaling()));
  }
  return 0;
}
