#include "quant/expert_repack.h"

#include <set>

#include "model/expert_layout.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "quant/model_files.h"
#include "quant/safetensors_writer.h"
#include "util/json.h"

namespace sluice::quant {
namespace {

// The names the expert layout looks for, per projection.
std::string expert_module(const ModelConfig& c, int layer, uint32_t expert, int projection) {
  static const char* hf[3] = {"gate_proj", "up_proj", "down_proj"};
  static const char* mixtral[3] = {"w1", "w3", "w2"};
  const bool is_mixtral = c.architecture == "mixtral";
  return "model.layers." + std::to_string(layer) + (is_mixtral ? ".block_sparse_moe.experts." : ".mlp.experts.") +
         std::to_string(expert) + "." + (is_mixtral ? mixtral[projection] : hf[projection]);
}

DType dtype_of(uint32_t d) {
  switch (d) {
    case SL_DTYPE_F32: return DType::kF32;
    case SL_DTYPE_F16: return DType::kF16;
    case SL_DTYPE_U32: return DType::kU32;
    default: return DType::kBF16;
  }
}

}  // namespace

Result<RepackStats> repack_experts(const std::filesystem::path& in, const std::filesystem::path& out, bool quiet) {
  auto config = ModelConfig::load(in);
  if (!config) return config.error();
  if (!config->moe.enabled()) return make_error(in.string() + ": not a Mixture-of-Experts model; nothing to repack");
  auto tensors = SafetensorsSet::open_dir(in);
  if (!tensors) return tensors.error();
  auto layout = ExpertLayout::find(*config, *tensors);
  if (!layout) return layout.error();
  if (layout->form() != ExpertLayout::Form::kSeparate)
    return make_error(in.string() + ": gpt-oss's fused experts are read as they are stored; repacking them is not supported");

  // Which stored tensors hold experts (their bytes are rewritten below).
  std::set<std::string> expert_tensors;
  for (const auto& [name, t] : tensors->tensors()) {
    const bool stacked = name.find(".mlp.switch_mlp.") != std::string::npos;
    const bool per_expert = name.find(".mlp.experts.") != std::string::npos || name.find(".block_sparse_moe.experts.") != std::string::npos;
    if (stacked || per_expert) expert_tensors.insert(name);
  }

  std::vector<TensorPlan> plan;
  std::vector<std::pair<const std::byte*, uint64_t>> sources;  // bytes of each planned tensor, in order
  for (const auto& [name, t] : tensors->tensors()) {
    if (expert_tensors.count(name)) continue;
    plan.push_back({name, t.dtype, t.shape});
    sources.emplace_back(t.data, t.bytes);
  }
  const auto& files = tensors->files();
  std::vector<const std::byte*> file_base(files.size(), nullptr);
  for (const auto& [name, t] : tensors->tensors()) file_base[t.file_index] = t.data - t.file_offset;
  RepackStats stats;
  const char* suffixes[3] = {".weight", ".scales", ".biases"};
  const uint32_t per_projection = layout->n_parts() / 3;
  for (uint32_t l = 0; l < layout->n_moe_layers(); ++l) {
    for (uint32_t e = 0; e < layout->n_experts(); ++e) {
      for (int p = 0; p < 3; ++p) {
        const auto& proj = layout->projection(l, static_cast<ExpertLayout::Projection>(p));
        for (uint32_t k = 0; k < per_projection; ++k) {
          const auto& part = layout->part(l, e, static_cast<uint32_t>(p) * per_projection + k);
          std::vector<int64_t> shape;
          DType dtype;
          if (!proj.quantized()) {
            shape = {proj.rows, proj.cols};
            dtype = dtype_of(proj.dtype);
          } else if (k == 0) {
            shape = {proj.rows, static_cast<int64_t>(proj.cols) * proj.bits / 32};
            dtype = DType::kU32;
          } else {
            shape = {proj.rows, proj.cols / proj.group_size};
            dtype = dtype_of(proj.scale_dtype);
          }
          plan.push_back({expert_module(*config, layout->model_layer(l), e, p) + suffixes[k], dtype, shape});
          if (plan.back().bytes() != part.bytes)
            return make_error("expert " + std::to_string(e) + " of layer " + std::to_string(layout->model_layer(l)) + ": " +
                              plan.back().name + " would be " + std::to_string(plan.back().bytes()) + " bytes, the source holds " +
                              std::to_string(part.bytes));
          sources.emplace_back(file_base[part.file_index] + part.offset, part.bytes);
          stats.bytes += part.bytes;
        }
      }
      ++stats.experts;
    }
  }
  stats.tensors = plan.size();

  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return make_error("cannot create " + out.string() + ": " + ec.message());
  auto writer = SafetensorsWriter::create(out, plan);
  if (!writer) return writer.error();
  uint64_t total = 0, done = 0;
  for (const auto& s : sources) total += s.second;
  ProgressBar bar(total, quiet);
  for (std::size_t i = 0; i < sources.size(); ++i) {
    constexpr uint64_t kChunk = 8u << 20;
    for (uint64_t at = 0; at < sources[i].second; at += kChunk) {
      const uint64_t n = std::min(kChunk, sources[i].second - at);
      if (auto s = writer->append(std::span<const std::byte>(sources[i].first + at, n)); !s) return s.error();
      done += n;
      bar.update(done, plan[i].name);
    }
  }
  if (auto s = writer->finish(); !s) return s.error();
  bar.finish("repacked " + std::to_string(stats.experts) + " experts");

  // config.json: the same, with any quantization override of a stacked projection repeated for the
  // per-expert modules that replace it.
  auto doc = json::parse_file(in / "config.json");
  if (!doc) return doc.error();
  for (const char* block : {"quantization", "quantization_config"}) {
    if (!doc->HasMember(block) || !(*doc)[block].IsObject()) continue;
    rapidjson::Value& q = (*doc)[block];
    std::vector<std::pair<std::string, rapidjson::Value>> added;
    for (uint32_t l = 0; l < layout->n_moe_layers(); ++l)
      for (int p = 0; p < 3; ++p) {
        static const char* mlx[3] = {"gate_proj", "up_proj", "down_proj"};
        const std::string stacked = "model.layers." + std::to_string(layout->model_layer(l)) + ".mlp.switch_mlp." + mlx[p];
        if (!q.HasMember(stacked.c_str())) continue;
        for (uint32_t e = 0; e < layout->n_experts(); ++e)
          added.emplace_back(expert_module(*config, layout->model_layer(l), e, p), rapidjson::Value(q[stacked.c_str()], doc->GetAllocator()));
      }
    for (auto& [name, value] : added) q.AddMember(rapidjson::Value(name.c_str(), doc->GetAllocator()), value, doc->GetAllocator());
  }
  if (auto s = write_json(*doc, out / "config.json"); !s) return s.error();
  if (auto copied = copy_tokenizer_files(in, out); !copied) return copied.error();
  return stats;
}

}  // namespace sluice::quant
