#include "engine/layer_split.h"

#include <charconv>

namespace sluice {

Result<GpuLayers> GpuLayers::parse(const std::string& text) {
  GpuLayers g;
  if (text.empty()) return g;
  if (text == "auto") {
    g.kind = Kind::kAuto;
    return g;
  }
  uint32_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size())
    return make_error("--gpu-layers: '" + text + "' is not a layer count or 'auto'");
  g.kind = Kind::kCount;
  g.count = n;
  return g;
}

Result<std::vector<std::string>> parse_devices(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const std::string spec = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (spec.empty()) return make_error("--devices: '" + text + "' has an empty entry (expected e.g. opencl:0:0,opencl:0:1)");
    if (spec == "auto") return make_error("--devices: name each device (e.g. opencl:0:0), not 'auto'");
    if (spec == "cpu" || spec.starts_with("cpu:"))
      return make_error("--devices lists GPU/OpenCL devices; the CPU backend runs the layers beyond --gpu-layers by itself");
    out.push_back(spec);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<uint32_t> split_evenly(uint32_t n, uint32_t k) {
  std::vector<uint32_t> out(k, k ? n / k : 0);
  for (uint32_t i = 0; k && i < n % k; ++i) ++out[i];
  return out;
}

uint64_t usable_device_bytes(uint64_t total_memory, uint64_t free_memory, uint64_t activation_bytes) {
  const uint64_t available = free_memory ? free_memory : total_memory;
  const uint64_t reserve = total_memory / 10 + activation_bytes;
  return available > reserve ? available - reserve : 0;
}

uint32_t auto_gpu_layers(const LayerCosts& costs, std::span<const uint64_t> budgets) {
  const uint32_t n_layers = static_cast<uint32_t>(costs.layer_bytes.size());
  const uint32_t n_devices = static_cast<uint32_t>(budgets.size());
  for (uint32_t n = n_layers; n > 0; --n) {
    const auto counts = split_evenly(n, n_devices);
    uint32_t first = 0;
    bool fits = true;
    for (uint32_t d = 0; d < n_devices && fits; ++d) {
      if (counts[d] == 0) continue;
      uint64_t need = 0;
      for (uint32_t i = first; i < first + counts[d]; ++i) need += costs.layer_bytes[i];
      if (first == 0) need += costs.embed_bytes;
      if (first + counts[d] == n_layers) need += costs.head_bytes + (costs.tied_head && first != 0 ? costs.embed_bytes : 0);
      fits = need <= budgets[d];
      first += counts[d];
    }
    if (fits) return n;
  }
  return 0;
}

}  // namespace sluice
