#include "model/families/gpt_oss.h"

#include <string>

#include "model/families/shared_bindings.h"

namespace sluice::families {

Status GptOss::bind_layer(WeightSource& src, const ModelConfig& c, int layer, bool sparse, LayerWeights& w) const {
  // transformers' GptOssDecoderLayer always has the MoE block; there is no dense MLP to bind.
  if (!sparse) return make_error("gpt_oss layer " + std::to_string(layer) + " has no Mixture-of-Experts block: every gpt-oss layer has one");
  if (auto s = Llama::bind_layer(src, c, layer, sparse, w); !s) return s;
  const std::string p = layer_prefix(layer) + "self_attn.";
  if (c.attention_bias) {  // a missing bias would silently change every product
    for (auto [has, name] : {std::pair{w.has_q_bias, "q_proj"}, {w.has_k_bias, "k_proj"}, {w.has_v_bias, "v_proj"}, {w.has_o_bias, "o_proj"}})
      if (!has) return make_error("model is missing tensor '" + p + name + ".bias' (attention_bias is true)");
  }
  auto sinks = src.values(p + "sinks", {c.num_heads});
  if (!sinks) return sinks.error();
  w.sink_values = std::move(*sinks);
  return {};
}

std::string GptOss::router_module(const ModelConfig&, int layer) const { return layer_prefix(layer) + "mlp.router"; }

}  // namespace sluice::families
