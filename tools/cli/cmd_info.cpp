// sluice info: architecture, parameters, bits per weight, bytes and KV bytes per token of a model folder.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "model_options.h"
#include "model_source.h"
#include "plugin/plugin_registry.h"
#include "quant/model_info.h"
#include "util/json.h"

namespace sluice::cli {

int run_info(const Args& args) {
  std::string dir, plugin_dir;
  bool as_json = false;
  po::options_description desc("info options");
  desc.add_options()
      ("help", "this help")
      ("model", po::value(&dir)->required(), "model folder or hub id org/name[@revision]")
      ("plugin-dir", po::value(&plugin_dir), "where to look for kvcodec plugins (default: next to the binary)")
      ("json", po::bool_switch(&as_json), "one JSON object");
  po::variables_map vm;
  if (int rc = parse_or_exit("info", args, desc, vm, "--model DIR [--json]"); rc >= 0) return rc;
  auto model = resolve_model_arg("info", dir);
  if (!model) return 1;
  dir = model->dir;
  PluginRegistry registry;
  if (plugin_dir.empty()) {
    for (const auto& d : PluginRegistry::default_dirs()) registry.scan(d);
  } else {
    registry.scan(plugin_dir);
  }
  auto m = quant::inspect_model(dir, &registry);
  if (!m) {
    std::cerr << "sluice info: " << m.message() << "\n";
    return 1;
  }
  if (as_json) {
    std::printf("{\"architecture\":%s,\"layers\":%d,\"hidden\":%d,\"heads\":%d,\"kv_heads\":%d,\"head_dim\":%d,\"vocab\":%d,"
                "\"experts\":%d,\"experts_per_token\":%d,\"params\":%llu,\"active_params\":%llu,\"bytes\":%llu,"
                "\"bits_per_weight\":%.4f,\"quantized_params\":%llu,\"quantized_bits_per_weight\":%.4f,\"forms\":{",
                json::quote(m->architecture).c_str(), m->layers, m->hidden, m->heads, m->kv_heads, m->head_dim, m->vocab,
                m->experts, m->experts_per_token, (unsigned long long)m->params, (unsigned long long)m->active_params(),
                (unsigned long long)m->bytes, m->bits_per_weight(), (unsigned long long)m->quantized_params,
                m->quantized_bits_per_weight());
    bool first = true;
    for (const auto& [form, n] : m->forms) {
      std::printf("%s%s:%d", first ? "" : ",", json::quote(form).c_str(), n);
      first = false;
    }
    std::printf("},\"kv_bytes_per_token\":{");
    first = true;
    for (const auto& k : m->kv) {
      std::printf("%s%s:%llu", first ? "" : ",", json::quote(k.name).c_str(), (unsigned long long)k.bytes_per_token);
      first = false;
    }
    std::printf("},\"sliding_layers\":%d,\"window\":%d,\"kv_window_bytes_per_sequence\":{", m->sliding_layers, m->window);
    first = true;
    for (const auto& k : m->kv) {
      std::printf("%s%s:%llu", first ? "" : ",", json::quote(k.name).c_str(), (unsigned long long)k.window_bytes_per_sequence);
      first = false;
    }
    std::printf("},\"linear_layers\":%d,\"state_bytes_per_sequence\":%llu}\n", m->linear_layers,
                (unsigned long long)m->state_bytes_per_sequence);
    return 0;
  }
  std::printf("architecture      %s\n", m->architecture.c_str());
  std::printf("shape             %d layers, hidden %d, %d/%d heads, head_dim %d, FFN %d, vocab %d%s\n", m->layers, m->hidden,
              m->heads, m->kv_heads, m->head_dim, m->ffn, m->vocab, m->tied ? ", tied embeddings" : "");
  if (m->experts)
    std::printf("experts           %d, %d per token\n", m->experts, m->experts_per_token);
  std::printf("parameters        %.1f M", m->params / 1e6);
  if (m->experts) std::printf(" (%.1f M active per token)", m->active_params() / 1e6);
  std::printf("\nweights           %.1f MB in %d tensors, %d file%s\n", m->bytes / 1e6, m->tensors, m->files, m->files == 1 ? "" : "s");
  std::printf("bits per weight   %.3f overall", m->bits_per_weight());
  if (m->quantized_params) std::printf(", %.3f in the quantized matrices", m->quantized_bits_per_weight());
  std::printf("\nmatrices          ");
  bool first = true;
  for (const auto& [form, n] : m->forms) {
    std::printf("%s%d × %s", first ? "" : ", ", n, form.c_str());
    first = false;
  }
  std::printf("\nKV bytes/token    ");
  first = true;
  for (const auto& k : m->kv) {
    std::printf("%s%s %llu (%.3g bits)", first ? "" : ", ", k.name.c_str(), (unsigned long long)k.bytes_per_token, k.bits_per_value);
    first = false;
  }
  if (m->sliding_layers > 0) {  // those layers keep only their window's pages: bytes per sequence, not per token
    std::printf("\n  + %d sliding-window layer%s (window %d), per sequence: ", m->sliding_layers, m->sliding_layers == 1 ? "" : "s",
                m->window);
    first = true;
    for (const auto& k : m->kv) {
      std::printf("%s%s %llu", first ? "" : ", ", k.name.c_str(), (unsigned long long)k.window_bytes_per_sequence);
      first = false;
    }
  }
  if (m->linear_layers > 0)
    std::printf("\n  + %d linear-attention layer%s: state %llu bytes per sequence", m->linear_layers, m->linear_layers == 1 ? "" : "s",
                (unsigned long long)m->state_bytes_per_sequence);
  std::printf("\n");
  return 0;
}

}  // namespace sluice::cli
