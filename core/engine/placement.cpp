#include "engine/placement.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "engine/layer_split.h"
#include "engine/runtime.h"
#include "model/transformer.h"

namespace sluice {
namespace {

std::string mib(uint64_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }

Result<std::unique_ptr<BackendHandle>> open_backend(PluginRegistry& registry, const std::string& spec, unsigned threads,
                                                    const std::string& options = "") {
  auto choice = choose_backend(registry, spec);
  if (!choice) return choice.error();
  const auto* rec = registry.find(SL_PLUGIN_BACKEND, choice->name);
  return BackendHandle::open(static_cast<const sl_backend_api*>(rec->descriptor->api), choice->name, choice->device, threads,
                             options);
}

}  // namespace

uint64_t activation_bytes(const ModelConfig& c, const EngineOptions& o) {
  const uint64_t n = static_cast<uint64_t>(std::max(1, o.prefill_size) + std::max(1, o.parallel));
  const uint64_t H = c.hidden_size, QD = uint64_t(c.num_heads) * c.head_dim, KD = uint64_t(c.num_kv_heads) * c.head_dim;
  const uint64_t F = std::max<uint64_t>({uint64_t(c.intermediate_size), uint64_t(c.moe.expert_intermediate), uint64_t(c.moe.shared_intermediate)});
  // MLA's latents and per-head products (q's latent, q before its reorder, the K/V latent twice, kv_b's output).
  const uint64_t mla = c.mla.enabled() ? uint64_t(std::max(1, c.mla.q_lora_rank)) + QD + 2 * uint64_t(c.mla.kv_lora_rank) + c.mla.qk_rope_head_dim +
                                             uint64_t(c.num_heads) * (c.mla.qk_nope_head_dim + c.value_head_dim())
                                       : 0;
  // The latent form's: per head q_nope, q_pe, q_lat, the query and the latent output; k_pe and K.
  const uint64_t KL = uint64_t(c.mla.kv_lora_rank), R = uint64_t(c.mla.qk_rope_head_dim);
  const uint64_t mla_latent = c.mla.enabled() && c.mla.latent_cache
                                  ? uint64_t(c.num_heads) * (c.mla.qk_nope_head_dim + R + KL + (KL + R) + KL) + R + (KL + R)
                                  : 0;
  const uint64_t per_token = 6 * H + 2 * QD + 2 * KD + 3 * F + mla + mla_latent + static_cast<uint64_t>(std::max(1, c.moe.n_experts)) + c.vocab_size;
  return n * per_token * 4;
}

namespace {

// --gpu-layers auto: the most layers whose even split over the devices fits their memory.
Result<uint32_t> auto_layers(const std::vector<std::unique_ptr<BackendHandle>>& devices, const EngineOptions& options,
                             const ModelConfig& config, const SafetensorsSet& tensors, const KvSizing& kv) {
  auto footprint = Transformer::footprint(config, tensors);
  if (!footprint) return footprint.error();
  LayerCosts costs;
  const uint64_t kv_per_layer = kv.bytes_per_token_per_layer * kv.capacity_tokens;
  for (uint64_t w : footprint->layer_bytes) costs.layer_bytes.push_back(w + kv_per_layer);
  costs.embed_bytes = footprint->embed_bytes;
  costs.head_bytes = footprint->head_bytes;
  costs.tied_head = footprint->tied_head;
  const uint64_t activations = activation_bytes(config, options);
  std::vector<uint64_t> budgets;
  for (const auto& d : devices) budgets.push_back(usable_device_bytes(d->device().total_memory, d->device().free_memory, activations));
  const uint32_t n = auto_gpu_layers(costs, budgets);
  if (n == 0) {
    const auto& d = devices.front()->device();
    const uint64_t first_layer = costs.layer_bytes.empty() ? 0 : costs.layer_bytes.front();
    return make_error("--gpu-layers auto: not even one layer fits on " + devices.front()->description() + ": " +
                      mib(budgets.front()) + " usable of " + mib(d.total_memory) + " (a tenth and " + mib(activations) +
                      " of activations kept free); the embedding and layer 0 with its KV cache at " +
                      std::to_string(kv.capacity_tokens) + " positions need " + mib(costs.embed_bytes + first_layer) +
                      " (a smaller --ctx-size or a more compact --kv-codec needs less)");
  }
  return n;
}

}  // namespace

std::string Placement::describe() const {
  if (backends.size() == 1) return backends.front()->description();
  std::string out;
  uint32_t first = 0;
  for (std::size_t i = 0; i < backends.size(); ++i) {
    out += (i ? " + " : "") + backends[i]->description() + " (layers " + std::to_string(first) + "-" +
           std::to_string(first + n_layers[i] - 1) + ")";
    first += n_layers[i];
  }
  return out;
}

Result<Placement> place_layers(PluginRegistry& registry, const EngineOptions& options, const ModelConfig& config,
                               const SafetensorsSet& tensors, const KvSizing& kv) {
  const unsigned threads = options.threads > 0 ? static_cast<unsigned>(options.threads) : std::thread::hardware_concurrency();
  const uint32_t n_layers = static_cast<uint32_t>(std::max(0, config.num_layers));
  Placement p;
  auto gpu = GpuLayers::parse(options.gpu_layers);
  if (!gpu) return gpu.error();
  std::vector<std::string> device_specs;
  if (!options.devices.empty()) {
    auto parsed = parse_devices(options.devices);
    if (!parsed) return parsed.error();
    device_specs = std::move(*parsed);
    if (!options.backend.empty() && options.backend != "auto")
      return make_error("--devices names the backends that run the offloaded layers; drop --backend " + options.backend);
  }
  p.split_requested = gpu->kind != GpuLayers::Kind::kAll || !device_specs.empty();

  auto one_stage = [&](const std::string& spec, const std::string& backend_options) -> Result<Placement> {
    auto be = open_backend(registry, spec, threads, backend_options);
    if (!be) return be.error();
    p.backends.push_back(std::move(*be));
    p.n_layers.push_back(n_layers);
    return std::move(p);
  };
  // Every layer on --backend: exactly the unsplit runtime.
  if (!p.split_requested) return one_stage(options.backend, options.backend_options);
  if (gpu->kind == GpuLayers::Kind::kCount && gpu->count > n_layers)
    return make_error("--gpu-layers " + std::to_string(gpu->count) + ": the model has " + std::to_string(n_layers) + " layers");
  if (gpu->kind == GpuLayers::Kind::kCount && gpu->count == 0) {
    if (!registry.find(SL_PLUGIN_BACKEND, "cpu")) return make_error("--gpu-layers 0 runs every layer on the CPU backend, which is not loaded");
    return one_stage("cpu", "");
  }

  // The offload devices: --devices, else --backend (which must then name a GPU/OpenCL backend).
  if (device_specs.empty()) device_specs.push_back(options.backend.empty() ? "auto" : options.backend);
  std::vector<std::unique_ptr<BackendHandle>> devices;
  for (const auto& spec : device_specs) {
    auto choice = choose_backend(registry, spec);
    if (!choice) return make_error((options.devices.empty() ? "--gpu-layers: " : "--devices: ") + choice.message());
    if (choice->name == "cpu") {
      if (spec == "auto")
        return make_error("--gpu-layers: no GPU or accelerator backend found (--backend auto chose the CPU); name one with "
                          "--backend opencl[:P:D] or --devices, see `sluice devices`");
      return make_error("--gpu-layers places layers on a GPU/OpenCL backend, but --backend cpu runs every layer on the CPU "
                        "(drop --gpu-layers, or choose --backend opencl[:P:D])");
    }
    auto be = open_backend(registry, spec, threads, options.backend_options);
    if (!be) return make_error((options.devices.empty() ? "--gpu-layers: " : "--devices: ") + be.message());
    devices.push_back(std::move(*be));
  }

  uint32_t offloaded = n_layers;  // --devices without --gpu-layers: every layer on the devices
  if (gpu->kind == GpuLayers::Kind::kCount) offloaded = gpu->count;
  if (gpu->kind == GpuLayers::Kind::kAuto) {
    auto n = auto_layers(devices, options, config, tensors, kv);
    if (!n) return n.error();
    offloaded = *n;
  }
  const auto counts = split_evenly(offloaded, static_cast<uint32_t>(devices.size()));
  for (std::size_t d = 0; d < devices.size(); ++d) {
    if (counts[d] == 0) continue;  // fewer layers than devices: the last ones stay unused
    p.backends.push_back(std::move(devices[d]));
    p.n_layers.push_back(counts[d]);
  }
  if (offloaded < n_layers) {
    if (!registry.find(SL_PLUGIN_BACKEND, "cpu"))
      return make_error("--gpu-layers " + std::to_string(offloaded) + ": the other " + std::to_string(n_layers - offloaded) +
                        " layers run on the CPU backend, which is not loaded");
    auto cpu = open_backend(registry, "cpu", threads);
    if (!cpu) return cpu.error();
    p.backends.push_back(std::move(*cpu));
    p.n_layers.push_back(n_layers - offloaded);
  }
  std::fprintf(stderr, "sluice: %u of %u layers offloaded%s: %s\n", offloaded, n_layers,
               gpu->kind == GpuLayers::Kind::kAuto ? " (--gpu-layers auto)" : "", p.describe().c_str());
  return p;
}

}  // namespace sluice
